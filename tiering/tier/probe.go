package tier

import (
	"context"
	"fmt"
	"sync/atomic"
)

// ProbeGate runs a local tier's device probe (Prober) on a goroutine of
// its own, so Probe returns when its context ends even though the open or
// pread it makes cannot be interrupted, and lets one such probe into the
// device at a time: while an earlier one has not returned (a hung
// device), Run refuses at once instead of leaving one more goroutine, and
// one more OS thread, stuck in the kernel per probe. The zero value is
// ready to use.
type ProbeGate struct {
	out atomic.Bool // a probe's goroutine has not returned
}

// Run runs probe (what names the device in errors) and returns its error,
// or ctx's error when ctx ends first (the probe's goroutine then finishes
// on its own, owned by itself). Errors: an ErrUnavailable-class error when
// an earlier probe has not returned, ctx's error, probe's.
func (g *ProbeGate) Run(ctx context.Context, what string, probe func() error) error {
	if !g.out.CompareAndSwap(false, true) {
		return fmt.Errorf("%s: an earlier probe has not returned (a hung device?): %w", what, ErrUnavailable)
	}
	done := make(chan error, 1)
	go func() { // owned by this call, or by itself once ctx ends
		err := probe()
		g.out.Store(false)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", what, ctx.Err())
	}
}
