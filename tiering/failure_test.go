package tiering_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/tiering"
	"github.com/ctxmem/ctxmemd/tiering/g3"
	"github.com/ctxmem/ctxmemd/tiering/g4"
	"github.com/ctxmem/ctxmemd/tiering/tier"

	"github.com/ctxmem/ctxmemd/internal/testenv"
)

// These tests run the core on the real G3 and G4 tiers and break the
// storage under it: a flipped byte in a segment, a G3 filesystem that
// fills up.

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func data(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed*31+7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

type stack struct {
	store *tiering.Store
	g3    *g3.Store
	g4    *g4.Tier
}

func (s *stack) close(t *testing.T) {
	t.Helper()
	if err := s.store.Close(); err != nil {
		t.Error(err)
	}
	s.g3.Close()
	if s.g4 != nil {
		s.g4.Close()
	}
}

func openStack(t *testing.T, dir, g3dir string, g3cap int64, withG4 bool) *stack {
	t.Helper()
	st := &stack{}
	var err error
	st.g3, err = g3.Open(g3.Options{Dir: g3dir, SegmentBytes: 1 << 20, CapacityBytes: g3cap, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	var t4 tier.Tier
	if withG4 {
		local, err := g4.NewLocal(filepath.Join(dir, "g4"))
		if err != nil {
			t.Fatal(err)
		}
		st.g4, err = g4.NewTier(context.Background(), local, g4.TierOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t4 = st.g4
	}
	st.store, err = tiering.Open(context.Background(), tiering.Config{DataDir: dir, G2Bytes: 2 << 20, G3: st.g3, G4: t4, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// evictAll pushes older blocks out of G2 by writing and flushing 6 MiB of
// filler objects through the 2 MiB G2.
func evictAll(t *testing.T, s *tiering.Store) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < 24; i++ {
		id, _ := s.Create("filler", 64<<10, "file")
		s.WriteAt(ctx, id, data(uint64(1000+i), 256<<10), 0)
		s.Flush(ctx, id)
	}
	time.Sleep(300 * time.Millisecond)
}

func TestFlippedByteInSegmentIsAMiss(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := openStack(t, dir, filepath.Join(dir, "g3"), 0, false)
	var lost []tiering.ObjectID
	st.store.OnLost(func(id tiering.ObjectID) { lost = append(lost, id) })
	want := data(42, 256<<10)
	id, _ := st.store.Create("ns", 64<<10, "file")
	if _, err := st.store.WriteAt(ctx, id, want, 0); err != nil {
		t.Fatal(err)
	}
	if err := st.store.Flush(ctx, id); err != nil {
		t.Fatal(err)
	}
	defer st.close(t)
	evictAll(t, st.store)
	if tiers, _ := st.store.BlockTiers(id); tiers[2] != tiering.TierG3 {
		t.Fatalf("block 2 not (only) in G3: %v", tiers)
	}

	// Flip one payload byte of block 2 in the segment file, under the
	// running store (a restart would find it while verifying the newest
	// segment and drop the block at open, which is also a miss).
	needle := want[2*64<<10+100 : 2*64<<10+164]
	segs, _ := filepath.Glob(filepath.Join(dir, "g3", "*.seg"))
	flipped := false
	for _, p := range segs {
		b, _ := os.ReadFile(p)
		if i := bytes.Index(b, needle); i >= 0 {
			f, _ := os.OpenFile(p, os.O_WRONLY, 0)
			f.WriteAt([]byte{b[i+10] ^ 0x40}, int64(i+10))
			f.Close()
			flipped = true
		}
	}
	if !flipped {
		t.Fatal("payload not found in any segment")
	}
	got := make([]byte, len(want))
	n, err := st.store.ReadAt(ctx, id, got, 0)
	if !errors.Is(err, tiering.ErrLost) {
		t.Fatalf("read of a corrupt block: n=%d err=%v, want ErrLost", n, err)
	}
	// Whatever was returned before the error is the file's real prefix.
	if !bytes.Equal(got[:n], want[:n]) {
		t.Fatal("wrong bytes returned before the corrupt block")
	}
	if s := st.store.Stats(); s.CRCErrors != 1 || s.ObjectsLost != 1 {
		t.Fatalf("crc_errors=%d objects_lost=%d, want 1 and 1", s.CRCErrors, s.ObjectsLost)
	}
	if g := st.g3.Stats(); g.CRCErrors != 1 {
		t.Fatalf("G3 quarantine counter %d", g.CRCErrors)
	}
	if len(lost) != 1 || lost[0] != id {
		t.Fatalf("OnLost calls %v", lost)
	}
	if _, err := st.store.Stat(id); !errors.Is(err, tiering.ErrNotExist) {
		t.Fatalf("lost object still there: %v", err)
	}
}

// TestG3FullFallsThroughToG4 runs G3 on a 6 MiB tmpfs: once it is full,
// write-back goes to G4, and blocks already in G3 keep reading.
func TestG3FullFallsThroughToG4(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skip(t, "needs root to mount a tmpfs")
	}
	ctx := context.Background()
	dir := t.TempDir()
	g3dir := filepath.Join(dir, "g3")
	os.MkdirAll(g3dir, 0o700)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", g3dir).CombinedOutput(); err != nil {
		testenv.Skip(t, "mount tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", g3dir).Run() })
	st := openStack(t, dir, g3dir, 0, true) // no capacity limit: the filesystem is the limit
	defer st.close(t)
	const files = 40 // 10 MiB through a 6 MiB filesystem
	ids := make([]tiering.ObjectID, files)
	for i := range ids {
		ids[i], _ = st.store.Create("ns", 64<<10, "file")
		if _, err := st.store.WriteAt(ctx, ids[i], data(uint64(i), 256<<10), 0); err != nil {
			t.Fatal(err)
		}
		if err := st.store.Flush(ctx, ids[i]); err != nil {
			t.Fatalf("flush %d: %v", i, err)
		}
	}
	evictAll(t, st.store)
	got := make([]byte, 256<<10)
	for i, id := range ids {
		if n, err := st.store.ReadAt(ctx, id, got, 0); err != nil || n != len(got) || !bytes.Equal(got, data(uint64(i), len(got))) {
			t.Fatalf("file %d: n=%d err=%v", i, n, err)
		}
	}
	s := st.store.Stats()
	if s.Demotions[tiering.TierG3] == 0 || s.Demotions[tiering.TierG4] == 0 {
		t.Fatalf("want write-back to both G3 and G4, got %v", s.Demotions)
	}
	if s.BlockHits[tiering.TierG3]+s.BlockHits[tiering.TierG4] == 0 {
		t.Fatalf("want reads from below G2, got %v", s.BlockHits)
	}
	if s.ObjectsLost != 0 {
		t.Fatalf("%d objects lost with G4 available", s.ObjectsLost)
	}
	t.Logf("demotions %v, hits %v", s.Demotions, s.BlockHits)
}

// TestG3FullNoG4DropsWithReason: with no G4, blocks G3 cannot take are
// dropped, counted by reason, and their files lost whole; the files that
// remain read back exactly.
func TestG3FullNoG4DropsWithReason(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skip(t, "needs root to mount a tmpfs")
	}
	ctx := context.Background()
	dir := t.TempDir()
	g3dir := filepath.Join(dir, "g3")
	os.MkdirAll(g3dir, 0o700)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", g3dir).CombinedOutput(); err != nil {
		testenv.Skip(t, "mount tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", g3dir).Run() })
	st := openStack(t, dir, g3dir, 0, false)
	defer st.close(t)
	var ids []tiering.ObjectID
	for i := 0; i < 40; i++ {
		id, _ := st.store.Create("ns", 64<<10, "file")
		if _, err := st.store.WriteAt(ctx, id, data(uint64(i), 256<<10), 0); err != nil {
			t.Fatal(err)
		}
		st.store.Flush(ctx, id) // ErrNotExist once the object is dropped
		ids = append(ids, id)
	}
	s := st.store.Stats()
	if s.Dropped["no_space"] == 0 || s.ObjectsLost == 0 {
		t.Fatalf("want drops with reason no_space and lost objects, got dropped=%v lost=%d", s.Dropped, s.ObjectsLost)
	}
	got := make([]byte, 256<<10)
	alive := 0
	for i, id := range ids {
		n, err := st.store.ReadAt(ctx, id, got, 0)
		switch {
		case errors.Is(err, tiering.ErrNotExist) || errors.Is(err, tiering.ErrLost):
		case err != nil:
			t.Fatalf("file %d: %v", i, err)
		case n != len(got) || !bytes.Equal(got, data(uint64(i), len(got))):
			t.Fatalf("file %d read wrong bytes", i)
		default:
			alive++
		}
	}
	if alive == 0 {
		t.Fatal("no file survived in G3")
	}
	t.Logf("%d of %d files kept, dropped %v", alive, len(ids), s.Dropped)
}
