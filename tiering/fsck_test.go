package tiering_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/internal/testenv"
	"github.com/ctxmem/ctxmemd/tiering"
	"github.com/ctxmem/ctxmemd/tiering/faulttier"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// flipInSegments flips one byte of every occurrence of needle in the G3
// segment files under dir (payloads of records, superseded ones included)
// and fails the test when needle is in none.
func flipInSegments(t *testing.T, dir string, needle []byte) {
	t.Helper()
	segs, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	found := false
	for _, p := range segs {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		for off := 0; ; {
			i := bytes.Index(b[off:], needle)
			if i < 0 {
				break
			}
			i += off
			if _, err := f.WriteAt([]byte{b[i+10] ^ 0x40}, int64(i+10)); err != nil {
				t.Fatal(err)
			}
			found = true
			off = i + len(needle)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	if !found {
		t.Fatal("payload not found in any segment")
	}
}

// readBack reads the whole object: its bytes, or the error.
func readBack(s *tiering.Store, id tiering.ObjectID, n int) ([]byte, error) {
	got := make([]byte, n)
	m, err := s.ReadAt(context.Background(), id, got, 0)
	return got[:m], err
}

// residency returns where the object's blocks are.
func residency(t *testing.T, s *tiering.Store, id tiering.ObjectID) tiering.Residency {
	t.Helper()
	r, err := s.Residency(id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// fsckTier returns the report's entry for tier name.
func fsckTier(t *testing.T, r tiering.FsckReport, name string) tiering.FsckTierReport {
	t.Helper()
	for _, tr := range r.Tiers {
		if tr.Tier == name {
			return tr
		}
	}
	t.Fatalf("no %s in the report %+v", name, r)
	return tiering.FsckTierReport{}
}

func badOf(r tiering.FsckReport, id tiering.ObjectID) (tiering.FsckBadCopy, bool) {
	for _, b := range r.Bad {
		if b.Object == id {
			return b, true
		}
	}
	return tiering.FsckBadCopy{}, false
}

// TestFsckFindsAndDropsCorruptG3Copy is issue 16 item 6: a byte flipped
// in the G3 record of one block of each of three objects (A: G3 only, B:
// G2 and G3, C: G3 and G4) is found by Fsck; with Drop, A is lost (its
// reads fail, never with wrong bytes), B's block is written back again
// from its G2 copy, C reads from G4; a second check is clean, and after a
// restart nothing of the corrupt records comes back (C keeps its G4 copy).
func TestFsckFindsAndDropsCorruptG3Copy(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	fs := openFaultStack(t, dir, 8<<20, 0, true, nil)
	var lostMu sync.Mutex
	var lost []tiering.ObjectID
	fs.store.OnLost(func(id tiering.ObjectID) { lostMu.Lock(); lost = append(lost, id); lostMu.Unlock() })
	const size, bs = 256 << 10, 64 << 10
	wantA, wantB, wantC := data(71, size), data(72, size), data(73, size)

	a := writeOut(t, fs, wantA) // G3 only
	b, _ := fs.store.Create("ns", bs, "file")
	if _, err := fs.store.WriteAt(ctx, b, wantB, 0); err != nil {
		t.Fatal(err)
	}
	flushWithin(t, fs.store, b, 10*time.Second) // G2 and G3
	c := writeOut(t, fs, wantC)
	if _, err := fs.store.Sink(ctx, c); err != nil { // G4 only
		t.Fatal(err)
	}
	for range 3 { // warm: the eviction below writes it to G3 as well
		if got, err := readBack(fs.store, c, size); err != nil || !bytes.Equal(got, wantC) {
			t.Fatalf("read C: %v", err)
		}
	}
	if _, err := fs.store.Demote(ctx, c); err != nil {
		t.Fatal(err)
	}
	if r := residency(t, fs.store, a); r.G3 != 4 || r.G2 != 0 || r.G4 != 0 {
		t.Fatalf("A: %+v", r)
	}
	if r := residency(t, fs.store, b); r.G3 != 4 || r.G2 != 4 {
		t.Fatalf("B: %+v", r)
	}
	if r := residency(t, fs.store, c); r.G3 != 4 || r.G4 != 4 || r.G2 != 0 {
		t.Fatalf("C: %+v (want G3 and G4)", r)
	}
	// Block 1 of each object.
	for _, w := range [][]byte{wantA, wantB, wantC} {
		flipInSegments(t, filepath.Join(dir, "g3"), w[bs+100:bs+164])
	}

	rep, err := fs.store.Fsck(ctx, tiering.FsckOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g3r, g4r := fsckTier(t, rep, tiering.TierG3), fsckTier(t, rep, tiering.TierG4)
	if g3r.Checked != 12 || g3r.Corrupt != 3 || g3r.Missing != 0 || g3r.Dropped != 0 || g4r.Checked != 4 || g4r.Corrupt != 0 ||
		rep.BadCopies() != 3 || rep.Clean() || len(rep.Bad) != 3 || rep.LostObjects != 0 {
		t.Fatalf("fsck: %+v", rep)
	}
	for id, others := range map[tiering.ObjectID]string{a: "", b: "G2", c: "G4"} {
		bad, ok := badOf(rep, id)
		if !ok || bad.Block != 1 || bad.Tier != tiering.TierG3 || bad.Problem != tiering.FsckCorrupt || bad.Dropped ||
			bad.Outcome != tiering.FsckKept || (others == "" && len(bad.OtherCopies) != 0) ||
			(others != "" && (len(bad.OtherCopies) != 1 || bad.OtherCopies[0] != others)) {
			t.Fatalf("bad copy of object %d: %+v", id, bad)
		}
	}

	rep, err = fs.store.Fsck(ctx, tiering.FsckOptions{Drop: true, Name: func(id tiering.ObjectID) string { return "obj" }})
	if err != nil {
		t.Fatal(err)
	}
	// G3 quarantined the records at the first check: now they are missing.
	g3r = fsckTier(t, rep, tiering.TierG3)
	if g3r.Missing != 3 || g3r.Dropped != 3 || rep.LostObjects != 1 || len(rep.Lost) != 1 || rep.Lost[0] != a || rep.Rewritten != 1 {
		t.Fatalf("fsck --drop: %+v", rep)
	}
	for id, outcome := range map[tiering.ObjectID]string{a: tiering.FsckLost, b: tiering.FsckRewritten, c: tiering.FsckOtherCopy} {
		if bad, ok := badOf(rep, id); !ok || !bad.Dropped || bad.Outcome != outcome || bad.Path != "obj" {
			t.Fatalf("dropped copy of object %d: %+v, want outcome %s", id, bad, outcome)
		}
	}
	lostMu.Lock()
	if len(lost) != 1 || lost[0] != a {
		t.Fatalf("OnLost calls %v", lost)
	}
	lostMu.Unlock()
	if _, err := readBack(fs.store, a, size); !errors.Is(err, tiering.ErrNotExist) {
		t.Fatalf("read of lost A = %v, want ErrNotExist", err)
	}
	for _, x := range []struct {
		id   tiering.ObjectID
		want []byte
	}{{b, wantB}, {c, wantC}} {
		if got, err := readBack(fs.store, x.id, size); err != nil || !bytes.Equal(got, x.want) {
			t.Fatalf("read of object %d after the drop: %v (equal %v)", x.id, err, bytes.Equal(got, x.want))
		}
	}
	// B's block was written back anew: out of G2 it reads from G3.
	flushWithin(t, fs.store, b, 10*time.Second)
	if _, err := fs.store.Demote(ctx, b); err != nil {
		t.Fatal(err)
	}
	if r := residency(t, fs.store, b); r.G3 != 4 || r.G2 != 0 {
		t.Fatalf("B after the rewrite: %+v", r)
	}
	if got, err := readBack(fs.store, b, size); err != nil || !bytes.Equal(got, wantB) {
		t.Fatalf("read of B from G3 after the rewrite: %v", err)
	}
	if rep, err := fs.store.Fsck(ctx, tiering.FsckOptions{Drop: true}); err != nil || !rep.Clean() {
		t.Fatalf("third fsck: %+v, %v", rep, err)
	}

	// After a restart: the dropped G3 records stay dropped (a tombstone
	// each), so C's G4 copy is not mistaken for a stale one.
	waitGCIdle(t, fs.store, 10*time.Second)
	fs.close(t)
	fs.open(t, true)
	defer fs.close(t)
	if got, err := readBack(fs.store, c, size); err != nil || !bytes.Equal(got, wantC) {
		t.Fatalf("read of C after a restart: %v", err)
	}
	if got, err := readBack(fs.store, b, size); err != nil || !bytes.Equal(got, wantB) {
		t.Fatalf("read of B after a restart: %v", err)
	}
	if rep, err := fs.store.Fsck(ctx, tiering.FsckOptions{}); err != nil || !rep.Clean() || rep.Objects != 2 {
		t.Fatalf("fsck after a restart: %+v, %v", rep, err)
	}
}

// waitGCIdle waits until no garbage is pending.
func waitGCIdle(t *testing.T, s *tiering.Store, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for s.Stats().GCPending != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("gc still has %d copies pending after %v", s.Stats().GCPending, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFsckUnreadableIsKept: a tier that does not answer (an error, or no
// answer within the read timeout) makes copies unreadable, not bad:
// nothing is dropped even with Drop, the check returns in time, and the
// file reads its bytes once the tier answers again.
func TestFsckUnreadableIsKept(t *testing.T) {
	ctx := context.Background()
	fs := openFaultStack(t, t.TempDir(), 8<<20, 0, true, nil)
	defer fs.close(t)
	want := data(5, 256<<10)
	id := writeOut(t, fs, want)
	if _, err := fs.store.Sink(ctx, id); err != nil {
		t.Fatal(err)
	}
	undo := fs.g4.Inject(faulttier.Fault{Op: faulttier.Get, Err: tier.ErrUnavailable})
	rep, err := fs.store.Fsck(ctx, tiering.FsckOptions{Drop: true, Tiers: []string{"g4"}})
	undo()
	if err != nil {
		t.Fatal(err)
	}
	if g4r := fsckTier(t, rep, tiering.TierG4); g4r.Unreadable != 4 || g4r.Dropped != 0 || rep.BadCopies() != 0 || rep.Clean() || len(rep.Tiers) != 1 {
		t.Fatalf("fsck with G4 unavailable: %+v", rep)
	}
	stall := fs.g4.Inject(faulttier.Fault{Op: faulttier.Get, Delay: time.Minute})
	start := time.Now()
	rep, err = fs.store.Fsck(ctx, tiering.FsckOptions{Drop: true, ReadTimeout: 200 * time.Millisecond, Concurrency: 4})
	stall()
	if err != nil || time.Since(start) > 10*time.Second {
		t.Fatalf("fsck of a stalled G4: %v after %v", err, time.Since(start))
	}
	if g4r := fsckTier(t, rep, tiering.TierG4); g4r.Unreadable != 4 || g4r.Dropped != 0 {
		t.Fatalf("fsck of a stalled G4: %+v", rep)
	}
	// The stalled reads took G4 down (fsck goes through its health): its
	// copies were kept, and read again once a probe finds it answering.
	testenv.Eventually(t, 10*time.Second, func() bool {
		got, err := readBack(fs.store, id, len(want))
		return err == nil && bytes.Equal(got, want)
	}, "the file reading its bytes after fsck of an unavailable G4")
	if _, err := fs.store.Fsck(ctx, tiering.FsckOptions{Tiers: []string{"G3.5"}}); !errors.Is(err, tiering.ErrInvalid) {
		t.Fatalf("fsck of a tier the store lacks = %v, want ErrInvalid", err)
	}
}

// TestCollectGarbageFindsOrphans: copies planted in G3 and G4 for an
// object the store does not know are found (a dry run only reports them),
// queued and deleted; live copies are not touched.
func TestCollectGarbageFindsOrphans(t *testing.T) {
	ctx := context.Background()
	fs := openFaultStack(t, t.TempDir(), 8<<20, 0, true, nil)
	defer fs.close(t)
	want := data(9, 128<<10)
	id := writeOut(t, fs, want)
	orphan := tier.Key{Namespace: "ns", Object: 1 << 40, Index: 3, Gen: 1}
	if err := fs.g4t.Put(ctx, orphan, data(10, 5000)); err != nil {
		t.Fatal(err)
	}
	if err := fs.g3s.Put(ctx, orphan, data(11, 7000)); err != nil {
		t.Fatal(err)
	}
	rep, err := fs.store.CollectGarbage(ctx, tiering.GCOptions{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if n, b := rep.Garbage(); n != 2 || b != 12000 || !rep.DryRun {
		t.Fatalf("dry run: %+v", rep)
	}
	for _, tr := range rep.Tiers {
		if tr.Queued != 0 || tr.Garbage != 1 {
			t.Fatalf("dry run, %s: %+v", tr.Tier, tr)
		}
	}
	rep, err = fs.store.CollectGarbage(ctx, tiering.GCOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range rep.Tiers {
		switch tr.Tier {
		case tiering.TierG3:
			if tr.Queued != 1 || tr.Bytes != 7000 || tr.Listed != 3 {
				t.Fatalf("G3: %+v", tr)
			}
		case tiering.TierG4:
			if tr.Queued != 1 || tr.Bytes != 5000 || tr.Listed != 1 {
				t.Fatalf("G4: %+v", tr)
			}
		}
	}
	waitGCIdle(t, fs.store, 10*time.Second)
	if _, err := fs.g4t.Stat(ctx, orphan); !errors.Is(err, tier.ErrNotFound) {
		t.Fatalf("orphan still in G4: %v", err)
	}
	if _, err := fs.g3s.Stat(ctx, orphan); !errors.Is(err, tier.ErrNotFound) {
		t.Fatalf("orphan still in G3: %v", err)
	}
	if got, err := readBack(fs.store, id, len(want)); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("live object after gc: %v", err)
	}
	if rep, _ := fs.store.CollectGarbage(ctx, tiering.GCOptions{}); func() bool { n, _ := rep.Garbage(); return n != 0 }() {
		t.Fatalf("second gc: %+v", rep)
	}
}

// TestCollectGarbageSparesCopyUnderWrite races puts against
// CollectGarbage: a copy that a put has already stored (the tier lists
// it) but that has not returned yet belongs to no block's flags. It must
// not be collected: the block is busy, so it is left alone, and once the
// put returns the copy is the block's. Both a sink to G4 and a
// write-back to G3 are held that way.
func TestCollectGarbageSparesCopyUnderWrite(t *testing.T) {
	ctx := context.Background()
	fs := openFaultStack(t, t.TempDir(), 8<<20, 0, true, nil)
	defer fs.close(t)
	const size = 128 << 10
	want := data(21, size)
	id, _ := fs.store.Create("ns", 64<<10, "file")
	if _, err := fs.store.WriteAt(ctx, id, want, 0); err != nil {
		t.Fatal(err)
	}
	flushWithin(t, fs.store, id, 10*time.Second)

	// A sink to G4, held after each block landed.
	gate := faulttier.NewGate()
	remove := fs.g4.Inject(faulttier.Fault{Op: faulttier.Put, Hold: gate})
	sunk := make(chan error, 1)
	go func() { _, err := fs.store.Sink(ctx, id); sunk <- err }()
	<-gate.Arrived()
	rep, err := fs.store.CollectGarbage(ctx, tiering.GCOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range rep.Tiers {
		if tr.Tier == tiering.TierG4 && (tr.Listed != 1 || tr.Garbage != 0 || tr.Busy != 1) {
			t.Fatalf("gc during a held G4 put: %+v", tr)
		}
	}
	time.Sleep(50 * time.Millisecond) // a wrongly queued delete would run now
	gate.Release()
	remove()
	if err := <-sunk; err != nil {
		t.Fatal(err)
	}
	if r := residency(t, fs.store, id); r.G4 != 2 || r.G3 != 0 || r.G2 != 0 {
		t.Fatalf("after the sink: %+v", r)
	}
	waitGCIdle(t, fs.store, 10*time.Second)
	if got, err := readBack(fs.store, id, size); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read after sink during gc: %v", err)
	}

	// A write-back to G3 of new bytes, held after the record landed.
	want2 := data(22, size)
	gate = faulttier.NewGate()
	remove = fs.g3.Inject(faulttier.Fault{Op: faulttier.Put, Hold: gate})
	if _, err := fs.store.WriteAt(ctx, id, want2, 0); err != nil {
		t.Fatal(err)
	}
	<-gate.Arrived()
	rep, err = fs.store.CollectGarbage(ctx, tiering.GCOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range rep.Tiers {
		if tr.Tier == tiering.TierG3 && (tr.Garbage != 0 || tr.Busy < 1) {
			t.Fatalf("gc during a held G3 put: %+v", tr)
		}
	}
	time.Sleep(50 * time.Millisecond)
	gate.Release()
	remove()
	flushWithin(t, fs.store, id, 10*time.Second)
	waitGCIdle(t, fs.store, 10*time.Second)
	if _, err := fs.store.Demote(ctx, id); err != nil {
		t.Fatal(err)
	}
	if r := residency(t, fs.store, id); r.G3 != 2 || r.G2 != 0 {
		t.Fatalf("after the write-back: %+v", r)
	}
	if got, err := readBack(fs.store, id, size); err != nil || !bytes.Equal(got, want2) {
		t.Fatalf("read after write-back during gc: %v", err)
	}
	if rep, _ := fs.store.CollectGarbage(ctx, tiering.GCOptions{}); func() bool { n, _ := rep.Garbage(); return n != 0 }() {
		t.Fatalf("gc after the puts: %+v", rep)
	}
}

// TestFsckAndGCRaceWriters runs Fsck (with Drop) and CollectGarbage in
// loops while objects are rewritten, truncated, demoted, sunk and deleted:
// with nothing corrupt, neither may report a bad copy, collect a live one
// or lose an object, and every object reads back its last bytes.
func TestFsckAndGCRaceWriters(t *testing.T) {
	ctx := context.Background()
	// A small G3 (4 segments): reclaims demote to G4 during the checks.
	fs := openFaultStack(t, t.TempDir(), 4<<20, 4<<20, true, nil)
	defer fs.close(t)
	fs.store.OnLost(func(id tiering.ObjectID) { t.Errorf("object %d lost", id) })
	const n, size = 6, 192 << 10
	ids := make([]tiering.ObjectID, n)
	wants := make([][]byte, n)
	for i := range ids {
		ids[i], _ = fs.store.Create("ns", 64<<10, "file")
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var checkErr error
	var checkMu sync.Mutex
	fail := func(err error) { checkMu.Lock(); checkErr = errors.Join(checkErr, err); checkMu.Unlock() }
	var fsckRuns, gcRuns, checked, skipped, queued int64
	wg.Add(2)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			rep, err := fs.store.Fsck(ctx, tiering.FsckOptions{Drop: true, Concurrency: 3})
			if err != nil {
				fail(err)
				return
			}
			fsckRuns++
			for _, tr := range rep.Tiers {
				checked += tr.Checked
				skipped += tr.Skipped
			}
			if rep.BadCopies() > 0 || rep.Unreadable() > 0 {
				fail(errors.New("fsck found bad copies with nothing corrupt"))
				for _, b := range rep.Bad {
					t.Logf("bad: %+v", b)
				}
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			rep, err := fs.store.CollectGarbage(ctx, tiering.GCOptions{})
			if err != nil {
				fail(err)
				return
			}
			gcRuns++
			for _, tr := range rep.Tiers {
				queued += tr.Queued
			}
		}
	}()
	for round := range 60 {
		i := round % n
		w := data(uint64(100+round), size-(round%3)*(40<<10))
		if round%5 == 4 {
			if err := fs.store.Truncate(ctx, ids[i], 0); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := fs.store.WriteAt(ctx, ids[i], w, 0); err != nil {
			t.Fatal(err)
		}
		if err := fs.store.Truncate(ctx, ids[i], int64(len(w))); err != nil {
			t.Fatal(err)
		}
		wants[i] = w
		switch round % 4 {
		case 1:
			flushWithin(t, fs.store, ids[i], 10*time.Second)
			if _, err := fs.store.Demote(ctx, ids[i]); err != nil {
				t.Fatal(err)
			}
		case 2:
			if _, err := fs.store.Sink(ctx, ids[(i+1)%n]); err != nil && !errors.Is(err, tiering.ErrPinned) {
				t.Fatal(err)
			}
		case 3:
			if got, err := readBack(fs.store, ids[i], len(w)); err != nil || !bytes.Equal(got, w) {
				t.Fatalf("round %d: read: %v", round, err)
			}
		}
		if round%20 == 10 {
			tmp, _ := fs.store.Create("ns", 64<<10, "file")
			fs.store.WriteAt(ctx, tmp, w, 0)
			flushWithin(t, fs.store, tmp, 10*time.Second)
			if err := fs.store.Delete(ctx, tmp); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(stop)
	wg.Wait()
	if checkErr != nil {
		t.Fatal(checkErr)
	}
	t.Logf("%d fsck runs (%d copies checked, %d skipped), %d gc runs (%d copies queued)", fsckRuns, checked, skipped, gcRuns, queued)
	for i, id := range ids {
		flushWithin(t, fs.store, id, 10*time.Second)
		if _, err := fs.store.Demote(ctx, id); err != nil {
			t.Fatal(err)
		}
		if got, err := readBack(fs.store, id, len(wants[i])+1); err != nil || !bytes.Equal(got, wants[i]) {
			t.Fatalf("object %d at the end: %v (len %d, want %d)", id, err, len(got), len(wants[i]))
		}
	}
	if rep, err := fs.store.Fsck(ctx, tiering.FsckOptions{}); err != nil || !rep.Clean() {
		t.Fatalf("final fsck: %+v, %v", rep, err)
	}
}

// TestFsckHungG3GoesDown: an fsck over a G3 whose device stops answering
// (a read that ignores its context, as pread does) goes through G3's
// health machine: its first reads time out after ReadTimeout each and
// count as failed calls, five take G3 down, and every copy after that
// counts unreadable at once, without reaching the device. The check ends
// in about 5 × ReadTimeout, not N × ReadTimeout (before, each of the N
// copies waited its timeout: 30 s apiece in the daemon); nothing is
// dropped. A second fsck with G3 still down reads nothing and says why.
func TestFsckHungG3GoesDown(t *testing.T) {
	ctx := context.Background()
	const blocks, bs, timeout = 40, 64 << 10, 250 * time.Millisecond
	fs := openFaultStack(t, t.TempDir(), 8<<20, 0, false, nil)
	defer fs.close(t)
	want := data(9, blocks*bs)
	id := writeOut(t, fs, want)
	stall := faulttier.NewGate()
	defer stall.Release()
	remove := fs.g3.Inject(faulttier.Fault{Op: faulttier.Get, Stall: stall})
	calls := fs.g3.Calls(faulttier.Get)
	start := time.Now()
	rep, err := fs.store.Fsck(ctx, tiering.FsckOptions{Drop: true, Concurrency: 1, ReadTimeout: timeout})
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fsck of %d copies in a hung G3: %v; %+v", blocks, took.Round(time.Millisecond), rep.Tiers)
	if bound := 9 * timeout; took > bound {
		t.Fatalf("fsck of %d copies in a hung G3 took %v; want about 5 × %v (under %v), the tier down after its failures",
			blocks, took.Round(time.Millisecond), timeout, bound)
	}
	g3r := fsckTier(t, rep, tiering.TierG3)
	if g3r.Unreadable != blocks || g3r.Dropped != 0 || g3r.Corrupt+g3r.Missing != 0 || rep.Clean() {
		t.Fatalf("fsck of a hung G3: %+v; want %d unreadable, nothing dropped", g3r, blocks)
	}
	if n := fs.g3.Calls(faulttier.Get) - calls; n > 6 {
		t.Fatalf("fsck made %d reads of a hung G3; want at most 5 (down after them)", n)
	}
	if g3r.Refused != blocks-5 {
		t.Fatalf("fsck: %d copies refused by G3's health; want %d", g3r.Refused, blocks-5)
	}
	if g3r.Health != "down" {
		t.Fatalf("fsck report's G3 health = %q; want down", g3r.Health)
	}
	bad, ok := badOf(rep, id)
	if !ok || bad.Outcome != tiering.FsckKept || bad.Dropped {
		t.Fatalf("bad copy of the hung G3: %+v", bad)
	}
	if h := fs.store.Health(); h[0].State.String() != "down" {
		t.Fatalf("G3 health after fsck of a hung device: %+v; want down", h[0])
	}
	// G3 down: a second check reads nothing, at once, and says why.
	calls = fs.g3.Calls(faulttier.Get)
	start = time.Now()
	rep, err = fs.store.Fsck(ctx, tiering.FsckOptions{Drop: true, ReadTimeout: timeout})
	if err != nil || time.Since(start) > 2*time.Second {
		t.Fatalf("fsck with G3 down: %v after %v", err, time.Since(start))
	}
	g3r = fsckTier(t, rep, tiering.TierG3)
	if g3r.Unreadable != blocks || g3r.Refused != blocks || g3r.Dropped != 0 || fs.g3.Calls(faulttier.Get) != calls {
		t.Fatalf("fsck with G3 down: %+v, %d reads; want every copy refused, none read", g3r, fs.g3.Calls(faulttier.Get)-calls)
	}
	if bad, ok := badOf(rep, id); !ok || !strings.Contains(bad.Error, "down") {
		t.Fatalf("a copy refused with G3 down: %+v; want its error to say G3 is down", bad)
	}
	remove()
	stall.Release() // the device answers: the probe brings G3 back
	testenv.Eventually(t, 10*time.Second, func() bool {
		got, err := readBack(fs.store, id, len(want))
		return err == nil && bytes.Equal(got, want)
	}, "G3 back up and the file reading its bytes")
}

// TestFsckLocalReadTimeout: fsck's reads of a local tier are bounded by
// the store's LocalReadTimeout when it is shorter than fsck's own
// ReadTimeout (30 s by default), as every other read of a local tier is.
// Before, an online fsck with G3 hung waited 30 s per read until G3 went
// down (a breaker saw 30-60 s with --local-read-timeout 500ms).
func TestFsckLocalReadTimeout(t *testing.T) {
	ctx := context.Background()
	fs := openFaultStack(t, t.TempDir(), 8<<20, 0, false, func(c *tiering.Config) { c.LocalReadTimeout = 200 * time.Millisecond })
	defer fs.close(t)
	writeOut(t, fs, data(10, 8*64<<10))
	stall := faulttier.NewGate()
	defer stall.Release()
	fs.g3.Inject(faulttier.Fault{Op: faulttier.Get, Stall: stall})
	start := time.Now()
	rep, err := fs.store.Fsck(ctx, tiering.FsckOptions{Concurrency: 1}) // ReadTimeout: the default, 30 s
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("fsck of a hung G3 took %v with LocalReadTimeout 200ms; want about 5 × 200 ms", took)
	}
	if g3r := fsckTier(t, rep, tiering.TierG3); g3r.Unreadable == 0 || g3r.Dropped != 0 {
		t.Fatalf("fsck of a hung G3: %+v; want its copies unreadable, none dropped", g3r)
	}
	// The reads it gave up on are still in the device: a stop must not
	// close G3 under them.
	if !fs.store.BlockedIn(tiering.TierG3) {
		t.Fatal("BlockedIn(G3) is false with fsck's reads still in the hung device")
	}
	stall.Release()
	testenv.Eventually(t, 10*time.Second, func() bool { return !fs.store.BlockedIn(tiering.TierG3) }, "fsck's late reads returning")
}
