package tiering_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/tiering"
	"github.com/ctxmem/ctxmemd/tiering/g3"
	"github.com/ctxmem/ctxmemd/tiering/g4"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// openBoundedG4 is openStack with a local G4 bounded to capacity bytes
// (and packs of at most packSize bytes; 0 for the default).
func openBoundedG4(t *testing.T, capacity int64, packSize int) *stack {
	t.Helper()
	dir := t.TempDir()
	st := &stack{}
	var err error
	if st.g3, err = g3.Open(g3.Options{Dir: filepath.Join(dir, "g3"), SegmentBytes: 1 << 20, Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	local, err := g4.NewLocal(filepath.Join(dir, "g4"))
	if err != nil {
		t.Fatal(err)
	}
	if st.g4, err = g4.NewTier(context.Background(), local, g4.TierOptions{Capacity: capacity, PackSize: packSize}); err != nil {
		t.Fatal(err)
	}
	if st.store, err = tiering.Open(context.Background(), tiering.Config{DataDir: dir, G2Bytes: 8 << 20, G3: st.g3, G4: st.g4, Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.close(t) })
	return st
}

// writeFlushed creates an object of class dur in namespace ns holding b.
func writeFlushed(t *testing.T, s *tiering.Store, dur tiering.Durability, b []byte) tiering.ObjectID {
	t.Helper()
	ctx := context.Background()
	opts := tiering.CreateOptions{Kind: "file", Durability: dur}
	if dur == tiering.DurabilityDevice {
		opts.Kind = tiering.KindNBD
	}
	id, err := s.CreateWith("ns", 64<<10, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.WriteAt(ctx, id, b, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx, id); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestSinkMakesRoomInG4 is a new user's run: sinking a file to a bounded
// G4 75% full (below its high watermark) whose pack does not fit in what
// is left must evict G4's oldest blocks and succeed; before, it failed
// with "tier full" and evicted nothing.
func TestSinkMakesRoomInG4(t *testing.T) {
	ctx := context.Background()
	st := openBoundedG4(t, 2<<20, 0)
	old := writeFlushed(t, st.store, tiering.DurabilityCache, data(1, 1536<<10))
	if _, err := st.store.Sink(ctx, old); err != nil {
		t.Fatal(err)
	}
	want := data(2, 1<<20)
	id := writeFlushed(t, st.store, tiering.DurabilityCache, want)
	res, err := st.store.Sink(ctx, id)
	if err != nil || res.Moved != 16 {
		t.Fatalf("Sink into a G4 75%% full = %+v, %v; want 16 blocks moved", res, err)
	}
	tiers, _ := st.store.BlockTiers(id)
	for i, tn := range tiers {
		if tn != tiering.TierG4 {
			t.Fatalf("block %d in %s after sink", i, tn)
		}
	}
	got := make([]byte, len(want))
	if n, err := st.store.ReadAt(ctx, id, got, 0); err != nil || n != len(want) || !bytes.Equal(got, want) {
		t.Fatalf("read after sink: %d, %v", n, err)
	}
	if u := st.g4.Usage(); u.UsedBytes > u.CapacityBytes || st.g4.Evicted() == 0 {
		t.Fatalf("G4 %+v, %d evicted: want the oldest file evicted", u, st.g4.Evicted())
	}
}

// TestSinkG4FullOfDeviceBlocks: when what G4 holds may not be evicted
// (an NBD export's blocks), a sink that does not fit fails at once with
// an error that says why (wrapping tier.ErrNoSpace), the export is
// untouched and the file still reads back from its upper copies.
func TestSinkG4FullOfDeviceBlocks(t *testing.T) {
	ctx := context.Background()
	st := openBoundedG4(t, 2<<20, 0)
	dev := data(3, 1536<<10)
	exp := writeFlushed(t, st.store, tiering.DurabilityDevice, dev)
	if _, err := st.store.Sink(ctx, exp); err != nil {
		t.Fatal(err)
	}
	want := data(4, 1<<20)
	id := writeFlushed(t, st.store, tiering.DurabilityCache, want)
	start := time.Now()
	_, err := st.store.Sink(ctx, id)
	if !errors.Is(err, tier.ErrNoSpace) || !strings.Contains(err.Error(), "may be evicted") {
		t.Fatalf("Sink into a G4 full of device blocks = %v; want ErrNoSpace saying nothing may be evicted", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Sink took %v to fail", d)
	}
	t.Log(err)
	if st.g4.Evicted() != 0 {
		t.Fatalf("%d blocks evicted, want none (all device-class)", st.g4.Evicted())
	}
	for _, c := range []struct {
		id   tiering.ObjectID
		want []byte
	}{{exp, dev}, {id, want}} {
		got := make([]byte, len(c.want))
		if n, err := st.store.ReadAt(ctx, c.id, got, 0); err != nil || n != len(c.want) || !bytes.Equal(got, c.want) {
			t.Fatalf("read object %d: %d, %v", c.id, n, err)
		}
	}
}

// TestSinkLargerThanG4KeepsItsBlocks: a file that does not fit in G4 whole
// (three packs into a G4 that holds two) fails to sink with ErrNoSpace,
// and reads back whole: G4 does not make room by evicting the file's own
// blocks sunk before (their only copies by then).
func TestSinkLargerThanG4KeepsItsBlocks(t *testing.T) {
	ctx := context.Background()
	st := openBoundedG4(t, 2<<20, 1<<20)
	want := data(5, 40<<16) // 40 blocks: packs of 15, 15 and 10
	id := writeFlushed(t, st.store, tiering.DurabilityCache, want)
	if _, err := st.store.Sink(ctx, id); !errors.Is(err, tier.ErrNoSpace) {
		t.Fatalf("Sink of a file larger than G4 = %v, want ErrNoSpace", err)
	}
	if st.g4.Evicted() != 0 {
		t.Fatalf("%d blocks evicted to sink a file larger than G4", st.g4.Evicted())
	}
	got := make([]byte, len(want))
	if n, err := st.store.ReadAt(ctx, id, got, 0); err != nil || n != len(want) || !bytes.Equal(got, want) {
		t.Fatalf("read after a failed sink: %d, %v", n, err)
	}
}
