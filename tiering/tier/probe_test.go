package tier

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestProbeGateOneAtATime: a probe stuck in its device makes Run return
// at its context's end, and the next Run is refused at once without
// sending another probe; once the stuck one returns, probes run again.
func TestProbeGateOneAtATime(t *testing.T) {
	var g ProbeGate
	release := make(chan struct{})
	calls := 0
	stuck := func() error { calls++; <-release; return nil }
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := g.Run(ctx, "probe", stuck); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("stuck probe: %v, want the context's deadline", err)
	}
	start := time.Now()
	err := g.Run(context.Background(), "probe", stuck)
	if !errors.Is(err, ErrUnavailable) || time.Since(start) > time.Second {
		t.Fatalf("second probe while the first is stuck: %v after %v, want ErrUnavailable at once", err, time.Since(start))
	}
	close(release)
	deadline := time.Now().Add(5 * time.Second)
	for {
		err = g.Run(context.Background(), "probe", func() error { return nil })
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("probe after the stuck one returned: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
	if calls != 1 {
		t.Fatalf("%d stuck probes sent, want 1", calls)
	}
}
