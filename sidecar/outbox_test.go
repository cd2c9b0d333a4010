package sidecar

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ctxmem/ctxmemd/sidecar/bus"
)

func ev(id string, n int) outMsg {
	return outMsg{subject: "ev", id: id, data: make([]byte, n)}
}

func rep(id string, n int) outMsg {
	return outMsg{subject: "rep", id: id, data: make([]byte, n), report: true}
}

// ids lists the queued message ids, head first.
func (o *outbox) ids() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	for _, m := range o.items {
		out = append(out, m.id)
	}
	return out
}

func checkOutbox(t *testing.T, o *outbox, wantIDs []string, wantBytes int, wantDropped int64) {
	t.Helper()
	q, b, d := o.stats()
	if got := o.ids(); !slices.Equal(got, wantIDs) || q != len(wantIDs) || b != wantBytes || d != wantDropped {
		t.Fatalf("outbox %v (%d msgs, %d bytes, %d dropped), want %v (%d bytes, %d dropped)",
			got, q, b, d, wantIDs, wantBytes, wantDropped)
	}
}

func TestOutboxBoundInBytesDropsOldestFirst(t *testing.T) {
	o := newOutbox(350)
	for i := 1; i <= 3; i++ {
		o.add(ev(fmt.Sprint(i), 100))
	}
	checkOutbox(t, o, []string{"1", "2", "3"}, 300, 0)
	o.add(ev("4", 100)) // 400 > 350: the oldest goes
	checkOutbox(t, o, []string{"2", "3", "4"}, 300, 1)
	o.add(ev("5", 250)) // 550: drop 2 (450), drop 3 (350)
	checkOutbox(t, o, []string{"4", "5"}, 350, 3)
	// A single message larger than the bound is kept on its own (it is
	// the newest; the bound drops older ones, never the one just added).
	o.add(ev("big", 1000))
	checkOutbox(t, o, []string{"big"}, 1000, 5)
	o.add(ev("6", 10))
	checkOutbox(t, o, []string{"6"}, 10, 6)
}

func TestOutboxKeepsOnlyNewestReport(t *testing.T) {
	o := newOutbox(1 << 20)
	o.add(rep("r1", 50))
	o.add(ev("e1", 10))
	o.add(ev("e2", 10))
	o.add(rep("r2", 60)) // replaces r1 (counted as dropped); events stay in order
	checkOutbox(t, o, []string{"e1", "e2", "r2"}, 80, 1)
	o.add(ev("e3", 10))
	o.add(rep("r3", 70))
	checkOutbox(t, o, []string{"e1", "e2", "e3", "r3"}, 100, 2)
	// Reports and the byte bound together: the new report replaces the
	// old one, and over the bound the report goes before any event
	// (events are not sent again, a report is, every interval).
	o2 := newOutbox(100)
	o2.add(ev("e1", 40))
	o2.add(rep("r1", 40))
	o2.add(ev("e2", 20))
	o2.add(rep("r2", 60)) // r1 replaced (e1 e2 r2 = 120 bytes), then r2 dropped
	checkOutbox(t, o2, []string{"e1", "e2"}, 60, 2)
}

func TestOutboxPopAfterHeadDropped(t *testing.T) {
	o := newOutbox(250)
	o.add(ev("1", 100))
	o.add(ev("2", 100))
	head, ok := o.peek() // a flush is publishing "1"...
	if !ok || head.id != "1" {
		t.Fatalf("peek %v %v", head.id, ok)
	}
	o.add(ev("3", 100)) // ...while add drops it to make room
	checkOutbox(t, o, []string{"2", "3"}, 200, 1)
	o.pop(head) // the published "1" is gone already: pop must not remove "2"
	checkOutbox(t, o, []string{"2", "3"}, 200, 1)
	// Same id on another subject is another message.
	o.pop(outMsg{subject: "other", id: "2"})
	checkOutbox(t, o, []string{"2", "3"}, 200, 1)
	h, _ := o.peek()
	o.pop(h)
	checkOutbox(t, o, []string{"3"}, 100, 1)
	h, _ = o.peek()
	o.pop(h)
	checkOutbox(t, o, nil, 0, 1)
	if _, ok := o.peek(); ok {
		t.Fatal("peek on an empty outbox")
	}
	o.pop(h) // pop on empty is a no-op
	checkOutbox(t, o, nil, 0, 1)
}

// TestOutboxFlush publishes to a real JetStream: in order, with the
// message ids as dedup ids; a failed publish leaves the message at the
// head and stops the flush.
func TestOutboxFlush(t *testing.T) {
	emb, err := bus.StartEmbedded(bus.EmbeddedOptions{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emb.Shutdown)
	nc, err := bus.Connect(bus.Options{Embedded: emb, Name: "outbox-test"}, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OB", Subjects: []string{"ob.>"}, Duplicates: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	o := newOutbox(1 << 20)
	o.add(outMsg{subject: "ob.a", id: "1", data: []byte("one")})
	o.add(outMsg{subject: "ob.b", id: "2", data: []byte("two")})
	o.add(outMsg{subject: "ob.a", id: "1", data: []byte("dup")}) // same id: deduplicated by the stream
	o.add(outMsg{subject: "nostream.x", id: "3", data: []byte("three")})
	o.add(outMsg{subject: "ob.c", id: "4", data: []byte("four")})
	n, err := o.flush(ctx, js)
	if err == nil || n != 3 {
		t.Fatalf("flush: %d published, err %v; want 3 and an error for the subject without a stream", n, err)
	}
	checkOutbox(t, o, []string{"3", "4"}, 9, 0)
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Fatalf("stream holds %d messages, want 2 (the duplicate id dropped)", info.State.Msgs)
	}
	for seq, want := range map[uint64]string{1: "one", 2: "two"} {
		m, err := st.GetMsg(ctx, seq)
		if err != nil || string(m.Data) != want {
			t.Fatalf("seq %d: %v %q, want %q", seq, err, m.Data, want)
		}
	}
	o.pop(outMsg{subject: "nostream.x", id: "3"}) // give up on it
	if n, err := o.flush(ctx, js); err != nil || n != 1 {
		t.Fatalf("second flush: %d %v", n, err)
	}
	checkOutbox(t, o, nil, 0, 0)
}
