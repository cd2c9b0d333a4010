package tiering

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// memTier is an in-memory tier.Tier for this package's unit tests only
// (the real tiers run the conformance suite in their own packages).
type memTier struct {
	name    string
	mu      sync.Mutex
	m       map[tier.Key][]byte
	cap     int64
	used    int64
	failPut error
	puts    int
}

func newMemTier(name string, capacity int64) *memTier {
	return &memTier{name: name, m: make(map[tier.Key][]byte), cap: capacity}
}

func (t *memTier) Name() string { return t.name }
func (t *memTier) Put(_ context.Context, k tier.Key, d []byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.failPut != nil {
		return t.failPut
	}
	old := int64(len(t.m[k]))
	if t.cap > 0 && t.used-old+int64(len(d)) > t.cap {
		return tier.ErrNoSpace
	}
	t.used += int64(len(d)) - old
	t.m[k] = bytes.Clone(d)
	t.puts++
	return nil
}
func (t *memTier) Get(_ context.Context, k tier.Key, p []byte, off int64) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	d, ok := t.m[k]
	if !ok {
		return 0, tier.ErrNotFound
	}
	if off >= int64(len(d)) {
		return 0, nil
	}
	return copy(p, d[off:]), nil
}
func (t *memTier) Stat(ctx context.Context, k tier.Key) (int64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	d, ok := t.m[k]
	if !ok {
		return 0, tier.ErrNotFound
	}
	return int64(len(d)), nil
}
func (t *memTier) Delete(_ context.Context, k tier.Key) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.used -= int64(len(t.m[k]))
	delete(t.m, k)
	return nil
}
func (t *memTier) Range(ctx context.Context, fn func(tier.Key, int64) bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, d := range t.m {
		if !fn(k, int64(len(d))) {
			break
		}
	}
	return nil
}
func (t *memTier) Usage() tier.Usage {
	t.mu.Lock()
	defer t.mu.Unlock()
	return tier.Usage{UsedBytes: t.used, CapacityBytes: t.cap, Blocks: int64(len(t.m))}
}
func (t *memTier) Close() error { return nil }
func (t *memTier) drop(k tier.Key) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.used -= int64(len(t.m[k]))
	delete(t.m, k)
}

func pattern(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e37))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func openTest(t *testing.T, dir string, g3, g4 tier.Tier, g2 int64) *Store {
	t.Helper()
	s, err := Open(context.Background(), Config{DataDir: dir, G2Bytes: g2, G3: g3, G4: g4, FlushWorkers: 2})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestReadWriteUnaligned(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir(), newMemTier("G3", 0), newMemTier("G4", 0), 64<<20)
	defer s.Close()
	id, err := s.Create("ns", 4096, "file")
	if err != nil {
		t.Fatal(err)
	}
	want := pattern(1, 50_000)
	// Write in odd-sized pieces at odd offsets.
	for off := 0; off < len(want); {
		n := min(777+off%3001, len(want)-off)
		if _, err := s.WriteAt(ctx, id, want[off:off+n], int64(off)); err != nil {
			t.Fatal(err)
		}
		off += n
	}
	got := make([]byte, 60_000)
	n, err := s.ReadAt(ctx, id, got, 0)
	if err != nil || n != len(want) || !bytes.Equal(got[:n], want) {
		t.Fatalf("read n=%d err=%v equal=%v", n, err, bytes.Equal(got[:n], want))
	}
	n, err = s.ReadAt(ctx, id, got[:10], 49_995)
	if err != nil || n != 5 || !bytes.Equal(got[:5], want[49_995:]) {
		t.Fatalf("tail read n=%d err=%v", n, err)
	}
	if n, _ := s.ReadAt(ctx, id, got, 50_000); n != 0 {
		t.Fatalf("read at EOF returned %d", n)
	}
}

func TestHolesAndTruncate(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir(), newMemTier("G3", 0), newMemTier("G4", 0), 64<<20)
	defer s.Close()
	id, _ := s.Create("ns", 4096, "file")
	if _, err := s.WriteAt(ctx, id, []byte("end"), 100_000); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 100_003)
	for i := range buf {
		buf[i] = 0xff
	}
	if n, err := s.ReadAt(ctx, id, buf, 0); err != nil || n != 100_003 {
		t.Fatal(n, err)
	}
	if !bytes.Equal(buf[:100_000], make([]byte, 100_000)) || string(buf[100_000:]) != "end" {
		t.Fatal("hole did not read as zeros")
	}
	tiers, _ := s.BlockTiers(id)
	if tiers[0] != TierHole || tiers[len(tiers)-1] != TierG2 {
		t.Fatalf("tiers %v", tiers)
	}
	// Shrink into the middle of the last block, then grow: the cut bytes
	// must read as zeros.
	if err := s.Truncate(ctx, id, 100_001); err != nil {
		t.Fatal(err)
	}
	if err := s.Truncate(ctx, id, 100_003); err != nil {
		t.Fatal(err)
	}
	s.ReadAt(ctx, id, buf[:3], 100_000)
	if !bytes.Equal(buf[:3], []byte{'e', 0, 0}) {
		t.Fatalf("after shrink+grow: %q", buf[:3])
	}
	info, _ := s.Stat(id)
	gen := info.Gen
	if err := s.Truncate(ctx, id, 0); err != nil {
		t.Fatal(err)
	}
	info, _ = s.Stat(id)
	if info.Size != 0 || info.Gen != gen+1 {
		t.Fatalf("truncate 0: %+v", info)
	}
}

func TestWriteBackEvictionAndPromotion(t *testing.T) {
	ctx := context.Background()
	g3 := newMemTier("G3", 0)
	g4 := newMemTier("G4", 0)
	s := openTest(t, t.TempDir(), g3, g4, 4<<20)
	defer s.Close()
	const files = 64
	ids := make([]ObjectID, files)
	for i := range ids {
		ids[i], _ = s.Create("ns", 64<<10, "file")
		if _, err := s.WriteAt(ctx, ids[i], pattern(uint64(i), 256<<10), 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		if err := s.Flush(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	// 16 MiB written through a 4 MiB G2: most blocks must have left G2.
	deadline := time.Now().Add(5 * time.Second)
	for float64(s.g2used.Load()) > 0.9*float64(4<<20) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if u := s.g2used.Load(); u > 4<<20 {
		t.Fatalf("G2 used %d over budget", u)
	}
	if s.Stats().Evictions[TierG2] == 0 {
		t.Fatal("no G2 evictions")
	}
	buf := make([]byte, 256<<10)
	for i, id := range ids {
		if n, err := s.ReadAt(ctx, id, buf, 0); err != nil || n != len(buf) || !bytes.Equal(buf, pattern(uint64(i), len(buf))) {
			t.Fatalf("file %d: n=%d err=%v", i, n, err)
		}
	}
	st := s.Stats()
	if st.BlockHits[TierG3] == 0 {
		t.Fatalf("no G3 hits: %+v", st)
	}
}

func TestRestartKeepsCleanDropsDirty(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	g3 := newMemTier("G3", 0)
	g4 := newMemTier("G4", 0)
	s := openTest(t, dir, g3, g4, 16<<20)
	a, _ := s.Create("ns", 4096, "file")
	s.WriteAt(ctx, a, pattern(7, 20_000), 0)
	if err := s.Flush(ctx, a); err != nil {
		t.Fatal(err)
	}
	hole, _ := s.Create("ns", 4096, "file")
	s.Truncate(ctx, hole, 1<<20)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Simulate a crash with a dirty object: its record says dirty.
	s = openTest(t, dir, g3, g4, 16<<20)
	b, _ := s.Create("ns", 4096, "file")
	s.WriteAt(ctx, b, pattern(8, 10_000), 0)
	s.Flush(ctx, b)
	s.mu.Lock()
	s.objects[b].mu.Lock()
	s.objects[b].metaDirty = false
	s.markMetaDirty(s.objects[b])
	s.objects[b].mu.Unlock()
	s.mu.Unlock()
	s.cancel() // stop write-back without flushing: like kill -9
	s.wg.Wait()
	s.meta.close()

	s = openTest(t, dir, g3, g4, 16<<20)
	defer s.Close()
	if _, err := s.Stat(b); !errors.Is(err, ErrNotExist) {
		t.Fatalf("dirty object survived: %v", err)
	}
	buf := make([]byte, 20_000)
	if n, err := s.ReadAt(ctx, a, buf, 0); err != nil || n != 20_000 || !bytes.Equal(buf, pattern(7, 20_000)) {
		t.Fatalf("clean object: n=%d err=%v", n, err)
	}
	if info, err := s.Stat(hole); err != nil || info.Size != 1<<20 {
		t.Fatalf("sparse object: %+v %v", info, err)
	}
	// A block gone from every tier: the object is lost, never wrong bytes.
	g3.drop(tier.Key{Namespace: "ns", Object: uint64(a), Index: 2, Gen: 1})
	g4.drop(tier.Key{Namespace: "ns", Object: uint64(a), Index: 2, Gen: 1})
	s.Close()
	s = openTest(t, dir, g3, g4, 16<<20)
	defer s.Close()
	if _, err := s.Stat(a); !errors.Is(err, ErrNotExist) {
		t.Fatalf("object with a missing block survived: %v", err)
	}
}

func TestLostOnRead(t *testing.T) {
	ctx := context.Background()
	g3 := newMemTier("G3", 0)
	s := openTest(t, t.TempDir(), g3, nil, 2<<20)
	defer s.Close()
	var lost []ObjectID
	s.OnLost(func(id ObjectID) { lost = append(lost, id) })
	id, _ := s.Create("ns", 4096, "file")
	s.WriteAt(ctx, id, pattern(3, 8192), 0)
	s.Flush(ctx, id)
	// Force the block out of G2, then remove it from G3.
	s.mu.RLock()
	o := s.objects[id]
	s.mu.RUnlock()
	s.evictOne(bref{id, 1})
	if o.blocks.get(1).g2.Load() != nil {
		t.Fatal("evictOne did not evict")
	}
	g3.drop(tier.Key{Namespace: "ns", Object: uint64(id), Index: 1, Gen: 1})
	buf := make([]byte, 8192)
	_, err := s.ReadAt(ctx, id, buf, 0)
	if !errors.Is(err, ErrLost) || len(lost) != 1 {
		t.Fatalf("err=%v lost=%v", err, lost)
	}
	if _, err := s.Stat(id); !errors.Is(err, ErrNotExist) {
		t.Fatal("lost object still exists")
	}
	// Block 0 was a hit, block 1 a miss: both are block reads, so the hit
	// ratio is not inflated by the failure.
	st := s.Stats()
	var hits int64
	for _, n := range st.BlockHits {
		hits += n
	}
	if st.BlockMisses != 1 || st.BlockReads != hits+st.BlockMisses {
		t.Fatalf("block reads %d, hits %d, misses %d: want reads = hits + misses", st.BlockReads, hits, st.BlockMisses)
	}
}

func TestConcurrentWritersReaders(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir(), newMemTier("G3", 8<<20), newMemTier("G4", 0), 2<<20)
	defer s.Close()
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				id, _ := s.Create("ns", 16<<10, "file")
				want := pattern(uint64(w*1000+i), 100_000)
				if _, err := s.WriteAt(ctx, id, want, 0); err != nil {
					t.Error(err)
					return
				}
				got := make([]byte, len(want))
				if n, err := s.ReadAt(ctx, id, got, 0); err != nil || n != len(want) || !bytes.Equal(got, want) {
					t.Errorf("w%d i%d: n=%d err=%v", w, i, n, err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
}

func TestDiscard(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir(), newMemTier("G3", 0), newMemTier("G4", 0), 16<<20)
	defer s.Close()
	id, _ := s.CreateWith("ns", 4096, CreateOptions{Kind: KindNBD, Durability: DurabilityDevice})
	want := pattern(9, 5*4096)
	s.WriteAt(ctx, id, want, 0)
	// Discard from the middle of block 1 to the middle of block 3.
	if err := s.Discard(ctx, id, 4096+100, 2*4096); err != nil {
		t.Fatal(err)
	}
	clear(want[4096+100 : 3*4096+100])
	got := make([]byte, len(want))
	if n, err := s.ReadAt(ctx, id, got, 0); err != nil || n != len(want) || !bytes.Equal(got, want) {
		t.Fatalf("n=%d err=%v", n, err)
	}
	tiers, _ := s.BlockTiers(id)
	if tiers[2] != TierHole || tiers[1] == TierHole || tiers[3] == TierHole {
		t.Fatalf("tiers %v", tiers)
	}
	if err := s.Flush(ctx, id); err != nil {
		t.Fatal(err)
	}
}

// TestSmallWritesRaceWriteBack writes blocks in small chunks while four
// write-back workers run, then drops G2 and reads from G3: every block must
// hold its last bytes, never an older copy stored after a newer one.
func TestSmallWritesRaceWriteBack(t *testing.T) {
	ctx := context.Background()
	g3 := newMemTier("G3", 0)
	s, err := Open(ctx, Config{DataDir: t.TempDir(), G2Bytes: 64 << 20, G3: g3, FlushWorkers: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const files, size, chunk = 40, 256 << 10, 4 << 10
	ids := make([]ObjectID, files)
	for i := range ids {
		ids[i], _ = s.Create("ns", 64<<10, "file")
		want := pattern(uint64(i), size)
		for off := 0; off < size; off += chunk {
			if _, err := s.WriteAt(ctx, ids[i], want[off:off+chunk], int64(off)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, id := range ids {
		fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := s.Flush(fctx, id)
		cancel()
		if err != nil {
			t.Fatalf("flush: %v", err)
		}
		for idx := uint32(0); idx < size/(64<<10); idx++ {
			s.evictOne(bref{id, idx})
		}
	}
	got := make([]byte, size)
	for i, id := range ids {
		if tiers, _ := s.BlockTiers(id); tiers[0] != TierG3 {
			t.Fatalf("file %d not evicted to G3: %v", i, tiers)
		}
		if n, err := s.ReadAt(ctx, id, got, 0); err != nil || n != size || !bytes.Equal(got, pattern(uint64(i), size)) {
			t.Fatalf("file %d: n=%d err=%v: stale or torn bytes after write-back", i, n, err)
		}
	}
	if st := s.Stats(); st.BlockHits[TierG3] == 0 || st.BlockHits[TierG2] != 0 {
		t.Fatalf("reads should be counted as G3 hits (promotions), got %v", st.BlockHits)
	}
}

// TestDiscardThenRewriteKeepsNewCopy: a dropped block's deletion is
// queued; when the block is written again before the queue drains (an NBD
// TRIM then a write of the same block reuses its key), the late deletion
// must not remove the new copy.
func TestDiscardThenRewriteKeepsNewCopy(t *testing.T) {
	ctx := context.Background()
	g3 := newMemTier("G3", 0)
	s := openTest(t, t.TempDir(), g3, nil, 16<<20)
	defer s.Close()
	id, _ := s.CreateWith("ns", 4096, CreateOptions{Kind: KindNBD, Durability: DurabilityDevice})
	s.WriteAt(ctx, id, pattern(1, 4096), 0)
	if err := s.Flush(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := s.Discard(ctx, id, 0, 4096); err != nil {
		t.Fatal(err)
	}
	want := pattern(2, 4096)
	s.WriteAt(ctx, id, want, 0)
	if err := s.Flush(ctx, id); err != nil {
		t.Fatal(err)
	}
	k := tier.Key{Namespace: "ns", Object: uint64(id), Index: 0, Gen: 1}
	s.gc(g3, k) // the discard's deletion, arriving late
	s.drainGC(context.Background())
	if _, err := g3.Stat(ctx, k); err != nil {
		t.Fatalf("a queued deletion removed the rewritten block: %v", err)
	}
	s.evictOne(bref{id, 0})
	got := make([]byte, 4096)
	if n, err := s.ReadAt(ctx, id, got, 0); err != nil || n != 4096 || !bytes.Equal(got, want) {
		t.Fatalf("n=%d err=%v", n, err)
	}
}
