package tiering_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/tiering"
	"github.com/ctxmem/ctxmemd/tiering/g3"
	"github.com/ctxmem/ctxmemd/tiering/g4"
	"github.com/ctxmem/ctxmemd/tiering/tier"
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

// failPacks is an object store whose pack PUTs fail (names whose last
// segment starts with 'p').
type failPacks struct{ g4.ObjectStore }

func (f failPacks) Put(ctx context.Context, name string, r io.Reader, size int64, meta map[string]string) error {
	if strings.HasPrefix(name[strings.LastIndexByte(name, '/')+1:], "p") {
		return errors.New("injected: pack PUT refused")
	}
	return f.ObjectStore.Put(ctx, name, r, size, meta)
}

// TestSinkPackFails: when G4 refuses the pack, Sink fails, nothing is
// recorded in G4 (every block keeps its G3 copy) and the file reads back,
// before and after a restart.
func TestSinkPackFails(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	open := func() (*tiering.Store, *g3.Store, *g4.Tier) {
		t.Helper()
		return openPacked(t, dir, 2<<20, func(s g4.ObjectStore) g4.ObjectStore { return failPacks{s} })
	}
	s, g3s, t4 := open()
	const bs = 64 << 10
	want := data(8, 16*bs)
	id, err := s.Create("ns", bs, "file")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.WriteAt(ctx, id, want, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx, id); err != nil {
		t.Fatal(err)
	}
	res, err := s.Sink(ctx, id)
	if err == nil || res.Moved != 0 {
		t.Fatalf("Sink with pack PUTs refused = %+v, %v; want an error and nothing moved", res, err)
	}
	if u := t4.Usage(); u.Blocks != 0 {
		t.Fatalf("G4 holds %d blocks after a failed pack put", u.Blocks)
	}
	r, err := s.Residency(id)
	if err != nil || r.G4 != 0 || r.G3 != 16 {
		t.Fatalf("Residency after a failed sink = %+v, %v; want all 16 blocks in G3, none in G4", r, err)
	}
	check := func(s *tiering.Store, what string) {
		t.Helper()
		got := make([]byte, len(want))
		if n, err := s.ReadAt(ctx, id, got, 0); err != nil || n != len(want) || !bytes.Equal(got, want) {
			t.Fatalf("read %s: n=%d err=%v", what, n, err)
		}
	}
	check(s, "after the failed sink")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	g3s.Close()
	t4.Close()
	s, g3s, t4 = open()
	defer func() { s.Close(); g3s.Close(); t4.Close() }()
	check(s, "after a restart")
	var keys []tier.Key
	if err := t4.Range(ctx, func(k tier.Key, _ int64) bool { keys = append(keys, k); return true }); err != nil || len(keys) != 0 {
		t.Fatalf("G4 lists %v after a failed sink (%v)", keys, err)
	}
}

// TestPackDeletedWithItsObject: truncating a sunk file to 0 (a new
// generation) and deleting another queue their G4 keys for deletion; each
// pack object goes once its last block is deleted, and nothing of them is
// left in G4's store.
func TestPackDeletedWithItsObject(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := openStack(t, dir, filepath.Join(dir, "g3"), 0, true)
	defer st.close(t)
	const bs = 64 << 10
	var ids []tiering.ObjectID
	for i := range 2 {
		id, err := st.store.Create("ns", bs, "file")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.store.WriteAt(ctx, id, data(uint64(20+i), 40*bs), 0); err != nil {
			t.Fatal(err)
		}
		if err := st.store.Flush(ctx, id); err != nil {
			t.Fatal(err)
		}
		if _, err := st.store.Sink(ctx, id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if s := st.g4.Stats(); s.Packs != 2 {
		t.Fatalf("G4 stats after sinking two files: %+v; want 2 packs", s)
	}
	if err := st.store.Truncate(ctx, ids[0], 0); err != nil {
		t.Fatal(err)
	}
	if err := st.store.Delete(ctx, ids[1]); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var names []string
		err := st.g4.Store().List(ctx, g4.DefaultPrefix+"/", func(a g4.ObjectAttrs) bool { names = append(names, a.Name); return true })
		if err != nil {
			t.Fatal(err)
		}
		// The counter moves after the object's delete returned, so it
		// is waited for too.
		if len(names) == 0 && st.g4.Usage().Blocks == 0 && st.g4.Stats().PacksDeleted == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("G4 still holds %v (%+v) after the files' blocks were deleted; want both packs deleted", names, st.g4.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
