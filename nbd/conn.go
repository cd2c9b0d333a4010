package nbd

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// conn is one client connection.
//
// Goroutines (all owned by serve, which returns after they stop):
//   - serve itself: the handshake, then transmit, which waits for the
//     others;
//   - the reader (see transmit.go), which decodes requests and either runs
//     them inline or hands them to the workers — normally one goroutine,
//     replaced by a new one when an inline request stalls;
//   - Options.Workers workers, which run the requests handed to them;
//   - a watcher, which starts the shutdown when Serve's context ends.
//
// Replies go out in the order requests complete (see reply.go).
type conn struct {
	srv *Server
	nc  net.Conn
	br  *bufio.Reader // the reader's; the handshake's before it
	bw  *bufio.Writer // handshake only
	log *slog.Logger

	sess *session
	mem  *budget
	work chan *op // requests for the workers

	// Reader state (see transmit.go). inlineOff and tokSeq belong to the
	// goroutine that is the reader at the time.
	inlineOff int           // requests still to hand to the workers after a slow inline one
	tokSeq    uint64        // last inline token issued
	inlineTok atomic.Uint64 // token of the inline request running, 0 if none
	stuck     *time.Timer   // fires takeOver when an inline request stalls
	readers   sync.WaitGroup
	readDone  chan struct{} // closed when the request stream has ended

	wmu     sync.Mutex
	pending []*op // replies waiting for the socket
	spare   []*op
	writing bool // a goroutine is writing replies
	wfailed bool // a write failed: replies are dropped
	bufs    net.Buffers

	opCtx    context.Context // backend calls; cancelled ShutdownGrace after shutdown starts
	opCancel context.CancelFunc

	stopOnce sync.Once
	stopping chan struct{} // closed when shutdown starts
	done     chan struct{} // closed when serve returns
}

func (s *Server) newConn(nc net.Conn) *conn {
	ctx, cancel := context.WithCancel(context.Background())
	return &conn{
		srv: s, nc: nc,
		br:    bufio.NewReaderSize(nc, 128<<10),
		bw:    bufio.NewWriterSize(nc, 4<<10),
		log:   s.log.With("remote", remoteName(nc)),
		opCtx: ctx, opCancel: cancel,
		stopping: make(chan struct{}),
		done:     make(chan struct{}),
	}
}

func remoteName(nc net.Conn) string {
	if a := nc.RemoteAddr(); a != nil && a.String() != "" {
		return a.String()
	}
	return "unix"
}

// shutdown starts an orderly close: no more requests are read, requests in
// flight finish (for up to ShutdownGrace) and are answered.
func (c *conn) shutdown() {
	c.stopOnce.Do(func() {
		close(c.stopping)
		_ = c.nc.SetReadDeadline(time.Now())
	})
}

// serve runs the connection until the client disconnects, a protocol error
// or ctx ends (then shutdown).
func (c *conn) serve(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait() // runs last: the watcher exits once done is closed
	defer close(c.done)
	defer c.opCancel()
	defer c.nc.Close()
	wg.Add(1)
	go func() { // watcher
		defer wg.Done()
		select {
		case <-ctx.Done():
			c.shutdown()
		case <-c.stopping:
		case <-c.done:
			return
		}
		t := time.NewTimer(c.srv.opts.ShutdownGrace)
		defer t.Stop()
		select {
		case <-t.C:
			c.log.Warn("requests still running after the shutdown grace period; cancelling them")
			c.opCancel()
			c.nc.Close()
		case <-c.done:
		}
	}()

	_ = c.nc.SetDeadline(time.Now().Add(c.srv.opts.HandshakeTimeout))
	sess, err := c.handshake()
	if err != nil {
		if !errors.Is(err, errAbort) && !errors.Is(err, io.EOF) {
			c.log.Debug("handshake failed", "err", err)
		}
		return
	}
	_ = c.nc.SetDeadline(time.Time{})
	select {
	case <-c.stopping: // shutdown raced with the deadline reset
		_ = c.nc.SetReadDeadline(time.Now())
	default:
	}
	c.sess = sess
	c.log.Debug("transmission", "export", sess.exp.Name, "structured", sess.structured,
		"base_allocation", sess.metaAlloc, "enforce_alignment", sess.align)
	c.transmit()
}
