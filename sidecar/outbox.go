package sidecar

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// outbox holds telemetry waiting to be published to JetStream, bounded in
// bytes: when full, a queued report is dropped first (a newer one follows
// every interval), then the oldest events and acks (all counted).
// Only the newest report is kept: a report is a snapshot, so an unsent
// older one is replaced rather than queued.
type outbox struct {
	mu      sync.Mutex
	items   []outMsg
	bytes   int
	max     int
	dropped int64
}

type outMsg struct {
	subject string
	id      string // JetStream message id (dedup within the stream's window)
	data    []byte
	report  bool
}

func newOutbox(maxBytes int) *outbox { return &outbox{max: maxBytes} }

// add queues m, dropping the oldest messages while over the bound.
func (o *outbox) add(m outMsg) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if m.report {
		for i, it := range o.items {
			if it.report {
				o.bytes -= len(it.data)
				o.items = append(o.items[:i], o.items[i+1:]...)
				o.dropped++
				break
			}
		}
	}
	o.items = append(o.items, m)
	o.bytes += len(m.data)
	for o.bytes > o.max && len(o.items) > 1 {
		// A queued report goes first (the next one replaces it anyway),
		// then the oldest events and acks.
		drop := 0
		for i, it := range o.items {
			if it.report {
				drop = i // even the one just added: events are not repeated, reports are
				break
			}
		}
		o.bytes -= len(o.items[drop].data)
		o.items = append(o.items[:drop], o.items[drop+1:]...)
		o.dropped++
	}
}

func (o *outbox) peek() (outMsg, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.items) == 0 {
		return outMsg{}, false
	}
	return o.items[0], true
}

// pop removes m if it is still at the head (add may have dropped it).
func (o *outbox) pop(m outMsg) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.items) > 0 && o.items[0].id == m.id && o.items[0].subject == m.subject {
		o.bytes -= len(o.items[0].data)
		o.items[0] = outMsg{}
		o.items = o.items[1:]
	}
}

func (o *outbox) stats() (queued int, bytes int, dropped int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.items), o.bytes, o.dropped
}

// flush publishes queued messages in order until the queue is empty or a
// publish fails (the failed message stays at the head). It returns the
// number published and the first error.
func (o *outbox) flush(ctx context.Context, js jetstream.JetStream) (int, error) {
	n := 0
	for {
		m, ok := o.peek()
		if !ok {
			return n, nil
		}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := js.PublishMsg(pctx, &nats.Msg{Subject: m.subject, Data: m.data,
			Header: nats.Header{jetstream.MsgIDHeader: []string{m.id}}})
		cancel()
		if err != nil {
			return n, err
		}
		o.pop(m)
		n++
	}
}
