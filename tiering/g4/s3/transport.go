package s3

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// stallError is returned by a request (or a read of its response body)
// during which no byte moved in either direction for the idle deadline. It
// wraps tier.ErrUnavailable.
type stallError struct {
	method string
	idle   time.Duration
}

// Error implements error.
func (e *stallError) Error() string {
	return fmt.Sprintf("%s request: no byte sent or received within %v (server unreachable or hung)", e.method, e.idle)
}

// Unwrap makes a stall match tier.ErrUnavailable.
func (e *stallError) Unwrap() error { return tier.ErrUnavailable }

// RequestStats counts the HTTP requests a Store sent (every attempt,
// retries included) and the payload bytes moved.
type RequestStats struct {
	Get, Put, Head, Delete, List, Post, Other uint64 // requests by kind (List: a GET with list-type or prefix)
	Failed                                    uint64 // attempts that ended without a response (refused, reset, stalled)
	BytesSent                                 uint64 // request body bytes read by the transport
	BytesReceived                             uint64 // response body bytes read by the client
}

// Total returns the number of requests of every kind.
func (s RequestStats) Total() uint64 {
	return s.Get + s.Put + s.Head + s.Delete + s.List + s.Post + s.Other
}

// requestCounters are the live counters behind RequestStats.
type requestCounters struct {
	get, put, head, del, list, post, other, failed, sent, recv atomic.Uint64
}

func (c *requestCounters) snapshot() RequestStats {
	return RequestStats{
		Get: c.get.Load(), Put: c.put.Load(), Head: c.head.Load(), Delete: c.del.Load(),
		List: c.list.Load(), Post: c.post.Load(), Other: c.other.Load(), Failed: c.failed.Load(),
		BytesSent: c.sent.Load(), BytesReceived: c.recv.Load(),
	}
}

func (c *requestCounters) count(req *http.Request) {
	switch req.Method {
	case http.MethodGet:
		if q := req.URL.Query(); q.Has("list-type") || q.Has("prefix") {
			c.list.Add(1)
		} else {
			c.get.Add(1)
		}
	case http.MethodPut:
		c.put.Add(1)
	case http.MethodHead:
		c.head.Add(1)
	case http.MethodDelete:
		c.del.Add(1)
	case http.MethodPost:
		c.post.Add(1)
	default:
		c.other.Add(1)
	}
}

// idleTransport is the http.RoundTripper under the minio-go client. It
// gives every request attempt an idle deadline: the attempt is cancelled
// when no byte of its request body is read and no byte of its response
// arrives for idle — covering connect, TLS, time to first byte and stalls
// mid-body, without capping a long transfer that keeps moving. It also
// counts requests for RequestStats.
type idleTransport struct {
	base  http.RoundTripper
	idle  time.Duration
	stats *requestCounters
}

// RoundTrip implements http.RoundTripper.
func (t *idleTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.stats.count(req)
	ctx, cancel := context.WithCancel(req.Context())
	w := newWatchdog(t.idle, cancel)
	r2 := req.WithContext(ctx)
	if req.Body != nil && req.Body != http.NoBody {
		r2.Body = &progressBody{rc: req.Body, w: w, n: &t.stats.sent}
	}
	resp, err := t.base.RoundTrip(r2)
	if err != nil {
		t.stats.failed.Add(1)
		w.stop()
		cancel()
		if w.fired.Load() {
			return nil, &stallError{method: req.Method, idle: t.idle}
		}
		return nil, err
	}
	w.kick()
	resp.Body = &responseBody{progressBody: progressBody{rc: resp.Body, w: w, n: &t.stats.recv}, cancel: cancel, method: req.Method, idle: t.idle}
	return resp, nil
}

// watchdog cancels a request when its progress clock is older than idle.
// The timer re-arms itself for the remaining time rather than being reset
// on every read.
type watchdog struct {
	idle   time.Duration
	last   atomic.Int64 // time.Now().UnixNano() of the last progress
	fired  atomic.Bool
	cancel context.CancelFunc

	mu    sync.Mutex
	timer *time.Timer
	done  bool
}

func newWatchdog(idle time.Duration, cancel context.CancelFunc) *watchdog {
	w := &watchdog{idle: idle, cancel: cancel}
	w.kick()
	w.mu.Lock()
	w.timer = time.AfterFunc(idle, w.check)
	w.mu.Unlock()
	return w
}

func (w *watchdog) kick() { w.last.Store(time.Now().UnixNano()) }

func (w *watchdog) check() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return
	}
	since := time.Duration(time.Now().UnixNano() - w.last.Load())
	if since >= w.idle {
		w.done = true
		w.fired.Store(true)
		w.cancel()
		return
	}
	w.timer.Reset(w.idle - since)
}

func (w *watchdog) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
	if w.timer != nil {
		w.timer.Stop()
	}
}

// progressBody counts bytes and kicks the watchdog on every read that
// moves data.
type progressBody struct {
	rc io.ReadCloser
	w  *watchdog
	n  *atomic.Uint64
}

// Read implements io.Reader.
func (b *progressBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 {
		b.w.kick()
		b.n.Add(uint64(n))
	}
	return n, err
}

// Close closes the wrapped body.
func (b *progressBody) Close() error { return b.rc.Close() }

// responseBody ends the watchdog at EOF and releases the request context
// on Close; a read cut off by the watchdog reports a stallError.
type responseBody struct {
	progressBody
	cancel context.CancelFunc
	method string
	idle   time.Duration
	once   sync.Once
}

// Read implements io.Reader (see responseBody).
func (b *responseBody) Read(p []byte) (int, error) {
	n, err := b.progressBody.Read(p)
	switch {
	case err == io.EOF:
		b.w.stop()
	case err != nil && b.w.fired.Load():
		err = &stallError{method: b.method, idle: b.idle}
	}
	return n, err
}

// Close closes the body, stops the watchdog and releases the request context.
func (b *responseBody) Close() error {
	err := b.rc.Close()
	b.once.Do(func() {
		b.w.stop()
		b.cancel()
	})
	return err
}
