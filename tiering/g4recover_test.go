package tiering

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// outageTier is a memTier whose backend can be down: every call that
// would reach the backend (Put, Get, Delete, Range) then fails with
// tier.ErrUnavailable, as G4 does while its object store does not answer.
type outageTier struct {
	*memTier
	down   atomic.Bool
	ranges atomic.Int64 // Range calls, failed ones included
}

func (t *outageTier) unavailable() error {
	return fmt.Errorf("%s backend: %w", t.name, tier.ErrUnavailable)
}

func (t *outageTier) Put(ctx context.Context, k tier.Key, d []byte) error {
	if t.down.Load() {
		return t.unavailable()
	}
	return t.memTier.Put(ctx, k, d)
}

func (t *outageTier) Get(ctx context.Context, k tier.Key, p []byte, off int64) (int, error) {
	if t.down.Load() {
		return 0, t.unavailable()
	}
	return t.memTier.Get(ctx, k, p, off)
}

func (t *outageTier) Delete(ctx context.Context, k tier.Key) error {
	if t.down.Load() {
		return t.unavailable()
	}
	return t.memTier.Delete(ctx, k)
}

func (t *outageTier) Range(ctx context.Context, fn func(tier.Key, int64) bool) error {
	t.ranges.Add(1)
	if t.down.Load() {
		return t.unavailable()
	}
	return t.memTier.Range(ctx, fn)
}

func (t *outageTier) Healthy() bool { return !t.down.Load() }

func (t *memTier) has(k tier.Key) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.m[k]
	return ok
}

// fastRelist makes the background listing of G4 retry every few ms.
func fastRelist(t *testing.T) {
	lo, hi := g4RelistMin, g4RelistMax
	g4RelistMin, g4RelistMax = 5*time.Millisecond, 40*time.Millisecond
	t.Cleanup(func() { g4RelistMin, g4RelistMax = lo, hi })
}

const recBS = 64 << 10

// writeObject creates an object of kind with n bytes of pattern(seed) and
// flushes it below G2.
func writeObject(t *testing.T, s *Store, ns, kind string, seed uint64, n int) ObjectID {
	t.Helper()
	ctx := context.Background()
	id, err := s.Create(ns, recBS, kind)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.WriteAt(ctx, id, pattern(seed, n), 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx, id); err != nil {
		t.Fatal(err)
	}
	return id
}

func readAll(s *Store, id ObjectID, n int) ([]byte, error) {
	p := make([]byte, n)
	m, err := s.ReadAt(context.Background(), id, p, 0)
	return p[:m], err
}

func g4Usage(s *Store) TierUsage {
	for _, u := range s.Occupancy() {
		if u.Name == "G4" {
			return u
		}
	}
	return TierUsage{}
}

// TestStartDuringG4Outage: a store opened while G4 does not answer starts
// (G3 serves, new writes go to G3), keeps every object whose blocks may be
// in G4 (reads fail with ErrUnavailable → EIO, never ErrLost or wrong
// bytes; a restart during the outage keeps them too), collects no G4
// garbage, and shows G4 degraded and recovering. Once G4 answers, the
// background listing makes G4-only blocks readable, drops exactly the
// object whose block G4 does not hold, deletes garbage and the stale copy
// of a block rewritten during the outage, and keeps every live copy.
func TestStartDuringG4Outage(t *testing.T) {
	fastRelist(t)
	dir := t.TempDir()
	g3 := newMemTier("G3", 0)
	g4 := &outageTier{memTier: newMemTier("G4", 0)}
	s := openTest(t, dir, nil, g4, 4<<20) // no G3: everything written now goes to G4
	a := writeObject(t, s, "ns", "file", 1, 3*recBS)
	c := writeObject(t, s, "ns", "file", 3, 2*recBS)
	e := writeObject(t, s, "ns", "file", 5, recBS)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, dir, g3, g4, 4<<20)
	b := writeObject(t, s, "ns", "file", 2, 2*recBS+100) // to G3
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	keyOf := func(id ObjectID, idx uint32) tier.Key {
		return tier.Key{Namespace: "ns", Object: uint64(id), Index: idx, Gen: 1}
	}
	for i := range uint32(3) {
		if !g4.has(keyOf(a, i)) || g3.has(keyOf(a, i)) {
			t.Fatalf("setup: block %d of A is not G4-only", i)
		}
	}
	g4.drop(keyOf(c, 1)) // C's block is really gone
	garbage := tier.Key{Namespace: "ns", Object: 999999, Index: 0, Gen: 1}
	g4.memTier.Put(context.Background(), garbage, []byte("garbage"))

	g4.down.Store(true)
	s = openTest(t, dir, g3, g4, 4<<20)
	defer func() { s.Close() }()
	if u := g4Usage(s); !u.Degraded || !u.Recovering || !s.G4Recovering() {
		t.Fatalf("G4 during the outage: %+v, G4Recovering %v; want degraded and recovering", u, s.G4Recovering())
	}
	for _, id := range []ObjectID{a, b, c, e} {
		if _, err := s.Stat(id); err != nil {
			t.Fatalf("object %d missing after a start during the outage: %v", id, err)
		}
	}
	if got, err := readAll(s, b, 2*recBS+100); err != nil || !bytes.Equal(got, pattern(2, 2*recBS+100)) {
		t.Fatalf("G3 object during the outage: %d bytes, %v", len(got), err)
	}
	for _, id := range []ObjectID{a, c} {
		start := time.Now()
		_, err := readAll(s, id, 3*recBS)
		if !errors.Is(err, tier.ErrUnavailable) || errors.Is(err, ErrLost) || Errno(err) != syscall.EIO {
			t.Fatalf("read of G4-only object %d during the outage: %v (errno %v); want ErrUnavailable → EIO", id, err, Errno(err))
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Fatalf("read of G4-only object took %v to fail", took)
		}
		if _, err := s.Stat(id); err != nil {
			t.Fatalf("a failed read during the outage dropped object %d: %v", id, err)
		}
	}
	d := writeObject(t, s, "ns", "file", 4, recBS)
	if st := s.Stats(); st.ObjectsLost != 0 {
		t.Fatalf("%d objects lost during the outage", st.ObjectsLost)
	}

	// A restart during the outage keeps everything too.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, dir, g3, g4, 4<<20)
	for _, id := range []ObjectID{a, b, c, d, e} {
		if _, err := s.Stat(id); err != nil {
			t.Fatalf("object %d missing after a second start during the outage: %v", id, err)
		}
	}
	if !g4.has(garbage) || !g4.has(keyOf(e, 0)) {
		t.Fatal("G4 garbage was collected without a listing")
	}

	// E is rewritten whole during the outage: the new bytes go to G3; its
	// G4 copy (same key, old bytes) cannot be deleted now, so its flush
	// waits for G4 (the object is never recorded clean while a stale copy
	// may exist).
	if _, err := s.WriteAt(context.Background(), e, pattern(50, recBS), 0); err != nil {
		t.Fatal(err)
	}
	flushed := make(chan error, 1)
	go func() { flushed <- s.Flush(context.Background(), e) }() // ends once G4 answers (below)

	ranges := g4.ranges.Load()
	time.Sleep(100 * time.Millisecond)
	if g4.ranges.Load() == ranges {
		t.Fatal("no background listing attempt of G4 in 100 ms")
	}
	g4.down.Store(false)
	deadline := time.Now().Add(5 * time.Second)
	for s.G4Recovering() {
		if time.Now().After(deadline) {
			t.Fatal("G4 still recovering 5 s after it answers")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if u := g4Usage(s); u.Degraded || u.Recovering {
		t.Fatalf("G4 after recovery: %+v", u)
	}
	select {
	case err := <-flushed:
		if err != nil {
			t.Fatalf("flush of E: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("flush of the block rewritten during the outage still waits 10 s after G4 answers")
	}
	if got, err := readAll(s, a, 3*recBS); err != nil || !bytes.Equal(got, pattern(1, 3*recBS)) {
		t.Fatalf("G4-only object after recovery: %d bytes, %v", len(got), err)
	}
	if got, err := readAll(s, e, recBS); err != nil || !bytes.Equal(got, pattern(50, recBS)) {
		t.Fatalf("object rewritten during the outage: %d bytes, %v; want the new bytes", len(got), err)
	}
	if got, err := readAll(s, d, recBS); err != nil || !bytes.Equal(got, pattern(4, recBS)) {
		t.Fatalf("object written during the outage: %d bytes, %v", len(got), err)
	}
	if _, err := s.Stat(c); !errors.Is(err, ErrNotExist) {
		t.Fatalf("object C, whose block G4 does not hold: Stat = %v; want ErrNotExist (lost)", err)
	}
	if st := s.Stats(); st.ObjectsLost != 1 {
		t.Fatalf("ObjectsLost = %d; want 1 (C)", st.ObjectsLost)
	}
	deadline = time.Now().Add(5 * time.Second)
	for g4.has(garbage) || g4.has(keyOf(e, 0)) || g4.has(keyOf(c, 0)) {
		if time.Now().After(deadline) {
			t.Fatalf("G4 garbage kept 5 s after recovery: unknown object %v, stale E %v, lost C %v",
				g4.has(garbage), g4.has(keyOf(e, 0)), g4.has(keyOf(c, 0)))
		}
		time.Sleep(5 * time.Millisecond)
	}
	for i := range uint32(3) {
		if !g4.has(keyOf(a, i)) {
			t.Fatalf("live block %d of A was deleted from G4", i)
		}
	}
	// A restart now recovers A from G4's listing as usual.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, dir, g3, g4, 4<<20)
	if s.G4Recovering() {
		t.Fatal("recovering after a start with G4 up")
	}
	if got, err := readAll(s, a, 3*recBS); err != nil || !bytes.Equal(got, pattern(1, 3*recBS)) {
		t.Fatalf("after a restart: %d bytes, %v", len(got), err)
	}
}

// TestDirtyExportWaitsForG4: an NBD export recorded dirty (the daemon died)
// and reopened while G4 does not answer keeps its G3 blocks readable, but
// its holes (maybe G4 blocks) and every write fail with ErrUnavailable
// rather than reading zeros, and its record is not marked clean; once G4
// answers its G4 blocks are merged in and it reads back whole.
func TestDirtyExportWaitsForG4(t *testing.T) {
	fastRelist(t)
	dir := t.TempDir()
	g3 := newMemTier("G3", 0)
	g4 := &outageTier{memTier: newMemTier("G4", 0)}
	s := openTest(t, dir, nil, g4, 4<<20) // no G3: blocks go to G4
	ctx := context.Background()
	id, err := s.CreateWith("ns", recBS, CreateOptions{Kind: KindNBD, Durability: DurabilityDevice})
	if err != nil {
		t.Fatal(err)
	}
	img := pattern(7, 4*recBS)
	s.WriteAt(ctx, id, img[:2*recBS], 0) // blocks 0, 1 → G4
	if err := s.Flush(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, dir, g3, g4, 4<<20)
	s.WriteAt(ctx, id, img[2*recBS:], 2*recBS) // blocks 2, 3 → G3
	if err := s.Flush(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range uint32(4) {
		k := tier.Key{Namespace: "ns", Object: uint64(id), Index: i, Gen: 1}
		if in3, in4 := g3.has(k), g4.has(k); in3 == in4 || in3 != (i >= 2) {
			t.Fatalf("setup: block %d in G3 %v, G4 %v", i, in3, in4)
		}
	}
	// Simulate the crash: the record says dirty, as it would had the
	// daemon died before the export went idle.
	m, err := openMeta(filepath.Join(dir, "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	rec := &objectRecord{Namespace: "ns", Kind: KindNBD, Durability: "device", BlockSize: recBS, Size: int64(len(img)), Gen: 1, State: stateDirty}
	if err := m.put(id, rec); err != nil {
		t.Fatal(err)
	}
	m.close()

	g4.down.Store(true)
	s = openTest(t, dir, g3, g4, 4<<20)
	defer func() { s.Close() }()
	p := make([]byte, recBS)
	if _, err := s.ReadAt(ctx, id, p, 3*recBS); err != nil || !bytes.Equal(p, img[3*recBS:]) {
		t.Fatalf("G3 block of the waiting export: %v", err)
	}
	if _, err := s.ReadAt(ctx, id, p, 0); !errors.Is(err, tier.ErrUnavailable) {
		t.Fatalf("hole of the waiting export (maybe in G4): %v; want ErrUnavailable, not zeros", err)
	}
	if _, err := s.WriteAt(ctx, id, []byte("x"), 10); !errors.Is(err, tier.ErrUnavailable) {
		t.Fatalf("write to the waiting export: %v; want ErrUnavailable", err)
	}
	if err := s.Discard(ctx, id, 0, recBS); !errors.Is(err, tier.ErrUnavailable) {
		t.Fatalf("discard on the waiting export: %v; want ErrUnavailable", err)
	}
	time.Sleep(2 * cleanDelay) // the clean loop must not record it clean
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	m, err = openMeta(filepath.Join(dir, "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	m.load(func(got ObjectID, r *objectRecord) {
		if got == id && r.State != stateDirty {
			t.Errorf("waiting export recorded %q during the outage; want dirty", r.State)
		}
	})
	m.close()

	s = openTest(t, dir, g3, g4, 4<<20)
	g4.down.Store(false)
	deadline := time.Now().Add(5 * time.Second)
	for s.G4Recovering() {
		if time.Now().After(deadline) {
			t.Fatal("still recovering 5 s after G4 answers")
		}
		time.Sleep(5 * time.Millisecond)
	}
	got, err := readAll(s, id, len(img))
	if err != nil || !bytes.Equal(got, img) {
		t.Fatalf("export after recovery: %d bytes, %v", len(got), err)
	}
	if _, err := s.WriteAt(ctx, id, []byte("x"), 10); err != nil {
		t.Fatalf("write after recovery: %v", err)
	}
}

// TestStaleG4CopyLosesToG3: a clean object whose block is held by both G3
// and G4 under the same key (a G4 copy left behind, e.g. a delete that
// failed during an outage) recovers with G3's copy only: recovery must not
// trust the G4 copy, which a later G3 eviction would then not re-upload,
// and deletes it.
func TestStaleG4CopyLosesToG3(t *testing.T) {
	dir := t.TempDir()
	g3 := newMemTier("G3", 0)
	g4 := &outageTier{memTier: newMemTier("G4", 0)}
	s := openTest(t, dir, g3, g4, 4<<20)
	e := writeObject(t, s, "ns", "file", 50, recBS) // in G3
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	k := tier.Key{Namespace: "ns", Object: uint64(e), Index: 0, Gen: 1}
	if !g3.has(k) || g4.has(k) {
		t.Fatal("setup: want the block in G3 only")
	}
	g4.memTier.Put(context.Background(), k, pattern(5, recBS)) // other bytes under the same key
	s = openTest(t, dir, g3, g4, 4<<20)
	defer s.Close()
	o := s.get(e)
	o.mu.RLock()
	in3, in4 := o.blocks.get(0).in.has(tiG3), o.blocks.get(0).in.has(tiG4)
	o.mu.RUnlock()
	if !in3 || in4 {
		t.Fatalf("recovered tiers G3 %v G4 %v; want G3 only", in3, in4)
	}
	deadline := time.Now().Add(5 * time.Second)
	for g4.has(k) {
		if time.Now().After(deadline) {
			t.Fatal("the G4 copy of a block G3 holds is not deleted 5 s after the start")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got, err := readAll(s, e, recBS); err != nil || !bytes.Equal(got, pattern(50, recBS)) {
		t.Fatalf("read: %d bytes, %v; want G3's bytes", len(got), err)
	}
}
