package tiering

import (
	"context"
	"sync"
	"time"

	"github.com/ctxmem/ctxmemd/internal/clock"
)

// signal is a broadcast condition usable with contexts: waiters take the
// current channel with c(), re-check their condition, then select on it;
// broadcast closes it and installs a fresh one.
type signal struct {
	mu sync.Mutex
	ch chan struct{}
}

func newSignal() *signal { return &signal{ch: make(chan struct{})} }

func (s *signal) c() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ch
}

func (s *signal) broadcast() {
	s.mu.Lock()
	close(s.ch)
	s.ch = make(chan struct{})
	s.mu.Unlock()
}

// waitFor blocks until cond() is true or ctx ends.
func (s *signal) waitFor(ctx context.Context, cond func() bool) error {
	for {
		ch := s.c()
		if cond() {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// waitPoll is waitFor that also re-checks cond every interval, for
// conditions that can become true without a broadcast.
func (s *signal) waitPoll(ctx context.Context, every time.Duration, cond func() bool) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		ch := s.c()
		if cond() {
			return nil
		}
		select {
		case <-ch:
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// wake waits for ch, timer or the store's end, and reports false at the
// end. The timer is stopped on return, so the caller may Reset it (Go 1.23
// timer semantics: no stale tick survives Stop).
func (s *Store) wake(ch <-chan struct{}, timer clock.Timer) bool {
	defer timer.Stop()
	select {
	case <-ch:
	case <-timer.C():
	case <-s.ctx.Done():
		return false
	}
	return true
}
