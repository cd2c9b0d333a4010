package tiering_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/internal/testenv"
	"github.com/ctxmem/ctxmemd/tiering"
	"github.com/ctxmem/ctxmemd/tiering/faulttier"
	"github.com/ctxmem/ctxmemd/tiering/g4"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

func tierHealth(t *testing.T, s *tiering.Store, name string) tiering.TierHealth {
	t.Helper()
	for _, h := range s.Health() {
		if h.Tier == name {
			return h
		}
	}
	t.Fatalf("no health for %s in %+v", name, s.Health())
	return tiering.TierHealth{}
}

// flushWorkers is tiering.Config.FlushWorkers' default (write-back
// goroutines, each with at most one put in flight).
const flushWorkers = 4

var errDisk = fmt.Errorf("pwrite: %w", errors.New("input/output error"))

// TestFailingG3GoesDownAndWriteBackBypassesIt: a G3 whose every put fails
// with an I/O error is taken down after five failures in a row; write-back
// then goes straight to G4 without waiting on G3 (at most one probe per
// second reaches it), status says why, and once G3 answers again a probe
// brings it up and new blocks land in it.
func TestFailingG3GoesDownAndWriteBackBypassesIt(t *testing.T) {
	ctx := context.Background()
	fs := openFaultStack(t, t.TempDir(), 32<<20, 0, true, nil)
	defer fs.close(t)
	undo := fs.g3.Inject(faulttier.Fault{Op: faulttier.Put, Err: errDisk})
	// A dead disk fails its probes too.
	undoProbe := fs.g3.Inject(faulttier.Fault{Op: faulttier.Probe, Err: errDisk})
	want := data(7, 1<<20) // 16 blocks of 64 KiB
	id, err := fs.store.Create("ns", 64<<10, "file")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := fs.store.WriteAt(ctx, id, want, 0); err != nil {
		t.Fatal(err)
	}
	flushWithin(t, fs.store, id, 10*time.Second)
	probes := int64(time.Since(start)/(250*time.Millisecond)) + 1 // at most one call through per probe interval
	h := tierHealth(t, fs.store, tiering.TierG3)
	if h.State.String() != "down" || h.Transitions[2] != 1 {
		t.Fatalf("G3 after 16 failed puts: %+v", h)
	}
	// 5 failures take it down; puts the other write-back workers had
	// admitted by then still reach it, and then one per probe interval.
	if n := fs.g3.Calls(faulttier.Put); n < 5 || n > 5+int64(flushWorkers-1)+probes {
		t.Fatalf("G3 saw %d puts for 16 blocks; want 5 before it went down, at most %d in flight then and %d probes", n, flushWorkers-1, probes)
	}
	if h.Refused == 0 {
		t.Fatalf("no refused calls counted: %+v", h)
	}
	for _, u := range fs.store.Occupancy() {
		if u.Name == tiering.TierG3 && (u.Health != "down" || !u.Degraded || u.HealthReason == "") {
			t.Fatalf("occupancy of a down G3: %+v", u)
		}
	}
	if _, err := fs.store.Demote(ctx, id); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, fs.store, id, len(want)); !bytes.Equal(got, want) {
		t.Fatal("bytes written back past a down G3 read back wrong")
	}

	undo()
	undoProbe()
	// The core's probe loop brings it up without a request needing it.
	testenv.Eventually(t, 5*time.Second, func() bool {
		return tierHealth(t, fs.store, tiering.TierG3).State.String() == "up"
	}, "G3 up once its probe answers")
	if fs.g3.Calls(faulttier.Probe) == 0 {
		t.Fatal("G3 came back without a probe")
	}
	id2, err := fs.store.Create("ns", 64<<10, "file")
	if err != nil {
		t.Fatal(err)
	}
	before := fs.g3.Calls(faulttier.Put)
	if _, err := fs.store.WriteAt(ctx, id2, want, 0); err != nil {
		t.Fatal(err)
	}
	flushWithin(t, fs.store, id2, 10*time.Second)
	if h := tierHealth(t, fs.store, tiering.TierG3); h.State.String() != "up" {
		t.Fatalf("G3 after it answers again: %+v", h)
	}
	if n := fs.g3.Calls(faulttier.Put) - before; n < 15 {
		t.Fatalf("only %d of 16 blocks went to G3 once it was up again", n)
	}
}

// TestDownG3ReadsGoToG4: blocks with copies in G3 and G4 are read from G4
// while G3's reads fail, without each read trying G3 first once it is down.
func TestDownG3ReadsGoToG4(t *testing.T) {
	ctx := context.Background()
	fs := openFaultStack(t, t.TempDir(), 32<<20, 0, true, nil)
	defer fs.close(t)
	want := data(8, 1<<20)
	id := writeOut(t, fs, want)
	if _, err := fs.store.Sink(ctx, id); err != nil { // G4 copies too
		t.Fatal(err)
	}
	gets := fs.g3.Calls(faulttier.Get) // the sink read G3
	fs.g3.Inject(faulttier.Fault{Op: faulttier.Get, Err: errDisk})
	fs.g3.Inject(faulttier.Fault{Op: faulttier.Probe, Err: errDisk})
	for range 3 {
		if got := readAll(t, fs.store, id, len(want)); !bytes.Equal(got, want) {
			t.Fatal("wrong bytes with G3 failing")
		}
		if _, err := fs.store.Demote(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if h := tierHealth(t, fs.store, tiering.TierG3); h.State.String() != "down" {
		t.Fatalf("G3 after failing reads: %+v", h)
	}
	if n := fs.g3.Calls(faulttier.Get) - gets; n > 6 {
		t.Fatalf("G3 saw %d gets for 48 block reads; want it skipped once down", n)
	}
}

// TestBypassedTierIsNotReadAndNothingIsLost: a tier put into bypass is not
// read; a block whose only copy is there is an I/O error (EIO), not a loss,
// and reads again once the bypass is lifted.
func TestBypassedTierIsNotReadAndNothingIsLost(t *testing.T) {
	ctx := context.Background()
	fs := openFaultStack(t, t.TempDir(), 8<<20, 0, false, nil)
	defer fs.close(t)
	want := data(9, 256<<10)
	id := writeOut(t, fs, want)
	if err := fs.store.SetBypass(tiering.TierG3, true, "test"); err != nil {
		t.Fatal(err)
	}
	if err := fs.store.SetBypass("G9", true, "test"); err == nil {
		t.Fatal("bypass of an unknown tier accepted")
	}
	gets := fs.g3.Calls(faulttier.Get)
	got := make([]byte, len(want))
	if _, err := fs.store.ReadAt(ctx, id, got, 0); tiering.Errno(err) != 5 || errors.Is(err, tiering.ErrLost) || !errors.Is(err, tier.ErrUnavailable) {
		t.Fatalf("read of a bypassed tier's only copy = %v; want EIO, not a loss", err)
	}
	if n := fs.g3.Calls(faulttier.Get) - gets; n != 0 {
		t.Fatalf("a bypassed G3 was read %d times", n)
	}
	if h := tierHealth(t, fs.store, tiering.TierG3); h.State.String() != "bypassed" || h.Reason != "test" {
		t.Fatalf("health in bypass: %+v", h)
	}
	if err := fs.store.SetBypass(tiering.TierG3, false, "test over"); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, fs.store, id, len(want)); !bytes.Equal(got, want) {
		t.Fatal("wrong bytes after the bypass")
	}
	if h := tierHealth(t, fs.store, tiering.TierG3); h.State.String() != "up" {
		t.Fatalf("health after the bypass and a read: %+v", h)
	}
}

// TestFullG3SpillsToG4: a G3 that answers "no space" is degraded (full):
// write-back stores the blocks in G4, puts skip G3 for the backoff instead
// of trying it for every block (counted as refused), and once G3 takes a
// put again it is up and blocks land in it.
func TestFullG3SpillsToG4(t *testing.T) {
	ctx := context.Background()
	fs := openFaultStack(t, t.TempDir(), 32<<20, 0, true, nil)
	defer fs.close(t)
	undo := fs.g3.Inject(faulttier.Fault{Op: faulttier.Put, Err: fmt.Errorf("segment: %w", tier.ErrNoSpace)})
	want := data(10, 1<<20)
	id, err := fs.store.Create("ns", 64<<10, "file")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.store.WriteAt(ctx, id, want, 0); err != nil {
		t.Fatal(err)
	}
	flushWithin(t, fs.store, id, 10*time.Second)
	h := tierHealth(t, fs.store, tiering.TierG3)
	if h.State.String() != "degraded" || !h.Full || h.Refused == 0 {
		t.Fatalf("G3 after no space: %+v", h)
	}
	// At most one put per write-back worker (4) before the first "no
	// space" answer is observed; none after it.
	if n := fs.g3.Calls(faulttier.Put); n > 4 {
		t.Fatalf("a full G3 was tried %d times for 16 blocks within its backoff", n)
	}
	if n := fs.g4.Calls(faulttier.Put); n < 16 {
		t.Fatalf("G4 took %d of 16 blocks", n)
	}
	if _, err := fs.store.Demote(ctx, id); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, fs.store, id, len(want)); !bytes.Equal(got, want) {
		t.Fatal("bytes spilled to G4 read back wrong")
	}
	undo()
	time.Sleep(1100 * time.Millisecond) // the full backoff (1 s)
	id2, _ := fs.store.Create("ns", 64<<10, "file")
	if _, err := fs.store.WriteAt(ctx, id2, want, 0); err != nil {
		t.Fatal(err)
	}
	flushWithin(t, fs.store, id2, 10*time.Second)
	if h := tierHealth(t, fs.store, tiering.TierG3); h.State.String() != "up" || h.Full {
		t.Fatalf("G3 after it takes blocks again: %+v", h)
	}
}

// TestCoreRetainsDeviceBlocksInG4: the core attaches itself to G4 as its
// tier.Retainer at Open (no callback wired by the caller): G4's expiry
// keeps the blocks of a device-class object and drops a cache object's.
func TestCoreRetainsDeviceBlocksInG4(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	local, err := g4.NewLocal(filepath.Join(dir, "g4"))
	if err != nil {
		t.Fatal(err)
	}
	t4, err := g4.NewTier(ctx, local, g4.TierOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer t4.Close()
	s, err := tiering.Open(ctx, tiering.Config{DataDir: dir, G2Bytes: 8 << 20, G4: t4, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dev, err := s.CreateWith("ns", 64<<10, tiering.CreateOptions{Kind: "vol", Durability: tiering.DurabilityDevice})
	if err != nil {
		t.Fatal(err)
	}
	file, err := s.Create("ns", 64<<10, "file")
	if err != nil {
		t.Fatal(err)
	}
	want := data(11, 256<<10)
	for _, id := range []tiering.ObjectID{dev, file} {
		if _, err := s.WriteAt(ctx, id, want, 0); err != nil {
			t.Fatal(err)
		}
		flushWithin(t, s, id, 10*time.Second)
	}
	n, err := t4.ExpireBefore(ctx, time.Now().Add(time.Hour))
	if err != nil || n != 4 {
		t.Fatalf("expiry deleted %d blocks (%v); want the cache object's 4 only", n, err)
	}
	if u := t4.Usage(); u.Blocks != 4 {
		t.Fatalf("G4 keeps %d blocks; want the device object's 4", u.Blocks)
	}
}
