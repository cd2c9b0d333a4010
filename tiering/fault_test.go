package tiering_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/internal/testenv"
	"github.com/ctxmem/ctxmemd/tiering"
	"github.com/ctxmem/ctxmemd/tiering/faulttier"
	"github.com/ctxmem/ctxmemd/tiering/health"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// writeOut writes want as a new object, flushes it and pushes it out of
// G2, so the next read promotes from below.
func writeOut(t *testing.T, fs *faultStack, want []byte) tiering.ObjectID {
	t.Helper()
	ctx := context.Background()
	id, err := fs.store.Create("ns", 64<<10, "file")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.store.WriteAt(ctx, id, want, 0); err != nil {
		t.Fatal(err)
	}
	flushWithin(t, fs.store, id, 10*time.Second)
	if _, err := fs.store.Demote(ctx, id); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestPromotionFromFaultyTier: a promotion that meets a corrupt copy loses
// the object (ErrLost, no bytes); one that meets an unavailable tier is an
// I/O error that loses nothing, and the same read succeeds once the tier
// answers; a get that stalls past the caller's deadline returns in time.
func TestPromotionFromFaultyTier(t *testing.T) {
	ctx := context.Background()
	fs := openFaultStack(t, t.TempDir(), 8<<20, 0, false, nil)
	defer fs.close(t)
	want := data(3, 256<<10)

	id := writeOut(t, fs, want)
	undo := fs.g3.Inject(faulttier.Fault{Op: faulttier.Get, Err: tier.ErrUnavailable})
	got := make([]byte, len(want))
	if _, err := fs.store.ReadAt(ctx, id, got, 0); err == nil || errors.Is(err, tiering.ErrLost) || tiering.Errno(err) != 5 {
		t.Fatalf("read with G3 unavailable = %v; want EIO, not a loss", err)
	}
	undo()
	if n, err := fs.store.ReadAt(ctx, id, got, 0); err != nil || !bytes.Equal(got[:n], want) {
		t.Fatalf("read after G3 answers again: %d bytes, %v", n, err)
	}

	id = writeOut(t, fs, want)
	stall := fs.g3.Inject(faulttier.Fault{Op: faulttier.Get, Delay: time.Minute})
	dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	start := time.Now()
	_, err := fs.store.ReadAt(dctx, id, got, 0)
	cancel()
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("read of a stalled tier with a 300 ms deadline = %v after %v", err, time.Since(start))
	}
	stall()
	if _, err := fs.store.Stat(id); err != nil {
		t.Fatalf("a stalled read lost the object: %v", err)
	}

	fs.g3.Inject(faulttier.Fault{Op: faulttier.Get, Err: tier.ErrCorrupt, Times: 1})
	clear(got)
	n, err := fs.store.ReadAt(ctx, id, got, 0)
	if !errors.Is(err, tiering.ErrLost) {
		t.Fatalf("read of a corrupt copy = %d, %v; want ErrLost", n, err)
	}
	if n > 0 && !bytes.Equal(got[:n], want[:n]) {
		t.Fatal("a read that met a corrupt copy returned wrong bytes")
	}
	if _, err := fs.store.Stat(id); !errors.Is(err, tiering.ErrNotExist) {
		t.Fatalf("object after a corrupt copy: %v; want lost", err)
	}
}

// TestSinkToFailingG4: a sink whose G4 puts fail reports the error, keeps
// every block readable from its old copies, and a later sink completes.
func TestSinkToFailingG4(t *testing.T) {
	ctx := context.Background()
	fs := openFaultStack(t, t.TempDir(), 8<<20, 0, true, nil)
	defer fs.close(t)
	want := data(4, 512<<10)
	id, _ := fs.store.Create("ns", 64<<10, "file")
	if _, err := fs.store.WriteAt(ctx, id, want, 0); err != nil {
		t.Fatal(err)
	}
	flushWithin(t, fs.store, id, 10*time.Second)
	undo := fs.g4.Inject(faulttier.Fault{Op: faulttier.Put, After: 3, Err: tier.ErrUnavailable})
	if _, err := fs.store.Sink(ctx, id); !errors.Is(err, tier.ErrUnavailable) {
		t.Fatalf("sink with G4 failing after 3 puts = %v; want ErrUnavailable", err)
	}
	got := make([]byte, len(want))
	if n, err := fs.store.ReadAt(ctx, id, got, 0); err != nil || !bytes.Equal(got[:n], want) {
		t.Fatalf("read after a failed sink: %d, %v", n, err)
	}
	undo()
	res, err := fs.store.Sink(ctx, id)
	if err != nil || res.Moved == 0 {
		t.Fatalf("second sink = %+v, %v", res, err)
	}
	tiers, _ := fs.store.BlockTiers(id)
	for i, tr := range tiers {
		if tr != tiering.TierG4 {
			t.Fatalf("block %d in %q after sink", i, tr)
		}
	}
	clear(got)
	if n, err := fs.store.ReadAt(ctx, id, got, 0); err != nil || !bytes.Equal(got[:n], want) {
		t.Fatalf("read after sink: %d, %v", n, err)
	}
}

// TestWriteBackFallsToG4WhenG3Fails: a G3 whose puts fail (I/O error) does
// not lose a file that G4 can take, and a restart serves it from G4.
func TestWriteBackFallsToG4WhenG3Fails(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	fs := openFaultStack(t, dir, 8<<20, 0, true, nil)
	fs.g3.Inject(faulttier.Fault{Op: faulttier.Put, Err: tier.ErrNoSpace})
	want := data(5, 256<<10)
	id, _ := fs.store.Create("ns", 64<<10, "file")
	if _, err := fs.store.WriteAt(ctx, id, want, 0); err != nil {
		t.Fatal(err)
	}
	flushWithin(t, fs.store, id, 10*time.Second)
	if fs.g4.Calls(faulttier.Put) == 0 {
		t.Fatal("no block went to G4")
	}
	fs.close(t)
	fs.open(t, true)
	defer fs.close(t)
	got := make([]byte, len(want))
	if n, err := fs.store.ReadAt(ctx, id, got, 0); err != nil || !bytes.Equal(got[:n], want) {
		t.Fatalf("read after restart: %d, %v", n, err)
	}
}

// TestUnansweredG4PutIsDeletedBeforeFlush: a G4 put that stored the block
// but failed with "unavailable" (the object store's deadline passed after
// the write) leaves a copy nobody records. After a TRIM of that block, an
// NBD FLUSH must not return until that copy is deleted: recovery of an
// export adopts every copy of its keys (a crash soak finding).
func TestUnansweredG4PutIsDeletedBeforeFlush(t *testing.T) {
	ctx := context.Background()
	fs := openFaultStack(t, t.TempDir(), 8<<20, 0, true, func(c *tiering.Config) { c.G3 = nil })
	defer fs.close(t)
	undo := fs.g4.Inject(faulttier.Fault{Op: faulttier.Put, Err: tier.ErrUnavailable, Late: true})
	id, err := fs.store.CreateWith("nbd", 64<<10, tiering.CreateOptions{Kind: tiering.KindNBD, Durability: tiering.DurabilityDevice})
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.store.Truncate(ctx, id, 1<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.store.WriteAt(ctx, id, data(8, 64<<10), 0); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for fs.g4.Faults(faulttier.Put) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if fs.g4.Faults(faulttier.Put) == 0 {
		t.Fatal("the write-back never reached G4")
	}
	k := tier.Key{Namespace: "nbd", Object: uint64(id), Index: 0, Gen: 1}
	// Still failing late (every retry stores and fails): the block is
	// dropped while no put is in flight or between two of them.
	defer undo()
	if err := fs.store.Discard(ctx, id, 0, 64<<10); err != nil {
		t.Fatal(err)
	}
	fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := fs.store.Flush(fctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.g4t.Stat(ctx, k); err == nil {
		t.Fatal("FLUSH returned after a TRIM while G4 still holds the block's unanswered copy")
	}
}

// TestReclaimedG3CopyDoesNotComeBack: G3 reclaim (DemoteFromG3) moves an
// export block to G4, but its G3 record stays in the log until G3 takes
// the segment out after the hook returns. Here the segment never goes (a
// kill -9 at that point): a TRIM and an acknowledged FLUSH must still
// leave no copy of the block that a restart could adopt, and the block
// reads as zeros after the restart.
func TestReclaimedG3CopyDoesNotComeBack(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	fs := openFaultStack(t, dir, 8<<20, 0, true, nil)
	const bs = 64 << 10
	id := newExport(t, fs, bs, 4)
	if _, err := fs.store.WriteAt(ctx, id, data(9, bs), 0); err != nil {
		t.Fatal(err)
	}
	flushWithin(t, fs.store, id, 10*time.Second)
	k := tier.Key{Namespace: "nbd", Object: uint64(id), Index: 0, Gen: 1}
	if _, err := fs.g3s.Stat(ctx, k); err != nil {
		t.Fatalf("block not written back to G3: %v", err)
	}
	fs.store.DemoteFromG3([]tier.Key{k})
	if _, err := fs.g4t.Stat(ctx, k); err != nil {
		t.Fatalf("reclaim did not copy the block to G4: %v", err)
	}
	if err := fs.store.Discard(ctx, id, 0, bs); err != nil {
		t.Fatal(err)
	}
	flushWithin(t, fs.store, id, 10*time.Second)
	if _, err := fs.g3s.Stat(ctx, k); err == nil {
		t.Fatal("FLUSH after TRIM returned while the reclaimed segment's G3 record of the block is still live")
	}
	fs.close(t)
	fs.open(t, true)
	defer fs.close(t)
	if got := readAll(t, fs.store, id, bs); !bytes.Equal(got, make([]byte, bs)) {
		t.Fatal("after a restart the trimmed block reads its old bytes")
	}
}

// TestReclaimKeepsFlushedVersionOfBusyExportBlock: G3 reclaims the segment
// holding the flushed version of an export block while the write-back of
// its newer bytes is in flight (in the soak, that very put's roll-over
// does the reclaim). Neither a G4 copy nor a copy forward can be ordered
// against that put, and dropping the flushed version lost the block to a
// kill -9 before the put landed (zeros after restart). G3 must keep the
// record instead (Relocate), and the newer bytes still win once stored.
func TestReclaimKeepsFlushedVersionOfBusyExportBlock(t *testing.T) {
	ctx := context.Background()
	fs := openFaultStack(t, t.TempDir(), 8<<20, 0, true, nil)
	const bs = 64 << 10
	id := newExport(t, fs, bs, 4)
	v1, v2 := data(11, bs), data(12, bs)
	if _, err := fs.store.WriteAt(ctx, id, v1, 0); err != nil {
		t.Fatal(err)
	}
	flushWithin(t, fs.store, id, 10*time.Second)
	gate := faulttier.NewGate()
	remove := fs.g3.Inject(faulttier.Fault{Op: faulttier.Put, Match: faulttier.Block(0), Gate: gate})
	if _, err := fs.store.WriteAt(ctx, id, v2, 0); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gate.Arrived():
	case <-time.After(5 * time.Second):
		t.Fatal("write-back of the newer bytes never reached G3")
	}
	k := tier.Key{Namespace: "nbd", Object: uint64(id), Index: 0, Gen: 1}
	fs.store.DemoteFromG3([]tier.Key{k})
	if got := fs.store.Stats().Relocations; got != 1 {
		t.Fatalf("Relocations = %d; want 1 (the flushed version kept in G3)", got)
	}
	if got := fs.g3s.Stats().Relocated; got != 1 {
		t.Fatalf("G3 Relocated = %d; want 1", got)
	}
	remove()
	gate.Release()
	flushWithin(t, fs.store, id, 10*time.Second)
	fs.close(t)
	fs.open(t, true)
	defer fs.close(t)
	if got := readAll(t, fs.store, id, bs); !bytes.Equal(got, v2) {
		t.Fatal("after restart the block does not read its newest flushed bytes")
	}
}

// newExport creates an NBD export of blocks blocks of bs bytes.
func newExport(t *testing.T, fs *faultStack, bs int, blocks int64) tiering.ObjectID {
	t.Helper()
	id, err := fs.store.CreateWith("nbd", bs, tiering.CreateOptions{Kind: tiering.KindNBD, Durability: tiering.DurabilityDevice})
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.store.Truncate(context.Background(), id, blocks*int64(bs)); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestReclaimDemotesInParallel: a G3 reclaim copies the live blocks of the
// segment to G4 DemoteWorkers at a time, not one after another (one at a
// time, the writers waiting on the roll-over stalled for seconds while a
// 32 MiB segment of small blocks went to G4 in the three-host replay), and
// every block reads its bytes from G4 afterwards.
func TestReclaimDemotesInParallel(t *testing.T) {
	ctx := context.Background()
	const workers, files, bs = 4, 16, 64 << 10
	fs := openFaultStack(t, t.TempDir(), 8<<20, 0, true, func(c *tiering.Config) { c.DemoteWorkers = workers })
	defer fs.close(t)
	ids, keys := writtenBackToG3(t, fs, files, bs)
	gate := faulttier.NewGate()
	remove := fs.g4.Inject(faulttier.Fault{Op: faulttier.Put, Gate: gate})
	done := make(chan struct{})
	go func() {
		defer close(done)
		fs.store.DemoteFromG3(keys)
	}()
	testenv.Eventually(t, 5*time.Second, func() bool { return gate.Waiting() >= workers },
		"%d G4 puts of the reclaim in flight at once", workers)
	if n := gate.Waiting(); n != workers {
		t.Fatalf("%d G4 puts in flight; want DemoteWorkers = %d", n, workers)
	}
	remove()
	gate.Release()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("DemoteFromG3 did not return")
	}
	for i, k := range keys {
		if _, err := fs.g4t.Stat(ctx, k); err != nil {
			t.Fatalf("file %d: reclaim did not copy its block to G4: %v", i, err)
		}
		if _, err := fs.store.Demote(ctx, ids[i]); err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, fs.store, ids[i], bs); !bytes.Equal(got, data(uint64(i), bs)) {
			t.Fatalf("file %d reads wrong bytes after the reclaim", i)
		}
	}
}

// TestReclaimWithHungG4Returns: a G3 reclaim whose G4 puts never answer
// (a hung object store) still returns, within the puts' deadline and the
// G4 health machine's verdict, not after a deadline per block; the files
// whose only copy was in the segment are lost (KV cache: recomputed),
// those still in G2 keep their bytes, and none reads wrong bytes.
func TestReclaimWithHungG4Returns(t *testing.T) {
	ctx := context.Background()
	const files, bs = 32, 64 << 10
	fs := openFaultStack(t, t.TempDir(), 8<<20, 0, true, nil) // DemoteWorkers: the default
	defer fs.close(t)
	ids, keys := writtenBackToG3(t, fs, files, bs)
	for i := 0; i < files; i += 2 { // half of them only in G3
		if _, err := fs.store.Demote(ctx, ids[i]); err != nil {
			t.Fatal(err)
		}
	}
	gate := faulttier.NewGate() // never released: every G4 put hangs until its deadline
	defer gate.Release()
	fs.g4.Inject(faulttier.Fault{Op: faulttier.Put, Gate: gate})
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		fs.store.DemoteFromG3(keys)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("DemoteFromG3 against a hung G4 did not return within 2 minutes")
	}
	t.Logf("reclaim of %d blocks against a hung G4 returned after %v (%d G4 puts reached the tier)", files, time.Since(start).Round(time.Millisecond), fs.g4.Calls(faulttier.Put))
	kept := 0
	for i, id := range ids {
		buf := make([]byte, bs)
		n, err := fs.store.ReadAt(ctx, id, buf, 0)
		if err != nil {
			continue // lost or unavailable: allowed, never wrong bytes
		}
		if n != bs || !bytes.Equal(buf, data(uint64(i), bs)) {
			t.Fatalf("file %d reads wrong bytes after the reclaim (%d bytes)", i, n)
		}
		kept++
	}
	if kept < files/2 {
		t.Errorf("%d of %d files read back; want at least the %d still in G2", kept, files, files/2)
	}
}

// TestHungG3ReadIsBounded: reads of a file only G3 holds, from a G3 whose
// device stops answering (a read that ignores its context, as pread
// does), fail with EIO-class tier.ErrUnavailable after LocalReadTimeout
// instead of waiting for the device; five such failures take G3 down and
// the next read fails at once without reaching it; the late reads, once
// the device answers, never write into the caller's buffer; and when it
// answers again the probe brings G3 back and the file reads its bytes.
// Before, the reader waited as long as the device did (a new user's
// frozen G3 held one for 783 s), holding its object's lock.
func TestHungG3ReadIsBounded(t *testing.T) {
	ctx := context.Background()
	const timeout, bs = 200 * time.Millisecond, 64 << 10
	fs := openFaultStack(t, t.TempDir(), 8<<20, 0, false, func(c *tiering.Config) { c.LocalReadTimeout = timeout })
	defer fs.close(t)
	want := data(77, bs)
	id := writeOut(t, fs, want) // 64 KiB blocks: one block, only in G3
	stall := faulttier.NewGate()
	defer stall.Release()
	remove := fs.g3.Inject(faulttier.Fault{Op: faulttier.Get, Stall: stall})
	bufs := make([][]byte, 5)
	for i := range bufs {
		bufs[i] = make([]byte, bs)
		done := make(chan error, 1)
		go func() { _, err := fs.store.ReadAt(ctx, id, bufs[i], 0); done <- err }()
		select {
		case err := <-done:
			if !errors.Is(err, tier.ErrUnavailable) {
				t.Fatalf("read %d from a hung G3: %v; want tier.ErrUnavailable", i, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("read %d from a hung G3 did not return (deadline %v)", i, timeout)
		}
		for j := range bufs[i] {
			bufs[i][j] = 0xAB // the caller reuses its buffer
		}
	}
	if n := fs.store.Stats().LocalReadsAbandoned; n != 5 {
		t.Fatalf("LocalReadsAbandoned = %d; want 5", n)
	}
	calls := fs.g3.Calls(faulttier.Get)
	if _, err := fs.store.ReadAt(ctx, id, make([]byte, bs), 0); !errors.Is(err, tier.ErrUnavailable) {
		t.Fatalf("read with G3 down: %v; want tier.ErrUnavailable", err)
	}
	if got := fs.g3.Calls(faulttier.Get); got != calls {
		t.Fatalf("a read reached G3 after five failures (%d calls, %d before): it should be down", got, calls)
	}
	remove()
	stall.Release() // the device answers: the five late reads complete
	testenv.Eventually(t, 10*time.Second, func() bool {
		got := make([]byte, bs)
		n, err := fs.store.ReadAt(ctx, id, got, 0)
		return err == nil && n == bs && bytes.Equal(got, want)
	}, "G3 back up and the file reading its bytes")
	time.Sleep(100 * time.Millisecond) // let any late read finish writing
	for i, b := range bufs {
		for j, c := range b {
			if c != 0xAB {
				t.Fatalf("a late read wrote into the buffer of read %d (byte %d = %#x)", i, j, c)
			}
		}
	}
}

// TestCloseWithHungG3Returns: Close returns, with an error, within its
// deadline and closeStuckGrace when a write-back is blocked in a G3 put
// that never answers (a pwrite the kernel does not interrupt); before, it
// waited for the device, and so did the daemon's SIGTERM. The put that
// answers later, after Close, does no harm.
func TestCloseWithHungG3Returns(t *testing.T) {
	ctx := context.Background()
	fs := openFaultStack(t, t.TempDir(), 8<<20, 0, false, nil)
	stall := faulttier.NewGate()
	defer stall.Release()
	fs.g3.Inject(faulttier.Fault{Op: faulttier.Put, Stall: stall})
	id, err := fs.store.Create("ns", 64<<10, "file")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.store.WriteAt(ctx, id, data(5, 64<<10), 0); err != nil {
		t.Fatal(err)
	}
	select {
	case <-stall.Arrived():
	case <-time.After(10 * time.Second):
		t.Fatal("write-back never reached G3")
	}
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- fs.store.CloseContext(cctx) }()
	select {
	case err := <-done:
		if !errors.Is(err, tiering.ErrBlockedIO) || !errors.Is(err, tier.ErrUnavailable) {
			t.Fatalf("Close with a write-back blocked in G3: %v; want an error wrapping tiering.ErrBlockedIO", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return while a write-back was blocked in G3")
	}
	stall.Release()
	time.Sleep(200 * time.Millisecond) // the late put lands after Close
	fs.g3s.Close()
}

// writtenBackToG3 creates n files of one block of bs bytes (file i holds
// data(i, bs)), each written back to G3, and returns their ids and block
// keys.
func writtenBackToG3(t *testing.T, fs *faultStack, n, bs int) ([]tiering.ObjectID, []tier.Key) {
	t.Helper()
	ctx := context.Background()
	var ids []tiering.ObjectID
	var keys []tier.Key
	for i := range n {
		id, err := fs.store.Create("ns", bs, "file")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fs.store.WriteAt(ctx, id, data(uint64(i), bs), 0); err != nil {
			t.Fatal(err)
		}
		flushWithin(t, fs.store, id, 10*time.Second)
		k := tier.Key{Namespace: "ns", Object: uint64(id), Index: 0, Gen: 1}
		if _, err := fs.g3s.Stat(ctx, k); err != nil {
			t.Fatalf("file %d not written back to G3: %v", i, err)
		}
		ids, keys = append(ids, id), append(keys, k)
	}
	return ids, keys
}

// TestHungG3WriteIsBounded: write-back into a G3 whose device stops
// answering (a put that ignores its context, as pwrite does) fails each
// put after LocalWriteTimeout, counted in LocalWritesAbandoned; five take
// G3 down and write-back goes to G4. A block whose put is still in flight
// in G3 (a late put, whose older copy would win over G4's at recovery):
//   - of a cache-class object (a file) is written back to G4 anyway, its
//     G3 copy recorded stale, so the record names the block G4-wins and
//     the fsync returns;
//   - of a device-class object (an NBD export, whose recovery keeps every
//     copy found) is fenced: it stays dirty in G2 (a flush fails at once),
//     and a rewrite of it is not put anywhere until the late put returns;
//     then it is written back over it.
//
// After a restart every object reads its latest bytes: the late put's
// copy never shadows a newer one in G4 (lateLanded, lateG3Stale). Before,
// a write-back put waited as long as the device did, G3 never went down,
// and every write waited WriteTimeout (30 s) and failed with EIO.
func TestHungG3WriteIsBounded(t *testing.T) {
	t.Run("cache", func(t *testing.T) { testHungG3Write(t, false) })
	t.Run("device", func(t *testing.T) { testHungG3Write(t, true) })
}

func testHungG3Write(t *testing.T, device bool) {
	ctx := context.Background()
	const timeout, size = 200 * time.Millisecond, 1 << 20
	fs := openFaultStack(t, t.TempDir(), 8<<20, 0, true, func(c *tiering.Config) { c.LocalWriteTimeout = timeout })
	stall := faulttier.NewGate()
	defer stall.Release()
	remove := fs.g3.Inject(faulttier.Fault{Op: faulttier.Put, Stall: stall})
	removeProbe := fs.g3.Inject(faulttier.Fault{Op: faulttier.Probe, Stall: stall}) // a hung device answers nothing
	create := func(seed uint64) (tiering.ObjectID, []byte) {
		want := data(seed, size)
		var id tiering.ObjectID
		if device {
			id = newExport(t, fs, 64<<10, size/(64<<10))
		} else {
			var err error
			if id, err = fs.store.Create("ns", 64<<10, "file"); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := fs.store.WriteAt(ctx, id, want, 0); err != nil {
			t.Fatal(err)
		}
		return id, want
	}
	first, firstV1 := create(31)
	fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	err := fs.store.Flush(fctx, first)
	cancel()
	if device && !errors.Is(err, tier.ErrUnavailable) {
		t.Fatalf("flush of an export whose blocks' puts hang: %v; want tier.ErrUnavailable", err)
	}
	if !device && err != nil {
		t.Fatalf("flush of a file whose blocks' G3 puts hang: %v; want it written back to G4", err)
	}
	if n := fs.store.Stats().LocalWritesAbandoned; n < 5 {
		t.Fatalf("LocalWritesAbandoned = %d after flushing past a hung G3; want at least 5", n)
	}
	if h := fs.store.Health()[0]; h.State != health.Down {
		t.Fatalf("G3 %+v after five puts that did not return; want it down", h)
	}
	second, secondBytes := create(32) // G3 down: straight to G4
	flushWithin(t, fs.store, second, 20*time.Second)
	// A rewrite of the first object: an export's is not written back while
	// the late puts are out (else G4's newer copy would lose to them after
	// a restart), a file's goes to G4 recorded G4-wins.
	firstV2 := data(33, size)
	if _, err := fs.store.WriteAt(ctx, first, firstV2, 0); err != nil {
		t.Fatal(err)
	}
	if !device {
		flushWithin(t, fs.store, first, 20*time.Second)
	}
	// From now on G3 refuses puts (a full or failing disk), so the
	// rewrite goes to G4 only: the late puts' older copies in G3 must not
	// win over it at the restart below.
	fs.g3.Inject(faulttier.Fault{Op: faulttier.Put, Err: errDisk})
	remove()
	removeProbe()
	stall.Release() // the device answers: the late puts (of firstV1) land in G3
	testenv.Eventually(t, 20*time.Second, func() bool {
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return fs.store.Flush(fctx, first) == nil
	}, "the first object flushing once the late puts returned")
	for _, c := range []struct {
		id   tiering.ObjectID
		want []byte
	}{{first, firstV2}, {second, secondBytes}} {
		if got := readAll(t, fs.store, c.id, size); !bytes.Equal(got, c.want) {
			t.Fatalf("object %d reads other bytes before the restart", c.id)
		}
	}
	fs.close(t)
	fs.open(t, true)
	defer fs.close(t)
	for _, c := range []struct {
		id   tiering.ObjectID
		want []byte
	}{{first, firstV2}, {second, secondBytes}} {
		got := make([]byte, size)
		n, err := fs.store.ReadAt(ctx, c.id, got, 0)
		if err == nil && (n != size || !bytes.Equal(got, c.want)) {
			t.Fatalf("object %d reads other bytes after a restart (first v1 %v)", c.id, bytes.Equal(got, firstV1))
		}
		if err != nil && !errors.Is(err, tiering.ErrNotExist) {
			t.Fatalf("object %d after a restart: %v", c.id, err)
		}
	}
}

// TestHungG3WithoutG4FailsWritersFast: with G3 hung and no G4, once G3
// is down no write-back can progress, and an fsync fails with
// tier.ErrUnavailable within a second or so (downError) instead of
// waiting WriteTimeout.
func TestHungG3WithoutG4FailsWritersFast(t *testing.T) {
	ctx := context.Background()
	fs := openFaultStack(t, t.TempDir(), 8<<20, 0, false, func(c *tiering.Config) {
		c.LocalWriteTimeout = 200 * time.Millisecond
		c.WriteTimeout = time.Minute
	})
	stall := faulttier.NewGate()
	defer stall.Release()
	fs.g3.Inject(faulttier.Fault{Op: faulttier.Put, Stall: stall})
	id, err := fs.store.Create("ns", 64<<10, "file")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.store.WriteAt(ctx, id, data(33, 1<<20), 0); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err = fs.store.Flush(fctx, id)
	if !errors.Is(err, tier.ErrUnavailable) || time.Since(start) > 10*time.Second {
		t.Fatalf("flush with G3 hung and no G4: %v after %v; want tier.ErrUnavailable within 10 s (WriteTimeout is 1 min)", err, time.Since(start))
	}
	t.Logf("flush failed after %v: %v", time.Since(start).Round(time.Millisecond), err)
	stall.Release()
	fs.close(t)
}

// TestRewriteWithG3DownFlushesToG4: a file written back to G3 is
// rewritten in place while G3 is hung and down. The rewrite goes to G4,
// and the old G3 copy of each key cannot be deleted. The fsync still
// returns at once: the record names those blocks as G4-wins
// (objectRecord.G4Wins), and no delete is sent into the down device. After
// a restart with the old copies still in G3, the file reads the rewrite,
// and GC deletes the old copies. Before, each stale-copy delete waited
// LocalWriteTimeout in the hung device and the object stayed unrecorded
// until one succeeded: the fsync waited WriteTimeout and failed.
func TestRewriteWithG3DownFlushesToG4(t *testing.T) {
	ctx := context.Background()
	const bs, size = 64 << 10, 512 << 10
	fs := openFaultStack(t, t.TempDir(), 16<<20, 0, true, func(c *tiering.Config) {
		c.LocalWriteTimeout = 200 * time.Millisecond
		c.LocalReadTimeout = 200 * time.Millisecond
		c.WriteTimeout = time.Minute
	})
	id, v1 := flushedFile(t, fs, bs, 41, size)
	if fs.g3.Calls(faulttier.Put) < size/bs {
		t.Fatalf("only %d G3 puts for the first version", fs.g3.Calls(faulttier.Put))
	}
	// The device stops answering; other files' puts take G3 down.
	unhang := hangG3(t, fs)
	for i := 0; tierHealth(t, fs.store, tiering.TierG3).State != health.Down; i++ {
		if i == 40 {
			t.Fatal("G3 not down after 40 files written into its hung device")
		}
		other, err := fs.store.Create("ns", bs, "file")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fs.store.WriteAt(ctx, other, data(uint64(100+i), bs), 0); err != nil {
			t.Fatal(err)
		}
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_ = fs.store.Flush(fctx, other) // fails while its put is out
		cancel()
	}
	deletes := fs.g3.Calls(faulttier.Delete)
	v2 := data(42, size)
	if _, err := fs.store.WriteAt(ctx, id, v2, 0); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	flushWithin(t, fs.store, id, 5*time.Second)
	t.Logf("rewrite of %d KiB flushed with G3 down in %v", size>>10, time.Since(start).Round(time.Millisecond))
	if n := fs.g3.Calls(faulttier.Delete) - deletes; n != 0 {
		t.Fatalf("%d deletes sent into the down G3", n)
	}
	if got := readAll(t, fs.store, id, size); !bytes.Equal(got, v2) {
		t.Fatal("the rewrite reads other bytes before the restart")
	}
	// Stop with G3 still hung: the store says so, and its owner leaves G3
	// open (closing it would wait for the calls still in its device).
	if err := fs.store.Close(); err != nil {
		t.Fatal(err)
	}
	if !fs.store.BlockedIn(tiering.TierG3) {
		t.Fatal("BlockedIn(G3) is false with puts still in the hung device")
	}
	unhang() // the late puts land: their objects were never recorded clean
	testenv.Eventually(t, 10*time.Second, func() bool { return !fs.store.BlockedIn(tiering.TierG3) }, "the late calls returning")
	fs.g3s.Close()
	fs.g4t.Close()
	fs.open(t, true)
	defer fs.close(t)
	k := tier.Key{Namespace: "ns", Object: uint64(id), Index: 0, Gen: 1}
	if _, err := fs.g3s.Stat(ctx, k); err != nil {
		t.Fatalf("the old G3 copy is gone before the restart's GC: %v (the test no longer shows G4 winning)", err)
	}
	if got := readAll(t, fs.store, id, size); !bytes.Equal(got, v2) {
		t.Fatalf("the rewrite reads other bytes after a restart (the old version: %v)", bytes.Equal(got, v1))
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		_, err := fs.g3s.Stat(ctx, k)
		return errors.Is(err, tier.ErrNotFound)
	}, "GC deleting the old G3 copy after the restart")
}

// TestFailedTruncateChangesNothing: a shrinking truncate whose last block
// cannot be read (its only copy in a G3 that fails reads) fails and
// leaves the object as it was, before and after a restart. Before, it
// dropped the blocks past the new end first and then failed zeroing the
// last one's tail, leaving the size unchanged: the dropped blocks read as
// zeros inside the file, and the object was recorded clean that way.
func TestFailedTruncateChangesNothing(t *testing.T) {
	ctx := context.Background()
	const bs, size = 64 << 10, 256 << 10
	fs := openFaultStack(t, t.TempDir(), 16<<20, 0, false, nil)
	id, want := flushedFile(t, fs, bs, 80, size)
	if _, err := fs.store.Demote(ctx, id); err != nil { // G3 holds the only copies
		t.Fatal(err)
	}
	remove := fs.g3.Inject(faulttier.Fault{Op: faulttier.Get, Err: errDisk})
	if err := fs.store.Truncate(ctx, id, 1); err == nil {
		t.Fatal("truncate to 1 byte succeeded with its last block unreadable")
	}
	remove()
	check := func(when string) {
		t.Helper()
		got := make([]byte, size+1)
		n, err := fs.store.ReadAt(ctx, id, got, 0)
		if err != nil && !errors.Is(err, io.EOF) {
			t.Fatalf("%s: read: %v", when, err)
		}
		if n != size || !bytes.Equal(got[:n], want) {
			t.Fatalf("%s: %d bytes, equal to what was written: %v (a failed truncate must change nothing)", when, n, bytes.Equal(got[:min(n, size)], want[:min(n, size)]))
		}
	}
	check("after the failed truncate")
	flushWithin(t, fs.store, id, 10*time.Second)
	fs.close(t)
	fs.open(t, false)
	defer fs.close(t)
	check("after a restart")
}

// TestShrinkWithG3HungFlushes: a file whose blocks are in G3 is truncated
// shorter while G3's device hangs. The dropped blocks' G3 copies cannot be
// deleted, but the record does not list those blocks, and recovery reads
// no copy of a block its record does not list: the fsync returns at once,
// and after a restart the file has its new size and bytes. Before, the
// object could not be recorded clean until G3 answered: the fsync waited
// WriteTimeout and failed (a breaker saw 30-60 s and EIO), and a kill -9
// then lost the whole file.
func TestShrinkWithG3HungFlushes(t *testing.T) {
	ctx := context.Background()
	const bs, size = 64 << 10, 256 << 10
	fs := openFaultStack(t, t.TempDir(), 16<<20, 0, true, func(c *tiering.Config) {
		c.LocalWriteTimeout = 200 * time.Millisecond
		c.WriteTimeout = time.Minute
	})
	id, want := flushedFile(t, fs, bs, 81, size)
	unhang := hangG3(t, fs)
	if err := fs.store.Truncate(ctx, id, bs); err != nil { // whole blocks: the last one needs no read
		t.Fatal(err)
	}
	start := time.Now()
	flushWithin(t, fs.store, id, 5*time.Second)
	t.Logf("fsync after a shrink with G3 hung: %v", time.Since(start).Round(time.Millisecond))
	if err := fs.store.Close(); err != nil {
		t.Fatal(err)
	}
	unhang()
	testenv.Eventually(t, 10*time.Second, func() bool { return !fs.store.BlockedIn(tiering.TierG3) }, "the late calls returning")
	fs.g3s.Close()
	fs.g4t.Close()
	fs.open(t, true)
	defer fs.close(t)
	got := make([]byte, size)
	n, err := fs.store.ReadAt(ctx, id, got, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("after a restart: %v", err)
	}
	if n != bs || !bytes.Equal(got[:n], want[:bs]) {
		t.Fatalf("after a restart: %d bytes (want %d), bytes equal %v", n, bs, bytes.Equal(got[:min(n, bs)], want[:min(n, bs)]))
	}
}

// flushedFile creates a file of size bytes (seed's pattern) in blocks of
// bs, writes and flushes it, and returns its id and bytes.
func flushedFile(t *testing.T, fs *faultStack, bs int, seed uint64, size int) (tiering.ObjectID, []byte) {
	t.Helper()
	id, err := fs.store.Create("ns", bs, "file")
	if err != nil {
		t.Fatal(err)
	}
	want := data(seed, size)
	if _, err := fs.store.WriteAt(context.Background(), id, want, 0); err != nil {
		t.Fatal(err)
	}
	flushWithin(t, fs.store, id, 10*time.Second)
	return id, want
}

// hangG3 makes every call into fs's G3 wait (as a hung device's pread,
// pwrite and fdatasync do, ignoring their context) until the returned
// unhang runs (also at cleanup).
func hangG3(t *testing.T, fs *faultStack) (unhang func()) {
	stall := faulttier.NewGate()
	var removes []func()
	for _, op := range []faulttier.Op{faulttier.Put, faulttier.Get, faulttier.Delete, faulttier.Probe, faulttier.Sync} {
		removes = append(removes, fs.g3.Inject(faulttier.Fault{Op: op, Stall: stall}))
	}
	unhang = func() {
		for _, r := range removes {
			r()
		}
		stall.Release()
	}
	t.Cleanup(unhang)
	return unhang
}

// TestFailedDiscardKeepsWholeBlocks: a discard whose partial edge block
// cannot be read (its only copy in a G3 that fails reads) fails before it
// frees any whole block inside the range: the object reads as it was.
// Before, the whole blocks were freed as the walk met them, and the walk
// failed at the edge after them.
func TestFailedDiscardKeepsWholeBlocks(t *testing.T) {
	ctx := context.Background()
	const bs, size = 64 << 10, 256 << 10
	fs := openFaultStack(t, t.TempDir(), 16<<20, 0, false, nil)
	defer fs.close(t)
	id, want := flushedFile(t, fs, bs, 82, size)
	if _, err := fs.store.Demote(ctx, id); err != nil { // G3 holds the only copies
		t.Fatal(err)
	}
	remove := fs.g3.Inject(faulttier.Fault{Op: faulttier.Get, Err: errDisk})
	// Whole blocks 0 and 1, then half of block 2: the edge comes last.
	if err := fs.store.Discard(ctx, id, 0, 2*bs+bs/2); err == nil {
		t.Fatal("discard succeeded with its edge block unreadable")
	}
	remove()
	if got := readAll(t, fs.store, id, size); !bytes.Equal(got, want) {
		t.Fatal("a failed discard changed the object")
	}
}
