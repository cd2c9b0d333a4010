package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/g4/s3"
)

// Bounds of the lifecycle set-up: one attempt's deadline, and the backoff
// between attempts while S3 does not answer.
const (
	lifecycleTimeout  = 30 * time.Second
	lifecycleRetryMin = 5 * time.Second
	lifecycleRetryMax = 5 * time.Minute
)

// keepLifecycle makes the bucket's lifecycle rule what g4_lifecycle says
// (auto: installed for g4_ttl in whole days; off: removed) and records the
// outcome for status (d.lifecycle). It retries with backoff while S3 does
// not answer and returns once the server has answered for good: rule set,
// not supported (the TTL sweeper alone expires blocks), or access denied.
// Owner: the daemon's goroutines (run), ended by ctx.
func (d *daemon) keepLifecycle(ctx context.Context, st *s3.Store) error {
	days := 0
	if d.cfg.G4Lifecycle == "auto" {
		days = s3.LifecycleDays(d.cfg.G4TTL)
	}
	wait := lifecycleRetryMin
	for {
		actx, cancel := context.WithTimeout(ctx, lifecycleTimeout)
		err := st.SetLifecycleTTL(actx, days)
		cancel()
		state, done := lifecycleOutcome(days, err)
		d.lifecycle.Store(&state)
		switch {
		case err == nil:
			d.log.Info("G4 bucket lifecycle", "state", state)
		case done:
			d.log.Info("G4 bucket lifecycle not used: the TTL sweeper alone expires blocks", "state", state)
		default:
			d.log.Warn("G4 bucket lifecycle: retrying", "in", wait, "err", err)
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, lifecycleRetryMax)
	}
}

// lifecycleOutcome is the status text for SetLifecycleTTL(days)'s err,
// and whether the server's answer is final (no retry).
func lifecycleOutcome(days int, err error) (state string, final bool) {
	switch {
	case err == nil && days > 0:
		return fmt.Sprintf("installed: tagged KV blocks expire after %d days", days), true
	case err == nil:
		return "off", true
	case errors.Is(err, s3.ErrNotSupported):
		if days == 0 {
			return "off", true
		}
		return "unsupported by the server: " + err.Error(), true
	case errors.Is(err, s3.ErrAccessDenied):
		return "denied: " + err.Error(), true
	}
	return "pending: " + err.Error(), false
}
