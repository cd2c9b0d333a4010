package tiering

import (
	"context"
	"testing"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// TestCollectGarbageSparesImportInFlight: the pool keys an Import
// registers belong to no visible object until it returns; a
// CollectGarbage meanwhile leaves them alone (busy), while a pool key of
// an unknown object with no import in flight is garbage.
func TestCollectGarbageSparesImportInFlight(t *testing.T) {
	ctx := context.Background()
	pool := newMemTier("G3.5", 0)
	s := openShareTest(t, pool)
	orphan := tier.Key{Namespace: "ns", Object: 1 << 40, Index: 0, Gen: 1}
	if err := pool.Put(ctx, orphan, []byte("stale")); err != nil {
		t.Fatal(err)
	}
	want := pattern(9, 2*4096)
	var during GCReport
	id, err := s.Import("ns", 4096, "file", int64(len(want)), func(nid ObjectID, gen uint64) error {
		for i := uint32(0); i < 2; i++ {
			if err := pool.Put(ctx, tier.Key{Namespace: "ns", Object: uint64(nid), Index: i, Gen: gen}, want[i*4096:(i+1)*4096]); err != nil {
				return err
			}
		}
		var err error
		during, err = s.CollectGarbage(ctx, GCOptions{DryRun: true})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range during.Tiers {
		if tr.Tier == TierG35 && (tr.Listed != 3 || tr.Busy != 3 || tr.Garbage != 0) {
			t.Fatalf("gc during an import: %+v", tr)
		}
	}
	rep, err := s.CollectGarbage(ctx, GCOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range rep.Tiers {
		if tr.Tier == TierG35 && (tr.Listed != 3 || tr.Garbage != 1 || tr.Queued != 1 || tr.Bytes != 5) {
			t.Fatalf("gc after the import: %+v", tr)
		}
	}
	got := make([]byte, len(want))
	if n, err := s.ReadAt(ctx, id, got, 0); err != nil || n != len(want) || string(got) != string(want) {
		t.Fatalf("read of the imported object after gc: %d, %v", n, err)
	}
}
