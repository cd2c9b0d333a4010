package tiering_test

import (
	"bytes"
	"context"
	"errors"
	iofs "io/fs"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/tiering"
	"github.com/ctxmem/ctxmemd/tiering/faulttier"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// countingHandler counts log records at Warn and above.
type countingHandler struct{ n atomic.Int64 }

func (h *countingHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h *countingHandler) Handle(context.Context, slog.Record) error    { h.n.Add(1); return nil }
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h *countingHandler) WithGroup(string) slog.Handler                { return h }

// TestG2OnlyKeepsFiles is issue 11 item 3: with no tier below G2 a file far
// smaller than DRAM never disappears after its write returned; under
// memory pressure whole objects leave in policy order (counted), never a
// block of one; a single object larger than DRAM gets ErrNoSpace instead
// of vanishing while it is written.
func TestG2OnlyKeepsFiles(t *testing.T) {
	ctx := context.Background()
	s, err := tiering.Open(ctx, tiering.Config{DataDir: t.TempDir(), G2Bytes: 8 << 20, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	small, _ := s.Create("ns", 64<<10, "file")
	want := data(7, 64<<10)
	if _, err := s.WriteAt(ctx, small, want, 0); err != nil {
		t.Fatal(err)
	}
	flushWithin(t, s, small, time.Second)
	time.Sleep(1500 * time.Millisecond)
	if got := readAll(t, s, small, len(want)); !bytes.Equal(got, want) {
		t.Fatal("small file changed")
	}
	if _, err := s.Demote(ctx, small); !errors.Is(err, tiering.ErrInvalid) {
		t.Fatalf("Demote in a G2-only store = %v; want ErrInvalid", err)
	}
	// 24 files of 1 MiB through 8 MiB: the oldest leave whole.
	var lost atomic.Int64
	s.OnLost(func(tiering.ObjectID) { lost.Add(1) })
	ids := make([]tiering.ObjectID, 24)
	for i := range ids {
		ids[i], _ = s.Create("ns", 64<<10, "file")
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := s.WriteAt(wctx, ids[i], data(uint64(100+i), 1<<20), 0)
		cancel()
		if err != nil {
			t.Fatalf("file %d: %v", i, err)
		}
		if i%4 == 3 {
			time.Sleep(300 * time.Millisecond) // let older files pass the write grace
		}
	}
	present := 0
	for i, id := range ids {
		info, err := s.Stat(id)
		if err != nil {
			continue
		}
		present++
		if info.Size != 1<<20 {
			t.Fatalf("file %d: size %d", i, info.Size)
		}
		if got := readAll(t, s, id, 1<<20); !bytes.Equal(got, data(uint64(100+i), 1<<20)) {
			t.Fatalf("file %d: wrong bytes", i)
		}
	}
	if present == len(ids) || present == 0 {
		t.Fatalf("%d of %d files present; want some evicted whole", present, len(ids))
	}
	if lost.Load() != int64(len(ids)-present) {
		t.Fatalf("OnLost told %d evictions; %d files are gone", lost.Load(), len(ids)-present)
	}
	if st := s.Stats(); st.Dropped["evicted_no_lower_tier"] == 0 || st.ObjectsLost != 0 {
		t.Fatalf("stats: dropped %v, lost %d", st.Dropped, st.ObjectsLost)
	}
	// One object larger than DRAM: ErrNoSpace within a bound.
	big, _ := s.Create("ns", 1<<20, "file")
	start := time.Now()
	var werr error
	for off := int64(0); off < 16<<20 && werr == nil; off += 1 << 20 {
		_, werr = s.WriteAt(ctx, big, data(1, 1<<20), off)
	}
	if !errors.Is(werr, tier.ErrNoSpace) {
		t.Fatalf("writing 16 MiB into 8 MiB of DRAM = %v; want ErrNoSpace", werr)
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Fatalf("ErrNoSpace after %v", d)
	}
	if info, err := s.Stat(big); err != nil || info.Size < 4<<20 {
		t.Fatalf("the file being written was evicted (%v, %+v)", err, info)
	}
}

// TestFullTiersBoundWriters is issue 11 item 4(a): when every tier below G2
// answers "no space", writers get ErrNoSpace within WriteTimeout instead of
// waiting without end, Flush too; the tiers show Full; the lost data is
// counted with its reason; the log is not flooded.
func TestFullTiersBoundWriters(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	logs := &countingHandler{}
	fs := openFaultStack(t, dir, 8<<20, 0, true, func(c *tiering.Config) {
		c.WriteTimeout = 2 * time.Second
		c.DirtyBytes = 2 << 20
		c.Logger = slog.New(logs)
	})
	defer fs.close(t)
	fs.g3.Inject(faulttier.Fault{Op: faulttier.Put, Err: tier.ErrNoSpace})
	fs.g4.Inject(faulttier.Fault{Op: faulttier.Put, Err: tier.ErrNoSpace})
	id, _ := fs.store.Create("ns", 64<<10, "file")
	start := time.Now()
	var werr error
	for off := int64(0); off < 64<<20 && werr == nil; off += 256 << 10 {
		_, werr = fs.store.WriteAt(ctx, id, data(uint64(off), 256<<10), off)
	}
	if !errors.Is(werr, tier.ErrNoSpace) && !errors.Is(werr, tiering.ErrNotExist) {
		t.Fatalf("write with every tier full = %v; want ErrNoSpace", werr)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("writer failed after %v (WriteTimeout 2s)", d)
	}
	full := map[string]bool{}
	for _, u := range fs.store.Occupancy() {
		full[u.Name] = u.Full
	}
	if !full["G3"] || !full["G4"] {
		t.Fatalf("occupancy full flags %v; want G3 and G4 full", full)
	}
	fctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	id2, _ := fs.store.Create("ns", 64<<10, "file")
	if _, err := fs.store.WriteAt(ctx, id2, data(5, 64<<10), 0); err != nil && !errors.Is(err, tier.ErrNoSpace) {
		t.Fatal(err)
	}
	ferr := fs.store.Flush(fctx, id2)
	if ferr == nil || fctx.Err() != nil {
		t.Fatalf("flush with every tier full = %v (ctx %v); want a bounded error", ferr, fctx.Err())
	}
	deadline := time.Now().Add(10 * time.Second)
	for fs.store.Stats().Dropped["no_space"] == 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if st := fs.store.Stats(); st.Dropped["no_space"] == 0 || st.ObjectsLost == 0 {
		t.Fatalf("dropped %v, lost %d; want the unstorable data counted", st.Dropped, st.ObjectsLost)
	}
	if n := logs.n.Load(); n > 40 {
		t.Fatalf("%d warnings logged in %v; want them rate-limited", n, time.Since(start))
	}
	// Space again: new writes are stored and the tiers are not full.
	fs.g3.Clear()
	fs.g4.Clear()
	id3, _ := fs.store.Create("ns", 64<<10, "file")
	if _, err := fs.store.WriteAt(ctx, id3, data(9, 128<<10), 0); err != nil {
		t.Fatal(err)
	}
	flushWithin(t, fs.store, id3, 10*time.Second)
	for _, u := range fs.store.Occupancy() {
		if u.Name == "G3" && u.Full {
			t.Fatal("G3 still full after it took a block")
		}
	}
}

// TestDeadTierWriterInterruptible is issue 11 item 4(b): with the only tier
// below G2 down, a writer waiting for the dirty bound returns as soon as
// its context ends (a FUSE INTERRUPT), and without one within
// WriteTimeout with ErrUnavailable.
func TestDeadTierWriterInterruptible(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	fs := openFaultStack(t, dir, 8<<20, 0, true, func(c *tiering.Config) {
		c.G3 = nil
		c.WriteTimeout = 3 * time.Second
		c.DirtyBytes = 1 << 20
	})
	defer fs.close(t)
	fs.g4.Inject(faulttier.Fault{Op: faulttier.Put, Err: tier.ErrUnavailable})
	id, _ := fs.store.Create("ns", 64<<10, "file")
	for off := int64(0); off < 1<<20; off += 256 << 10 {
		if _, err := fs.store.WriteAt(ctx, id, data(1, 256<<10), off); err != nil {
			t.Fatal(err)
		}
	}
	ictx, cancel := context.WithCancel(ctx)
	time.AfterFunc(300*time.Millisecond, cancel)
	start := time.Now()
	_, err := fs.store.WriteAt(ictx, id, data(2, 256<<10), 1<<20)
	if !errors.Is(err, context.Canceled) || time.Since(start) > 2*time.Second {
		t.Fatalf("interrupted write = %v after %v; want context.Canceled at once", err, time.Since(start))
	}
	start = time.Now()
	_, err = fs.store.WriteAt(ctx, id, data(2, 256<<10), 1<<20)
	// Either the wait times out (EIO) or write-back gave up on the
	// object first (same WriteTimeout): it is then lost, and counted.
	if !(errors.Is(err, tier.ErrUnavailable) && tiering.Errno(err) == 5) && !errors.Is(err, tiering.ErrNotExist) {
		t.Fatalf("write with G4 down = %v; want ErrUnavailable (EIO) or the object lost", err)
	}
	if errors.Is(err, tiering.ErrNotExist) && fs.store.Stats().Dropped["unavailable"] == 0 {
		t.Fatal("object gone but no block counted as dropped (unavailable)")
	}
	if d := time.Since(start); d < time.Second || d > 10*time.Second {
		t.Fatalf("failed after %v; want about WriteTimeout (3s)", d)
	}
}

// TestDataDirDeletedIsDegraded is issue 11 item 4's last line: deleting the
// data directory under a running store is detected and reported.
func TestDataDirDeletedIsDegraded(t *testing.T) {
	dir := t.TempDir()
	s, err := tiering.Open(context.Background(), tiering.Config{DataDir: dir, G2Bytes: 8 << 20, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if d := s.Stats().Degraded; d != "" {
		t.Fatalf("degraded at start: %s", d)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.Stats().Degraded == "" && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if d := s.Stats().Degraded; !strings.Contains(d, "deleted") {
		t.Fatalf("Stats.Degraded = %q after the data dir was deleted", d)
	}
}

// TestFlushBoundedUnderRewrites: Flush of a file another writer keeps
// dirty sees write-back progress on every put, but the file is never clean;
// it must still return within 4 × WriteTimeout (tier.ErrUnavailable), not
// wait while the writer goes on.
func TestFlushBoundedUnderRewrites(t *testing.T) {
	ctx := context.Background()
	fs := openFaultStack(t, t.TempDir(), 8<<20, 0, false, func(c *tiering.Config) { c.WriteTimeout = time.Second })
	defer fs.close(t)
	fs.g3.Inject(faulttier.Fault{Op: faulttier.Put, Delay: 30 * time.Millisecond})
	id, err := fs.store.Create("ns", 64<<10, "file")
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := uint64(0); ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := fs.store.WriteAt(ctx, id, data(i, 4096), 0); err != nil {
				t.Errorf("write: %v", err)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	defer func() { close(stop); <-done }()
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err = fs.store.Flush(fctx, id)
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush still waiting after %v under a steady rewriter", time.Since(start))
	}
	if err != nil && !errors.Is(err, tier.ErrUnavailable) {
		t.Fatalf("Flush = %v; want nil or ErrUnavailable", err)
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Fatalf("Flush took %v; bound is 4 × 1 s", d)
	}
	t.Logf("Flush under rewrites: %v after %v", err, time.Since(start))
}

// TestFailingG3SyncSparesG4Files: G3's sync fails with ENOENT (its
// directory deleted under the daemon: the directory fsync after a new
// segment). A file whose blocks are all in G4 fsyncs anyway (G3 is not
// synced for it), and a file with a block only G3 holds gets EIO
// (tier.ErrUnavailable), not an fs.ErrNotExist for the file (admin's
// evict and sink said "no such path" for it). Before, every fsync failed
// with the sync's ENOENT, whatever tier held the file.
func TestFailingG3SyncSparesG4Files(t *testing.T) {
	ctx := context.Background()
	fs := openFaultStack(t, t.TempDir(), 16<<20, 0, true, nil)
	defer fs.close(t)
	write := func(seed uint64) tiering.ObjectID {
		id, err := fs.store.Create("ns", 64<<10, "file")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fs.store.WriteAt(ctx, id, data(seed, 256<<10), 0); err != nil {
			t.Fatal(err)
		}
		return id
	}
	inG3 := write(70)
	fs.g3.Inject(faulttier.Fault{Op: faulttier.Sync, Err: syscall.ENOENT})
	err := fs.store.Flush(ctx, inG3)
	if !errors.Is(err, tier.ErrUnavailable) || errors.Is(err, iofs.ErrNotExist) {
		t.Fatalf("fsync of a file in G3 whose sync fails with ENOENT: %v; want tier.ErrUnavailable, not fs.ErrNotExist", err)
	}
	fs.g3.Inject(faulttier.Fault{Op: faulttier.Put, Err: errDisk}) // G3 takes nothing more: write-back goes to G4
	for i := range 4 {
		id := write(uint64(71 + i))
		fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err := fs.store.Flush(fctx, id)
		cancel()
		if err != nil {
			t.Fatalf("fsync of file %d, written back to G4, with G3's sync failing: %v", i, err)
		}
	}
}
