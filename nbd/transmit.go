package nbd

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/pojntfx/go-nbd/pkg/protocol"
)

// The transmission phase. One reader goroutine decodes requests (and reads
// WRITE payloads). Small READs and WRITEs run inline in the reader: on a
// block that is in G2 they take a few microseconds, less than handing the
// request to another goroutine costs, and their replies are sent in one
// writev per burst of requests (the reader flushes before it would block
// on the socket). Everything else — FLUSH, FUA, TRIM, WRITE_ZEROES,
// BLOCK_STATUS, large requests — goes to a pool of Options.Workers
// workers, so a slow request never holds up the others. When an inline
// request turns out slow (a miss served from G3 or G4, a writer held back
// by the dirty bound), the next inlineBackoff requests go to the workers
// too, so that misses are served concurrently. And when an inline request
// stalls (a store waiting on a dead tier), a timer hands the reader's role
// to a new goroutine after inlineStuck; the stalled one finishes its
// request, sends its reply and exits.
//
// Requests in flight are bounded by the workers and their queue (2 ×
// Workers) and by bytes (mem: a WRITE's payload or a READ's buffer, taken
// before it is allocated and given back once its reply is on the wire), so
// the reader stops reading the socket when the client sends faster than
// the backend and the socket absorb.

const (
	// maxInline is the largest READ or WRITE run inline (bytes).
	maxInline = 128 << 10
	// inlineSlow is the duration past which an inline request counts as
	// slow.
	inlineSlow = 200 * time.Microsecond
	// inlineBackoff is how many requests go to the workers after a slow
	// inline one.
	inlineBackoff = 256
	// inlineStuck is how long an inline request may hold up the reading of
	// further requests.
	inlineStuck = time.Millisecond
)

// transmit runs the transmission phase until the request stream ends and
// every request read has been answered.
func (c *conn) transmit() {
	n := c.srv.opts.Workers
	c.mem = newBudget(c.srv.opts.MaxInFlightBytes)
	c.work = make(chan *op, n)
	c.readDone = make(chan struct{})
	c.stuck = time.AfterFunc(time.Hour, c.takeOver)
	c.stuck.Stop()
	var workers sync.WaitGroup
	for i := 0; i < n; i++ {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for r := range c.work {
				c.handle(r)
				c.send(r, true)
			}
		}()
	}
	c.readers.Add(1)
	go func() {
		defer c.readers.Done()
		c.read()
	}()
	<-c.readDone
	c.flush()
	close(c.work)
	workers.Wait()
	c.readers.Wait() // readers that stalled inline and were replaced
	c.flush()
}

// takeOver runs when an inline request has held up reading for
// inlineStuck: it starts a new reader unless the request finished first.
func (c *conn) takeOver() {
	tok := c.inlineTok.Load()
	if tok == 0 || !c.inlineTok.CompareAndSwap(tok, 0) {
		return
	}
	c.readers.Add(1)
	go func() {
		defer c.readers.Done()
		c.inlineOff = inlineBackoff
		c.read()
	}()
}

// read decodes and dispatches requests until the client sends
// NBD_CMD_DISC, the stream ends or breaks, or shutdown starts (then it
// closes readDone), or until this goroutine is replaced as the reader
// after an inline request stalled.
func (c *conn) read() {
	if c.readLoop() {
		close(c.readDone)
	}
}

// readLoop is read's loop; it returns true when the stream has ended and
// false when another goroutine has become the reader.
func (c *conn) readLoop() bool {
	var hb [requestHeaderLen]byte
	for {
		if c.br.Buffered() < requestHeaderLen {
			c.flush() // about to wait for the client: send what is ready
		}
		if _, err := io.ReadFull(c.br, hb[:]); err != nil {
			c.readEnd(err)
			return true
		}
		r := c.srv.getOp()
		decodeRequest(hb[:], &r.req)
		if r.req.RequestMagic != protocol.TRANSMISSION_MAGIC_REQUEST {
			// The stream cannot be resynchronised: hard disconnect.
			c.log.Warn("bad request magic; closing the connection", "magic", r.req.RequestMagic)
			c.srv.putOp(r)
			return true
		}
		if r.req.Type == cmdDisc {
			c.srv.putOp(r)
			return true
		}
		if err := c.readPayload(r); err != nil {
			if !errors.Is(err, errStopping) {
				c.readEnd(err)
			}
			return true
		}
		if !c.inline(r) {
			select {
			case c.work <- r:
			default:
				c.flush()
				c.work <- r
			}
			continue
		}
		c.tokSeq++
		tok := c.tokSeq
		c.inlineTok.Store(tok)
		c.stuck.Reset(inlineStuck)
		t0 := time.Now()
		c.handle(r)
		slow := time.Since(t0) > inlineSlow
		c.stuck.Stop()
		if !c.inlineTok.CompareAndSwap(tok, 0) {
			// Replaced as the reader while stalled: answer and leave the
			// stream (and readDone) to the new reader.
			c.send(r, true)
			return false
		}
		if slow {
			c.inlineOff = inlineBackoff
		}
		c.send(r, false)
	}
}

// errStopping ends the reader when shutdown starts while it waits for
// memory.
var errStopping = errors.New("shutting down")

// readPayload takes r's bytes from the budget and reads a WRITE's payload.
// On error r has been released.
func (c *conn) readPayload(r *op) error {
	n := int(r.req.Length)
	if n <= MaxPayload && (r.req.Type == cmdWrite || r.req.Type == cmdRead) {
		if !c.mem.tryAcquire(int64(n)) {
			c.flush() // replies waiting to be sent hold memory
			if !c.mem.acquire(int64(n), c.stopping) {
				c.srv.putOp(r)
				return errStopping
			}
		}
		r.cost = int64(n)
	}
	if r.req.Type != cmdWrite {
		return nil
	}
	if c.br.Buffered() < n {
		c.flush()
	}
	if n > MaxPayload {
		// Too large to take: drop exactly the payload so the stream stays
		// in step, then answer EINVAL.
		if _, err := c.br.Discard(n); err != nil {
			c.release(r)
			return err
		}
		r.pre, r.preMsg = errInval, "write larger than the maximum payload"
		return nil
	}
	r.payload = c.srv.bufs.get(n)
	if _, err := io.ReadFull(c.br, r.payload); err != nil {
		c.release(r) // a write cut short is not applied
		return err
	}
	return nil
}

// inline reports whether the reader runs r itself.
func (c *conn) inline(r *op) bool {
	if c.inlineOff > 0 {
		c.inlineOff--
		return false
	}
	q := &r.req
	return (q.Type == cmdRead || q.Type == cmdWrite) && q.CommandFlags&cmdFlagFUA == 0 && q.Length <= maxInline
}

func (c *conn) readEnd(err error) {
	select {
	case <-c.stopping:
		return
	default:
	}
	if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		c.log.Debug("connection read ended", "err", err)
	}
}
