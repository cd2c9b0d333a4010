package tiering

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

func openShareTest(t *testing.T, g35 tier.Tier) *Store {
	t.Helper()
	s, err := Open(context.Background(), Config{DataDir: t.TempDir(), G2Bytes: 64 << 20, G3: newMemTier("G3", 0),
		G4: newMemTier("G4", 0), G35: g35, FlushWorkers: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestShareImportUnshare(t *testing.T) {
	ctx := context.Background()
	pool := newMemTier("G3.5", 0)
	a := openShareTest(t, pool)
	id, _ := a.Create("ns", 4096, "file")
	want := pattern(5, 3*4096+123)
	if _, err := a.WriteAt(ctx, id, want, 0); err != nil {
		t.Fatal(err)
	}
	n, err := a.Share(ctx, id)
	if err != nil || n != 4 {
		t.Fatalf("share: %d blocks, %v", n, err)
	}
	if res, _ := a.Residency(id); res.G35 != 4 || res.G3+res.G4 < 4 {
		t.Fatalf("after share: %+v (the holder keeps its own copies)", res)
	}
	if n, err := a.Share(ctx, id); err != nil || n != 0 {
		t.Fatalf("second share: %d, %v", n, err)
	}
	// A write withdraws the block's pool copy.
	if _, err := a.WriteAt(ctx, id, []byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	if blocks, _ := a.SharedBlocks(id); len(blocks) != 3 || blocks[0] != 1 {
		t.Fatalf("shared blocks after a write: %v", blocks)
	}

	// Another store imports the file: its blocks read from the pool.
	b := openShareTest(t, pool)
	info, _ := a.Stat(id)
	bid, err := b.Import("ns", 4096, "file", info.Size, func(nid ObjectID, gen uint64) error {
		for i := uint32(0); i < 4; i++ {
			data := make([]byte, 4096)
			n, err := a.ReadAt(ctx, id, data, int64(i)*4096)
			if err != nil {
				return err
			}
			if err := pool.Put(ctx, tier.Key{Namespace: "ns", Object: uint64(nid), Index: i, Gen: gen}, data[:n]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if tiers, _ := b.BlockTiers(bid); tiers[0] != TierG35 {
		t.Fatalf("imported block tiers %v", tiers)
	}
	got := make([]byte, len(want))
	if n, err := b.ReadAt(ctx, bid, got, 0); err != nil || n != len(want) {
		t.Fatalf("read imported: %d %v", n, err)
	}
	want[0] = 'x'
	if !bytes.Equal(got, want) {
		t.Fatal("imported bytes differ")
	}
	if st := b.Stats(); st.BlockHits[TierG35] != 4 {
		t.Fatalf("G3.5 hits %v", st.BlockHits)
	}
	// Reclaiming the extent of blocks that live only in the pool loses
	// the object; blocks with another copy survive.
	b2, _ := b.Import("ns", 4096, "file", 4096, func(ObjectID, uint64) error { return nil })
	info2, _ := b.Stat(b2)
	b.Unshare(b2, info2.Gen, []uint32{0})
	if _, err := b.Stat(b2); !errors.Is(err, ErrNotExist) {
		t.Fatalf("object with its only copy reclaimed still exists: %v", err)
	}
	a.Unshare(id, info.Gen, []uint32{1, 2, 3})
	if _, err := a.ReadAt(ctx, id, got, 0); err != nil {
		t.Fatalf("holder lost data when its pool copies were reclaimed: %v", err)
	}
	if _, err := openShareTest(t, nil).Share(ctx, 1); !errors.Is(err, ErrInvalid) {
		t.Fatalf("share without G3.5: %v", err)
	}
}

// TestImportedObjectIsNotRecorded: an imported object (blocks only in the
// pool) is not written to the metadata database, even after a Flush and a
// clean Close, so the next Open neither brings it back nor counts it as
// lost (it was never this host's to keep).
func TestImportedObjectIsNotRecorded(t *testing.T) {
	ctx := context.Background()
	pool, g3, g4 := newMemTier("G3.5", 0), newMemTier("G3", 0), newMemTier("G4", 0)
	dir := t.TempDir()
	open := func() *Store {
		s, err := Open(ctx, Config{DataDir: dir, G2Bytes: 64 << 20, G3: g3, G4: g4, G35: pool, FlushWorkers: 2})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	want := pattern(6, 2*4096)
	id, err := s.Import("ns", 4096, "file", int64(len(want)), func(nid ObjectID, gen uint64) error {
		for i := uint32(0); i < 2; i++ {
			if err := pool.Put(ctx, tier.Key{Namespace: "ns", Object: uint64(nid), Index: i, Gen: gen}, want[i*4096:(i+1)*4096]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	if n, err := s.ReadAt(ctx, id, got, 0); err != nil || !bytes.Equal(got[:n], want) {
		t.Fatalf("read of the import: %d, %v", n, err)
	}
	if err := s.Flush(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open()
	defer s.Close()
	if _, err := s.Stat(id); !errors.Is(err, ErrNotExist) {
		t.Fatalf("imported object after a restart: %v; want gone", err)
	}
	if n := s.Stats().ObjectsLost; n != 0 {
		t.Fatalf("restart counted %d objects lost; an import is not this host's to lose", n)
	}
}
