package fusefs

import (
	"context"
	"testing"
	"time"
)

// TestOpCtx: the merged context ends with the request's interrupt or the
// mount's shutdown, reports the right error, and a released one that was
// never asked for Done costs no goroutine.
func TestOpCtx(t *testing.T) {
	mount, stopMount := context.WithCancel(context.Background())
	defer stopMount()
	f := &fsys{ctx: mount}

	req, interrupt := context.WithCancel(context.Background())
	c, release := f.interruptible(req)
	if c.Err() != nil {
		t.Fatal("fresh context already ended")
	}
	done := c.Done()
	interrupt()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("interrupt did not end the context")
	}
	if c.Err() != context.Canceled {
		t.Fatalf("Err after interrupt = %v", c.Err())
	}
	release()

	c2, release2 := f.interruptible(context.Background())
	release2()
	if c2.stop != nil {
		t.Fatal("a context never asked for Done started a goroutine")
	}
	stopMount()
	if c2.Err() == nil {
		t.Fatal("mount shutdown did not end the context")
	}
}
