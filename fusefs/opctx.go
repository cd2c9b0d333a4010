package fusefs

import (
	"context"
	"sync"
)

// opCtx is the context a waiting Backend call gets: it ends when the mount
// shuts down (the embedded context, whose values and deadline it keeps) or
// when the kernel interrupts the request (FUSE INTERRUPT, req.Done()).
//
// It exists so that a write(2) or fsync(2) stuck waiting for the tiers
// below G2 can be killed: once the kernel has sent a request, a caller that
// receives SIGKILL waits uninterruptibly for the answer, so the daemon must
// answer EINTR when it is interrupted. The merged Done channel (and the
// goroutine behind it) is made only if a callee asks for it, which only a
// wait does; the copy paths stay free of it. release must be called when
// the request is answered; a write that never waits allocates no channel.
type opCtx struct {
	context.Context
	req  context.Context
	once sync.Once
	done chan struct{} // merged Done; nil until a callee asks for it
	stop chan struct{} // ends the merging goroutine at release
}

// interruptible returns a context for a Backend call made on behalf of
// request ctx req, and its release func.
func (f *fsys) interruptible(req context.Context) (*opCtx, func()) {
	c := &opCtx{Context: f.ctx, req: req}
	return c, c.release
}

// release ends the request: no merging goroutine starts after it, and one
// that started stops.
func (c *opCtx) release() {
	c.once.Do(func() {})
	if c.stop != nil {
		close(c.stop)
	}
}

// Done implements context.Context.
func (c *opCtx) Done() <-chan struct{} {
	c.once.Do(func() {
		if c.req == nil || c.req.Done() == nil {
			return
		}
		c.done, c.stop = make(chan struct{}), make(chan struct{})
		go func(done, stop chan struct{}) { // ends with the request (stop) at the latest
			select {
			case <-c.Context.Done():
			case <-c.req.Done():
			case <-stop:
				return
			}
			close(done)
		}(c.done, c.stop)
	})
	if c.done == nil {
		return c.Context.Done()
	}
	return c.done
}

// Err implements context.Context.
func (c *opCtx) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	if c.req != nil {
		if err := c.req.Err(); err != nil {
			return context.Canceled
		}
	}
	return nil
}
