package tiering_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/tiering"
	"github.com/ctxmem/ctxmemd/tiering/g3"
	"github.com/ctxmem/ctxmemd/tiering/g4"
)

// Tests of batched restores from G4 packs (restore.go): the core brings a
// run of a sunk file's blocks up to G2 with one GetBlocks.

const restoreBS = 64 << 10

// isPack reports whether object name is a pack object (packname.go: the
// last segment starts with 'p').
func isPack(name string) bool {
	return strings.HasPrefix(name[strings.LastIndexByte(name, '/')+1:], "p")
}

// flipStore is an object store that flips one byte of every pack object
// it serves, back bytes before the object's end (0: none), in whole and
// ranged reads alike; hang makes every pack read wait for its context.
type flipStore struct {
	g4.ObjectStore
	back atomic.Int64
	hang atomic.Bool
}

func (f *flipStore) Get(ctx context.Context, name string) (io.ReadCloser, map[string]string, error) {
	rc, meta, err := f.ObjectStore.Get(ctx, name)
	if err != nil || !isPack(name) {
		return rc, meta, err
	}
	return f.wrap(ctx, name, rc, 0), meta, nil
}

func (f *flipStore) GetRange(ctx context.Context, name string, off, length int64) (io.ReadCloser, error) {
	rc, err := f.ObjectStore.GetRange(ctx, name, off, length)
	if err != nil || !isPack(name) {
		return rc, err
	}
	return f.wrap(ctx, name, rc, off), nil
}

func (f *flipStore) wrap(ctx context.Context, name string, rc io.ReadCloser, off int64) io.ReadCloser {
	if f.hang.Load() {
		<-ctx.Done()
		rc.Close()
		return io.NopCloser(errReader{ctx.Err()})
	}
	back := f.back.Load()
	if back == 0 {
		return rc
	}
	a, err := f.ObjectStore.Head(ctx, name)
	if err != nil {
		rc.Close()
		return io.NopCloser(errReader{err})
	}
	return &flipReader{rc: rc, pos: off, at: a.Size - back}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// flipReader flips the byte at absolute offset at of the object it reads
// from offset pos.
type flipReader struct {
	rc      io.ReadCloser
	pos, at int64
}

func (r *flipReader) Read(p []byte) (int, error) {
	n, err := r.rc.Read(p)
	if r.at >= r.pos && r.at < r.pos+int64(n) {
		p[r.at-r.pos] ^= 0xff
	}
	r.pos += int64(n)
	return n, err
}

func (r *flipReader) Close() error { return r.rc.Close() }

// restoreStack is a core with G3 and a packing G4 over a flipStore.
type restoreStack struct {
	store *tiering.Store
	g3    *g3.Store
	g4    *g4.Tier
	flip  *flipStore
}

func openRestore(t *testing.T, dir string, g2 int64) *restoreStack {
	t.Helper()
	f := &flipStore{}
	st, g3s, t4 := openPacked(t, dir, g2, func(s g4.ObjectStore) g4.ObjectStore { f.ObjectStore = s; return f })
	return &restoreStack{st, g3s, t4, f}
}

// openPacked opens a core with G2 of g2 bytes, G3 in dir/g3 and a G4 that
// packs over wrap(the local store in dir/g4).
func openPacked(t *testing.T, dir string, g2 int64, wrap func(g4.ObjectStore) g4.ObjectStore) (*tiering.Store, *g3.Store, *g4.Tier) {
	t.Helper()
	g3s, err := g3.Open(g3.Options{Dir: filepath.Join(dir, "g3"), SegmentBytes: 1 << 20, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	local, err := g4.NewLocal(filepath.Join(dir, "g4"))
	if err != nil {
		t.Fatal(err)
	}
	t4, err := g4.NewTier(context.Background(), wrap(local), g4.TierOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := tiering.Open(context.Background(), tiering.Config{DataDir: dir, G2Bytes: g2, G3: g3s, G4: t4, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return st, g3s, t4
}

func (r *restoreStack) close(t *testing.T) {
	t.Helper()
	if err := r.store.Close(); err != nil {
		t.Error(err)
	}
	r.g3.Close()
	r.g4.Close()
}

// sunkFile creates a file of blocks full blocks and sinks it to G4 (one
// pack: blocks*64 KiB is under the pack size).
func sunkFile(t *testing.T, st *tiering.Store, seed uint64, blocks int) (tiering.ObjectID, []byte) {
	t.Helper()
	ctx := context.Background()
	want := data(seed, blocks*restoreBS)
	id, err := st.Create("ns", restoreBS, "file")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.WriteAt(ctx, id, want, 0); err != nil {
		t.Fatal(err)
	}
	if res, err := st.Sink(ctx, id); err != nil || res.Moved != blocks {
		t.Fatalf("Sink = %+v, %v", res, err)
	}
	return id, want
}

// tiersOf returns the tier of each block of id, as one string ("2" for G2,
// "4" for G4).
func tiersOf(t *testing.T, st *tiering.Store, id tiering.ObjectID) string {
	t.Helper()
	tiers, err := st.BlockTiers(id)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, tn := range tiers {
		b.WriteString(strings.TrimPrefix(tn, "G"))
	}
	return b.String()
}

// readChunks reads id from off to off+n in 128 KiB reads (FUSE's size),
// stopping at the first error.
func readChunks(ctx context.Context, st *tiering.Store, id tiering.ObjectID, off int64, n int) ([]byte, error) {
	got := make([]byte, n)
	for pos := 0; pos < n; pos += 128 << 10 {
		q := got[pos:min(pos+128<<10, n)]
		m, err := st.ReadAt(ctx, id, q, off+int64(pos))
		if err != nil {
			return got[:pos+m], err
		}
	}
	return got, nil
}

// TestRestoreBatched: a sequential read of a sunk 16-block file costs one
// G4 GET and admits every block to G2, clean with its G4 copy kept (a
// second Sink puts nothing); so does a prestage, and a read after a
// restart (the CRC table comes with the whole-object GET). A lone block
// read in the middle of the file costs one GET and admits that block only.
func TestRestoreBatched(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	r := openRestore(t, dir, 64<<20)
	id, want := sunkFile(t, r.store, 1, 16)
	gets := func() int64 { return r.g4.Requests().Get }

	g0 := gets()
	got, err := readChunks(ctx, r.store, id, 0, len(want))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read: %v, bytes equal %v", err, bytes.Equal(got, want))
	}
	if d := gets() - g0; d != 1 {
		t.Errorf("sequential read of 16 packed blocks made %d G4 GETs; want 1", d)
	}
	if tiers := tiersOf(t, r.store, id); tiers != strings.Repeat("2", 16) {
		t.Errorf("after the read: tiers %s; want every block in G2", tiers)
	}
	puts := r.g4.Requests().Put
	waitGCIdle(t, r.store, 10*time.Second) // the first sink's G3 copies: a block whose delete is out is busy, skipped by Sink
	if res, err := r.store.Sink(ctx, id); err != nil || res.Moved != 0 || res.Released != 16 {
		t.Fatalf("second Sink = %+v, %v; want 16 copies released, none moved", res, err)
	}
	if d := r.g4.Requests().Put - puts; d != 0 {
		t.Errorf("second Sink made %d PUTs; want 0 (the G4 copies were kept)", d)
	}

	// A lone block in the middle: one GET, that block only.
	g0 = gets()
	one := make([]byte, restoreBS)
	if n, err := r.store.ReadAt(ctx, id, one, 9*restoreBS); err != nil || n != restoreBS || !bytes.Equal(one, want[9*restoreBS:10*restoreBS]) {
		t.Fatalf("read of block 9: n=%d err=%v", n, err)
	}
	if d := gets() - g0; d != 1 {
		t.Errorf("read of one block made %d GETs; want 1", d)
	}
	if tiers := tiersOf(t, r.store, id); tiers != "444444444244444"+"4" {
		t.Errorf("after reading block 9: tiers %s; want block 9 alone in G2", tiers)
	}

	// Prestage: one GET for the 15 blocks left.
	g0 = gets()
	if err := r.store.PrestageWait(ctx, id); err != nil {
		t.Fatal(err)
	}
	if d := gets() - g0; d > 2 {
		t.Errorf("prestage of 15 packed blocks made %d GETs; want at most 2 (blocks 0-8, 10-15)", d)
	}
	if tiers := tiersOf(t, r.store, id); tiers != strings.Repeat("2", 16) {
		t.Errorf("after prestage: tiers %s", tiers)
	}
	if s := r.store.Stats(); s.PrestageUseful != 0 || s.Prestaged != 15 {
		t.Errorf("prestage stats: %d staged, %d useful; want 15, 0", s.Prestaged, s.PrestageUseful)
	}

	// After a restart (no CRC table in memory): still one GET.
	r.close(t)
	r = openRestore(t, dir, 64<<20)
	defer r.close(t)
	g0 = gets()
	got, err = readChunks(ctx, r.store, id, 0, len(want))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read after restart: %v", err)
	}
	if d := gets() - g0; d != 1 {
		t.Errorf("read after a restart made %d GETs; want 1", d)
	}
}

// TestRestoreBatchBounded: a batched read never takes G2 past its high
// watermark; the blocks it could not bring up are read on their own.
func TestRestoreBatchBounded(t *testing.T) {
	ctx := context.Background()
	r := openRestore(t, t.TempDir(), 1<<20) // 16 blocks of 64 KiB
	defer r.close(t)
	id, want := sunkFile(t, r.store, 2, 32)
	if _, err := r.store.ReadAt(ctx, id, make([]byte, 1), 0); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(tiersOf(t, r.store, id), "2"); n < 2 || n > 15 {
		t.Errorf("one read of block 0 brought %d blocks up; want a run that fits under the high watermark of a 16-block G2", n)
	}
	if u := r.store.Occupancy()[0].UsedBytes; u > 1<<20 {
		t.Errorf("G2 holds %d bytes; budget 1 MiB", u)
	}
	got, err := readChunks(ctx, r.store, id, 0, len(want))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read of a file twice G2's size: %v", err)
	}
}

// TestRestoreBatchCorrupt: a block that fails its CRC32C in the middle of
// a batch is a miss for that block only: the blocks before it are
// admitted with their right bytes, the read returns ErrLost at it, never
// wrong bytes, and the blocks after it had read back.
func TestRestoreBatchCorrupt(t *testing.T) {
	ctx := context.Background()
	r := openRestore(t, t.TempDir(), 64<<20)
	defer r.close(t)
	id, want := sunkFile(t, r.store, 3, 16)
	// Blocks 6-15 first, good.
	got, err := readChunks(ctx, r.store, id, 6*restoreBS, 10*restoreBS)
	if err != nil || !bytes.Equal(got, want[6*restoreBS:]) {
		t.Fatalf("read of blocks 6-15: %v", err)
	}
	// Now block 5 reads corrupt: a byte of its payload flips.
	r.flip.back.Store(int64(10*restoreBS + 100))
	got, err = readChunks(ctx, r.store, id, 0, 6*restoreBS)
	if !errors.Is(err, tiering.ErrLost) {
		t.Fatalf("read over corrupt block 5: %v; want ErrLost", err)
	}
	if len(got) != 5*restoreBS || !bytes.Equal(got, want[:len(got)]) {
		t.Fatalf("read %d bytes before the loss (want blocks 0-4, %d), equal %v", len(got), 5*restoreBS, bytes.Equal(got, want[:min(len(got), len(want))]))
	}
	if s := r.g4.Stats(); s.CRCErrors != 1 {
		t.Errorf("G4 stats %+v; want one CRC error", s)
	}
	if s := r.store.Stats(); s.CRCErrors < 1 {
		t.Errorf("core counted %d CRC errors; want at least 1", s.CRCErrors)
	}
}

// TestRestoreBatchCancel: a batched read whose context ends while G4 hangs
// returns the context's error, admits nothing and leaves the file
// readable.
func TestRestoreBatchCancel(t *testing.T) {
	r := openRestore(t, t.TempDir(), 64<<20)
	defer r.close(t)
	id, want := sunkFile(t, r.store, 4, 16)
	r.flip.hang.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := r.store.ReadAt(ctx, id, make([]byte, len(want)), 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("read with G4 hung = %v; want the context's deadline", err)
	}
	if tiers := tiersOf(t, r.store, id); tiers != strings.Repeat("4", 16) {
		t.Errorf("after a cancelled read: tiers %s; want nothing admitted", tiers)
	}
	r.flip.hang.Store(false)
	got, err := readChunks(context.Background(), r.store, id, 0, len(want))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read after the hang: %v", err)
	}
}

// TestRestoreBatchPassthrough: a passthrough open of a sunk file fills its
// memory file with one G4 GET, and a block that fails its CRC32C in the
// middle of the run makes the open fail as a loss, never wrong bytes.
func TestRestoreBatchPassthrough(t *testing.T) {
	ctx := context.Background()
	r := openRestore(t, t.TempDir(), 64<<20)
	defer r.close(t)
	id, want := sunkFile(t, r.store, 5, 16)
	g0 := r.g4.Requests().Get
	pt, err := r.store.OpenPassthrough(ctx, id, false)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	if n, _ := pt.File.ReadAt(got, 0); n != len(want) || !bytes.Equal(got, want) {
		t.Fatal("memory file filled from G4: wrong bytes")
	}
	r.store.ClosePassthrough(id, false)
	pt.File.Close()
	if d := r.g4.Requests().Get - g0; d != 1 {
		t.Errorf("passthrough open of 16 packed blocks made %d G4 GETs; want 1", d)
	}

	id, _ = sunkFile(t, r.store, 6, 16)
	r.flip.back.Store(int64(3*restoreBS + 1)) // block 12's last byte
	if _, err := r.store.OpenPassthrough(ctx, id, false); !errors.Is(err, tiering.ErrLost) {
		t.Fatalf("passthrough open over a corrupt block = %v; want ErrLost", err)
	}
}
