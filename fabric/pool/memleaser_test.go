package pool

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestMemLeases(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	m := NewMemLeases(3, MemLeaseOptions{TTL: 10 * time.Second, Grace: 2 * time.Second, Clock: clk.Now, FirstEpoch: 100})
	a, b := m.Leaser("a"), m.Leaser("b")
	var got []Lease
	for range 3 {
		l, err := a.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if l.Holder != "a" || !l.Expires.Equal(clk.Now().Add(10*time.Second)) {
			t.Fatalf("lease %v", l)
		}
		got = append(got, l)
	}
	seen := map[uint32]bool{}
	for i, l := range got {
		if seen[l.Extent] || (i > 0 && l.Epoch <= got[i-1].Epoch) {
			t.Fatalf("leases %v", got)
		}
		seen[l.Extent] = true
	}
	if _, err := b.Acquire(ctx); !errors.Is(err, ErrNoExtent) {
		t.Fatalf("Acquire on a full table: %v", err)
	}
	// Only the holder renews or releases, and only the current epoch.
	if _, err := b.Renew(ctx, got[0]); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Renew by another host: %v", err)
	}
	stale := got[0]
	stale.Epoch--
	if _, err := a.Renew(ctx, stale); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Renew of a stale epoch: %v", err)
	}
	if err := b.Release(ctx, got[0]); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Release by another host: %v", err)
	}
	// Renew extends from now.
	clk.Advance(6 * time.Second)
	r0, err := a.Renew(ctx, got[0])
	if err != nil || r0.Epoch != got[0].Epoch || r0.Extent != got[0].Extent || !r0.Expires.Equal(clk.Now().Add(10*time.Second)) {
		t.Fatalf("Renew: %v, %v", r0, err)
	}
	// Release frees at once; the extent comes back with a new epoch.
	if err := a.Release(ctx, got[1]); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx, got[1]); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("double Release: %v", err)
	}
	l, err := b.Acquire(ctx)
	if err != nil || l.Extent != got[1].Extent || l.Epoch <= got[2].Epoch || l.Holder != "b" {
		t.Fatalf("Acquire after Release: %v, %v", l, err)
	}
	// got[2] expires at +10 s but is not free before +12 s (grace).
	clk.Advance(5 * time.Second) // +11 s
	if _, err := a.Renew(ctx, got[2]); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Renew after expiry: %v", err)
	}
	if _, err := b.Acquire(ctx); !errors.Is(err, ErrNoExtent) {
		t.Fatalf("Acquire within grace: %v", err)
	}
	clk.Advance(time.Second) // +12 s
	l2, err := b.Acquire(ctx)
	if err != nil || l2.Extent != got[2].Extent || l2.Epoch <= l.Epoch {
		t.Fatalf("Acquire after grace: %v, %v", l2, err)
	}
	if err := a.Release(ctx, got[2]); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Release of a lease taken over: %v", err)
	}
	live := m.Leases()
	if live[got[0].Extent].Holder != "a" || live[l.Extent].Holder != "b" || live[l2.Extent].Epoch != l2.Epoch {
		t.Fatalf("Leases: %v", live)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := a.Acquire(cctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire with cancelled ctx: %v", err)
	}
}

// TestMemLeasesDefaultEpochs: without FirstEpoch, a table created later
// (a restarted single-host daemon) hands out larger epochs.
func TestMemLeasesDefaultEpochs(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	l1, err := NewMemLeases(1, MemLeaseOptions{Clock: clk.Now}).Leaser("a").Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Millisecond)
	l2, err := NewMemLeases(1, MemLeaseOptions{Clock: clk.Now}).Leaser("a").Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l2.Epoch <= l1.Epoch {
		t.Fatalf("epochs %d then %d", l1.Epoch, l2.Epoch)
	}
}
