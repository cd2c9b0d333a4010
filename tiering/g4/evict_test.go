package g4_test

import (
	"context"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/g4"
	"github.com/ctxmem/ctxmemd/tiering/tier"
	"github.com/ctxmem/ctxmemd/tiering/tiertest"
)

const evBlock = 4096

// tickClock returns a clock an hour ahead of the wall clock that advances
// a millisecond per call: Put order is eviction order, and every object's
// real ModTime is before any eviction's start.
func tickClock() func() time.Time {
	base := time.Now().Add(time.Hour)
	var n atomic.Int64
	return func() time.Time { return base.Add(time.Duration(n.Add(1)) * time.Millisecond) }
}

func signalled(tr *g4.Tier) bool {
	select {
	case <-tr.EvictSignal():
		return true
	default:
		return false
	}
}

func present(t *testing.T, tr *g4.Tier, k tier.Key) bool {
	t.Helper()
	p := make([]byte, evBlock)
	n, err := get(tr, k, p, 0)
	switch {
	case err == nil:
		if n != evBlock || string(p) != string(tiertest.Pattern(k, evBlock, 0)) {
			t.Fatalf("Get(%v) returned wrong bytes", k)
		}
		return true
	case errors.Is(err, tier.ErrNotFound):
		return false
	}
	t.Fatalf("Get(%v): %v", k, err)
	return false
}

// TestEvictOldest fills a 40-block tier past its high watermark (38
// blocks) and checks that Evict deletes the oldest blocks down to the low
// watermark (34 blocks), keeps the newest and the retained one, and that
// usage never goes above the capacity.
func TestEvictOldest(t *testing.T) {
	dir := t.TempDir()
	const capacity = 40 * evBlock
	retained := tier.Key{Namespace: "nbd-export", Object: 1, Gen: 1}
	tr := openTier(t, newLocal(t, dir), g4.TierOptions{
		Capacity: capacity, Now: tickClock(),
		Retain: func(k tier.Key) bool { return k.Namespace == "nbd-export" },
	})
	if n, err := tr.Evict(bg); err != nil || n != 0 {
		t.Fatalf("Evict of an empty tier = %d, %v", n, err)
	}
	keys := []tier.Key{key(1, 0), retained} // the two oldest
	for i := 1; i < 38; i++ {
		keys = append(keys, key(1, uint32(i)))
	}
	for i, k := range keys {
		if i == 38 {
			break
		}
		mustPutBlock(t, tr, k, tiertest.Pattern(k, evBlock, 0))
	}
	if signalled(tr) {
		t.Fatal("EvictSignal at the high watermark, not above it")
	}
	if n, err := tr.Evict(bg); err != nil || n != 0 {
		t.Fatalf("Evict at the high watermark = %d, %v; want 0", n, err)
	}
	last := keys[38]
	mustPutBlock(t, tr, last, tiertest.Pattern(last, evBlock, 0))
	if !signalled(tr) {
		t.Fatal("no EvictSignal after a Put over the high watermark")
	}
	n, err := tr.Evict(bg)
	if err != nil || n != 5 {
		t.Fatalf("Evict = %d, %v; want 5 (39 blocks down to 34)", n, err)
	}
	u := tr.Usage()
	if u.Blocks != 34 || u.UsedBytes != 34*evBlock || u.CapacityBytes != capacity {
		t.Fatalf("Usage after Evict = %+v", u)
	}
	// Gone: the oldest five except the retained one (keys[0], keys[2..5]).
	for i, k := range keys {
		want := !(i == 0 || i >= 2 && i <= 5)
		if got := present(t, tr, k); got != want {
			t.Errorf("block %d (%v) present = %v, want %v", i, k, got, want)
		}
		if !want {
			if _, err := os.Stat(blockPath(t, dir, k)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("evicted block %d still stored: %v", i, err)
			}
		}
	}
	if tr.Evicted() != 5 || tr.Stats().Evicted != 5 || tr.Stats().Expired != 0 {
		t.Fatalf("Evicted %d, Stats %+v", tr.Evicted(), tr.Stats())
	}
	// Filling on never goes above the capacity: a Put that does not fit
	// fails with ErrNoSpace (and signals), whatever eviction is doing.
	noSpace := 0
	for i := range 20 {
		k := key(2, uint32(i))
		err := tr.Put(bg, k, tiertest.Pattern(k, evBlock, 0))
		if errors.Is(err, tier.ErrNoSpace) {
			noSpace++
			if !signalled(tr) {
				t.Fatal("a refused Put did not signal")
			}
		} else {
			must(t, err)
		}
		if u := tr.Usage(); u.UsedBytes > capacity {
			t.Fatalf("usage %d over capacity %d", u.UsedBytes, capacity)
		}
	}
	if noSpace != 14 {
		t.Fatalf("%d Puts refused; want 14 (room for 6 more blocks)", noSpace)
	}
}

// TestEvictOrderFromListing: after a restart the order comes from the
// objects' ModTimes as listed.
func TestEvictOrderFromListing(t *testing.T) {
	dir := t.TempDir()
	const capacity = 10 * evBlock
	tr := openTier(t, newLocal(t, dir), g4.TierOptions{Capacity: capacity})
	var keys []tier.Key
	for i := range 10 {
		k := key(3, uint32(i))
		keys = append(keys, k)
		mustPutBlock(t, tr, k, tiertest.Pattern(k, evBlock, 0))
	}
	// ModTimes: keys[0..4] 1 h to 5 h ago, keys[5..9] 5 to 1 minutes
	// ago: keys[4], [3] and [2] are the oldest three.
	now := time.Now()
	ago := []time.Duration{1 * time.Hour, 2 * time.Hour, 3 * time.Hour, 4 * time.Hour, 5 * time.Hour,
		5 * time.Minute, 4 * time.Minute, 3 * time.Minute, 2 * time.Minute, time.Minute}
	for i, k := range keys {
		at := now.Add(-ago[i])
		must(t, os.Chtimes(blockPath(t, dir, k), at, at))
	}
	tr2 := openTier(t, newLocal(t, dir), g4.TierOptions{Capacity: capacity, HighWatermark: 0.9, LowWatermark: 0.7})
	if n, err := tr2.Evict(bg); err != nil || n != 3 {
		t.Fatalf("Evict after reopen = %d, %v; want 3 (10 blocks down to 7)", n, err)
	}
	for i, k := range keys {
		want := i < 2 || i >= 5
		if got := present(t, tr2, k); got != want {
			t.Errorf("block %d present = %v, want %v", i, got, want)
		}
	}
}

// headHook runs before once inside the next Head of the object named
// name.
type headHook struct {
	g4.ObjectStore
	mu     sync.Mutex
	name   string
	before func()
}

func (h *headHook) Head(ctx context.Context, name string) (g4.ObjectAttrs, error) {
	h.mu.Lock()
	var f func()
	if name == h.name {
		f, h.before = h.before, nil
	}
	h.mu.Unlock()
	if f != nil {
		f()
	}
	return h.ObjectStore.Head(ctx, name)
}

// TestEvictKeepsRestoredBlock: an object stored again (by another writer
// of the same store) after the eviction chose it survives: the re-check
// under the key lock sees a ModTime after the eviction's start.
func TestEvictKeepsRestoredBlock(t *testing.T) {
	dir := t.TempDir()
	l := newLocal(t, dir)
	hook := &headHook{ObjectStore: l}
	tr := openTier(t, hook, g4.TierOptions{Capacity: 4 * evBlock, HighWatermark: 0.5, LowWatermark: 0.25})
	k0, k1, k2 := key(4, 0), key(4, 1), key(4, 2)
	for _, k := range []tier.Key{k0, k1, k2} {
		mustPutBlock(t, tr, k, tiertest.Pattern(k, evBlock, 0))
	}
	past := time.Now().Add(-time.Hour)
	must(t, os.Chtimes(blockPath(t, dir, k0), past, past))
	must(t, tr.Range(context.Background(), func(tier.Key, int64) bool { return true })) // index learns the ModTimes
	// Before the Head of k0, the oldest, another writer stores k0 anew (a
	// copy of the object, fresh ModTime).
	hook.name = tr.ObjectName(k0)
	hook.before = func() {
		time.Sleep(20 * time.Millisecond) // past the eviction's start, even on a coarse clock
		b, err := os.ReadFile(blockPath(t, dir, k0))
		must(t, err)
		must(t, os.WriteFile(blockPath(t, dir, k0)+".new", b, 0o600))
		must(t, os.Rename(blockPath(t, dir, k0)+".new", blockPath(t, dir, k0)))
	}
	n, err := tr.Evict(bg)
	if err != nil || n != 2 {
		t.Fatalf("Evict = %d, %v; want 2 (k1 and k2: k0 was stored again)", n, err)
	}
	if !present(t, tr, k0) || present(t, tr, k1) || present(t, tr, k2) {
		t.Fatal("wrong blocks evicted")
	}
}

// TestEvictUnbounded: without a capacity nothing is evicted or signalled.
func TestEvictUnbounded(t *testing.T) {
	tr := openTier(t, newLocal(t, t.TempDir()), g4.TierOptions{})
	for i := range 10 {
		k := key(5, uint32(i))
		mustPutBlock(t, tr, k, tiertest.Pattern(k, evBlock, 0))
	}
	if n, err := tr.Evict(bg); err != nil || n != 0 || signalled(tr) {
		t.Fatalf("Evict of an unbounded tier = %d, %v (signalled %v)", n, err, signalled(tr))
	}
	if u := tr.Usage(); u.CapacityBytes != 0 || u.Blocks != 10 {
		t.Fatalf("Usage = %+v", u)
	}
}

func TestWatermarkOptions(t *testing.T) {
	l := newLocal(t, t.TempDir())
	for _, o := range []g4.TierOptions{
		{HighWatermark: 0.5, LowWatermark: 0.5}, {HighWatermark: 1.1}, {LowWatermark: 0.96},
		{HighWatermark: 0.9, LowWatermark: -0.1},
	} {
		if _, err := g4.NewTier(context.Background(), l, o); err == nil {
			t.Errorf("NewTier accepted watermarks high %g low %g", o.HighWatermark, o.LowWatermark)
		}
	}
	if _, err := g4.NewTier(context.Background(), l, g4.TierOptions{HighWatermark: 1, LowWatermark: 0.9}); err != nil {
		t.Fatal(err)
	}
}

// TestSweeperEvictsOnSignal: with a Sweeper running on a long interval, a
// writer that keeps filling the tier is kept under its capacity by
// eviction woken by Put, the newest blocks survive and usage never
// exceeds the capacity.
func TestSweeperEvictsOnSignal(t *testing.T) {
	var capacity int64 = 64 * evBlock
	tr := openTier(t, newLocal(t, t.TempDir()), g4.TierOptions{Capacity: capacity})
	var evicted atomic.Int64
	s := g4.NewSweeper(tr, g4.SweeperOptions{Interval: time.Hour, OnEvict: func(n int, err error) {
		if err != nil {
			t.Errorf("eviction: %v", err)
		}
		evicted.Add(int64(n))
	}})
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var keys []tier.Key
	for i := range 4 * 64 {
		k := key(6, uint32(i))
		keys = append(keys, k)
		var err error
		for try := 0; try < 200; try++ {
			if err = tr.Put(bg, k, tiertest.Pattern(k, evBlock, 0)); !errors.Is(err, tier.ErrNoSpace) {
				break
			}
			time.Sleep(time.Millisecond) // eviction is catching up
		}
		must(t, err)
		if u := tr.Usage(); u.UsedBytes > capacity {
			t.Fatalf("usage %d over capacity %d", u.UsedBytes, capacity)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for tr.Usage().UsedBytes > int64(g4.DefaultHighWater*float64(capacity)) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	u := tr.Usage()
	if u.UsedBytes > int64(g4.DefaultHighWater*float64(capacity)) {
		t.Fatalf("usage %+v still over the high watermark: the Put did not wake the sweeper", u)
	}
	if got := evicted.Load(); got == 0 || uint64(got) != tr.Evicted() || int(got)+int(u.Blocks) != len(keys) {
		t.Fatalf("OnEvict counted %d, Evicted %d, %d blocks left of %d", got, tr.Evicted(), u.Blocks, len(keys))
	}
	// The newest blocks are the ones kept.
	for _, k := range keys[len(keys)-int(u.Blocks):] {
		if !present(t, tr, k) {
			t.Fatalf("newest block %v evicted", k)
		}
	}
}

func TestAutoCapacity(t *testing.T) {
	c, size, err := g4.AutoCapacity(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if size <= 0 || c != int64(g4.AutoCapacityFraction*float64(size)) {
		t.Fatalf("AutoCapacity = %d of %d", c, size)
	}
	if _, _, err := g4.AutoCapacity("/nonexistent/ctxmem"); err == nil {
		t.Fatal("AutoCapacity of a missing directory succeeded")
	}
}

// TestEvictConcurrent runs eviction (over an index of more than scanBatch
// blocks, with Retain) against concurrent writers: usage never exceeds the
// capacity, retained blocks all survive, and every surviving block reads
// its own bytes.
func TestEvictConcurrent(t *testing.T) {
	const bsz, capBlocks, writers, perWriter, kept = 128, 1500, 4, 700, 200
	var capacity int64 = capBlocks * bsz
	tr := openTier(t, newLocal(t, t.TempDir()), g4.TierOptions{Capacity: capacity,
		Retain: func(k tier.Key) bool { return k.Namespace == "keep" }})
	var keep []tier.Key
	for i := range kept {
		k := tier.Key{Namespace: "keep", Object: 1, Index: uint32(i), Gen: 1}
		keep = append(keep, k)
		mustPutBlock(t, tr, k, tiertest.Pattern(k, bsz, 0))
	}
	s := g4.NewSweeper(tr, g4.SweeperOptions{Interval: time.Hour})
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var wg sync.WaitGroup
	var over, refused atomic.Int64
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				k := key(uint64(100+w), uint32(i))
				if err := tr.Put(bg, k, tiertest.Pattern(k, bsz, 0)); errors.Is(err, tier.ErrNoSpace) {
					refused.Add(1)
				} else if err != nil {
					t.Error(err)
					return
				}
				if tr.Usage().UsedBytes > capacity {
					over.Add(1)
				}
			}
		})
	}
	wg.Wait()
	cancel()
	<-done
	if over.Load() != 0 {
		t.Fatalf("usage over capacity %d times", over.Load())
	}
	for _, k := range keep {
		if n, err := tr.Stat(bg, k); err != nil || n != bsz {
			t.Fatalf("retained %v: %d, %v", k, n, err)
		}
	}
	u := tr.Usage()
	stored := int64(kept+writers*perWriter) - refused.Load()
	if int64(tr.Evicted())+u.Blocks != stored || tr.Evicted() == 0 {
		t.Fatalf("evicted %d + %d blocks left != %d stored", tr.Evicted(), u.Blocks, stored)
	}
	p := make([]byte, bsz)
	err := tr.Range(bg, func(k tier.Key, n int64) bool {
		got, err := get(tr, k, p, 0)
		if err != nil || got != bsz || string(p) != string(tiertest.Pattern(k, bsz, 0)) {
			t.Errorf("%v: %d bytes, %v", k, got, err)
		}
		return true
	})
	must(t, err)
	t.Logf("%d evicted, %d refused, %d left", tr.Evicted(), refused.Load(), u.Blocks)
}

// TestEvictAfterRefusedPut is a new user's run: a put larger than the
// room left (a pack object) is refused while the tier is below its high
// watermark. The refusal must make the next Evict free room for it, down
// past the low watermark if the put needs that, oldest first; before,
// Evict did nothing below high, so the put was refused for ever.
func TestEvictAfterRefusedPut(t *testing.T) {
	const capacity = 40 * evBlock
	tr := openTier(t, newLocal(t, t.TempDir()), g4.TierOptions{Capacity: capacity, Now: tickClock()})
	for i := range 30 { // 75%: below high (38 blocks)
		k := key(1, uint32(i))
		mustPutBlock(t, tr, k, tiertest.Pattern(k, evBlock, 0))
	}
	big := key(2, 0)
	data := tiertest.Pattern(big, 12*evBlock, 0)
	if err := tr.Put(bg, big, data); !errors.Is(err, tier.ErrNoSpace) {
		t.Fatalf("Put of 12 blocks into 10 free = %v, want ErrNoSpace", err)
	}
	if !signalled(tr) {
		t.Fatal("no EvictSignal after a refused Put")
	}
	// The low watermark (34 blocks) leaves 6 free: evict down to 28.
	if n, err := tr.Evict(bg); err != nil || n != 2 {
		t.Fatalf("Evict after a refused Put = %d, %v; want 2 (30 blocks down to 28)", n, err)
	}
	for i := range 30 {
		if got, want := present(t, tr, key(1, uint32(i))), i >= 2; got != want {
			t.Errorf("block %d present = %v, want %v", i, got, want)
		}
	}
	if err := tr.Put(bg, big, data); err != nil {
		t.Fatalf("Put after Evict: %v", err)
	}
	// 40 blocks now, over high: the usual eviction down to low (34);
	// then, the refusal served, nothing.
	if n, err := tr.Evict(bg); err != nil || n != 6 {
		t.Fatalf("Evict over high = %d, %v; want 6", n, err)
	}
	if n, err := tr.Evict(bg); err != nil || n != 0 {
		t.Fatalf("Evict at low = %d, %v; want 0", n, err)
	}
}

// TestMakeRoom checks tier.RoomMaker: MakeRoom evicts the oldest blocks
// so that a put of n bytes fits (nothing when it fits already), never a
// retained or kept one, and fails with ErrNoSpace saying why when what is left
// is retained, or n is beyond the capacity.
func TestMakeRoom(t *testing.T) {
	const capacity = 40 * evBlock
	var made atomic.Int64
	tr := openTier(t, newLocal(t, t.TempDir()), g4.TierOptions{Capacity: capacity, Now: tickClock(),
		Retain:     func(k tier.Key) bool { return k.Namespace == "nbd-export" },
		OnMakeRoom: func(n int, err error) { made.Add(int64(n)) }})
	for i := range 20 {
		k := key(1, uint32(i))
		mustPutBlock(t, tr, k, tiertest.Pattern(k, evBlock, 0))
	}
	for i := range 10 {
		k := tier.Key{Namespace: "nbd-export", Object: 1, Gen: 1, Index: uint32(i)}
		mustPutBlock(t, tr, k, tiertest.Pattern(k, evBlock, 0))
	}
	if err := tr.MakeRoom(bg, 10*evBlock, nil); err != nil || tr.Evicted() != 0 {
		t.Fatalf("MakeRoom of what fits = %v, %d evicted", err, tr.Evicted())
	}
	big := key(2, 0)
	data := tiertest.Pattern(big, 16*evBlock, 0)
	if err := tr.Put(bg, big, data); !errors.Is(err, tier.ErrNoSpace) {
		t.Fatalf("Put of 16 blocks into 10 free = %v, want ErrNoSpace", err)
	}
	if err := tr.MakeRoom(bg, 16*evBlock, nil); err != nil {
		t.Fatalf("MakeRoom(16 blocks) with 10 free: %v", err)
	}
	if tr.Evicted() != 6 || made.Load() != 6 {
		t.Fatalf("MakeRoom evicted %d (reported %d), want 6 (down to 24 blocks)", tr.Evicted(), made.Load())
	}
	for i := range 20 {
		if got, want := present(t, tr, key(1, uint32(i))), i >= 6; got != want {
			t.Errorf("block %d present = %v, want %v", i, got, want)
		}
	}
	if err := tr.Put(bg, big, data); err != nil {
		t.Fatalf("Put after MakeRoom: %v", err)
	}
	// 40 blocks, over high: the sweep's Evict goes down to low (34), not
	// again to make room for the refused Put, which MakeRoom served.
	if n, err := tr.Evict(bg); err != nil || n != 6 {
		t.Fatalf("Evict after MakeRoom and the Put = %d, %v; want 6", n, err)
	}
	if !present(t, tr, key(1, 19)) {
		t.Fatal("newest small block evicted")
	}
	if err := tr.Delete(bg, big); err != nil {
		t.Fatal(err)
	}
	before := tr.Evicted()
	if err := tr.MakeRoom(bg, 35*evBlock, func(tier.Key) bool { return true }); !errors.Is(err, tier.ErrNoSpace) || tr.Evicted() != before {
		t.Fatalf("MakeRoom keeping every block = %v, %d evicted", err, tr.Evicted()-before)
	}
	err := tr.MakeRoom(bg, 35*evBlock, nil) // only 8 cache blocks can go, 10 are retained
	if !errors.Is(err, tier.ErrNoSpace) {
		t.Fatalf("MakeRoom with only retained blocks left = %v, want ErrNoSpace", err)
	}
	t.Log(err)
	if u := tr.Usage(); u.Blocks != 10 {
		t.Fatalf("after a MakeRoom that could not: %+v, want the 10 retained blocks", u)
	}
	if err := tr.MakeRoom(bg, capacity+1, nil); !errors.Is(err, tier.ErrNoSpace) {
		t.Fatalf("MakeRoom beyond capacity = %v", err)
	}
}

// TestRefusedPackIsNotOwedRoom: a pack (a sink's) refused below high does
// not make the next Evict evict: the sink makes room itself (MakeRoom,
// keeping the blocks of its object stored before), and an Evict could
// take those, its only copies, once nothing older is left.
func TestRefusedPackIsNotOwedRoom(t *testing.T) {
	tr := openTier(t, newLocal(t, t.TempDir()), g4.TierOptions{Capacity: 40 * evBlock, Now: tickClock()})
	for i := range 30 {
		k := key(1, uint32(i))
		mustPutBlock(t, tr, k, tiertest.Pattern(k, evBlock, 0))
	}
	keys, blocks := packRun(2, 0, 12, evBlock, evBlock, 1)
	if _, err := tr.PutPack(bg, keys, blocks); !errors.Is(err, tier.ErrNoSpace) {
		t.Fatalf("PutPack of 12 blocks into 10 free = %v, want ErrNoSpace", err)
	}
	if n, err := tr.Evict(bg); err != nil || n != 0 {
		t.Fatalf("Evict after a refused pack = %d, %v; want 0", n, err)
	}
}
