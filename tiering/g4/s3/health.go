package s3

import (
	"sync"
	"time"
)

// Health is the store's view of its server, updated by every call: a call
// that the server answered (even with "no such key") marks it healthy; a
// call that failed as unavailable (refused, reset, stalled, 5xx, access
// denied, bucket gone, deadline exceeded) marks it unhealthy. It recovers
// by itself with the next answered call (traffic, or Ping).
type Health struct {
	Healthy             bool      // the last call was answered
	ConsecutiveFailures uint64    // unavailable calls since the last answered one
	LastError           error     // the most recent unavailable error (kept after recovery); nil if none yet
	LastErrorAt         time.Time // when LastError happened; zero if none
	LastOKAt            time.Time // when the last answered call ended; zero if none
}

// health is the mutex-guarded state behind Health.
type health struct {
	mu sync.Mutex
	h  Health
}

func newHealth() *health { return &health{h: Health{Healthy: true}} }

func (h *health) ok() {
	now := time.Now()
	h.mu.Lock()
	h.h.Healthy = true
	h.h.ConsecutiveFailures = 0
	h.h.LastOKAt = now
	h.mu.Unlock()
}

func (h *health) fail(err error) {
	now := time.Now()
	h.mu.Lock()
	h.h.Healthy = false
	h.h.ConsecutiveFailures++
	h.h.LastError = err
	h.h.LastErrorAt = now
	h.mu.Unlock()
}

func (h *health) get() Health {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.h
}
