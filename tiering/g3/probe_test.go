package g3

import (
	"context"
	"errors"
	"testing"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// TestProbe: a working store answers its probe before and after its first
// segment exists; a closed one says so; a deleted directory fails it.
func TestProbe(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, SegmentBytes: 1 << 20, CapacityBytes: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Probe(ctx); err != nil {
		t.Fatalf("probe of a fresh store: %v", err)
	}
	if err := s.Put(ctx, tier.Key{Namespace: "ns", Object: 1, Gen: 1}, make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	if err := s.Probe(ctx); err != nil {
		t.Fatalf("probe with an active segment: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.Probe(cctx); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("probe with a cancelled ctx: %v", err)
	}
	s.Close()
	if err := s.Probe(ctx); !errors.Is(err, tier.ErrClosed) {
		t.Fatalf("probe of a closed store: %v", err)
	}
}
