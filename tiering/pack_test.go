package tiering_test

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"github.com/ctxmem/ctxmemd/tiering"
)

// TestSinkPacks: sinking a 64-block file to a G4 that packs takes one PUT
// (the file is 4 MiB, under the 16 MiB pack size), and the file reads back
// after a Demote and after a restart that rebuilds G4 from its listing; a
// device-class object (an NBD export) still gets one object per block.
func TestSinkPacks(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := openStack(t, dir, filepath.Join(dir, "g3"), 0, true)
	const bs = 64 << 10
	want := data(5, 64*bs-1000) // the last block is short
	id, err := st.store.Create("ns", bs, "file")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.store.WriteAt(ctx, id, want, 0); err != nil {
		t.Fatal(err)
	}
	if err := st.store.Flush(ctx, id); err != nil {
		t.Fatal(err)
	}
	before := st.g4.CallCounts()
	res, err := st.store.Sink(ctx, id)
	if err != nil || res.Moved != 64 {
		t.Fatalf("Sink = %+v, %v; want 64 blocks moved", res, err)
	}
	if d := st.g4.CallCounts().Put - before.Put; d != 1 {
		t.Fatalf("Sink of 64 blocks made %d G4 PUTs; want 1", d)
	}
	if s := st.g4.Stats(); s.PackPuts != 1 {
		t.Fatalf("G4 stats %+v; want one pack", s)
	}
	tiers, _ := st.store.BlockTiers(id)
	for i, tn := range tiers {
		if tn != tiering.TierG4 {
			t.Fatalf("block %d in %s after sink", i, tn)
		}
	}
	read := func(s *tiering.Store, what string) {
		t.Helper()
		got := make([]byte, len(want))
		if n, err := s.ReadAt(ctx, id, got, 0); err != nil || n != len(want) || !bytes.Equal(got, want) {
			t.Fatalf("read %s: n=%d err=%v", what, n, err)
		}
	}
	read(st.store, "after sink")
	if _, err := st.store.Demote(ctx, id); err != nil {
		t.Fatal(err)
	}
	read(st.store, "after demote")

	dev, err := st.store.CreateWith("ns", bs, tiering.CreateOptions{Kind: tiering.KindNBD, Durability: tiering.DurabilityDevice})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.store.WriteAt(ctx, dev, data(6, 8*bs), 0); err != nil {
		t.Fatal(err)
	}
	if err := st.store.Flush(ctx, dev); err != nil {
		t.Fatal(err)
	}
	before = st.g4.CallCounts()
	if res, err := st.store.Sink(ctx, dev); err != nil || res.Moved != 8 {
		t.Fatalf("Sink of the export = %+v, %v", res, err)
	}
	if d := st.g4.CallCounts().Put - before.Put; d != 8 {
		t.Fatalf("Sink of an 8-block export made %d PUTs; want 8 (one per block)", d)
	}
	st.close(t)

	st = openStack(t, dir, filepath.Join(dir, "g3"), 0, true)
	defer st.close(t)
	read(st.store, "after restart")
	if tiers, _ := st.store.BlockTiers(id); tiers[63] != tiering.TierG4 {
		t.Fatalf("after restart: %v", tiers)
	}
}
