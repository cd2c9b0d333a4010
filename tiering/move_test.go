package tiering

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// recObserver counts the events of one subscription (this package's unit
// tests only): a goroutine drains it until the store closes it.
type recObserver struct {
	mu     sync.Mutex
	counts map[EventKind]map[ObjectID]int
	done   chan struct{}
}

func newRecObserver(s *Store) *recObserver {
	r := &recObserver{counts: map[EventKind]map[ObjectID]int{}, done: make(chan struct{})}
	sub := s.Subscribe(0)
	go func() { // owner: the test; ends when the store closes the subscription
		defer close(r.done)
		for ev := range sub.C() {
			r.mu.Lock()
			if r.counts[ev.Kind] == nil {
				r.counts[ev.Kind] = map[ObjectID]int{}
			}
			r.counts[ev.Kind][ev.ID]++
			r.mu.Unlock()
		}
	}()
	return r
}

func (r *recObserver) count(k EventKind, id ObjectID) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts[k][id]
}

// waitCount waits (up to 10 s) for n events of kind k about id.
func (r *recObserver) waitCount(t *testing.T, k EventKind, id ObjectID, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for r.count(k, id) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d %s events of object %d; want %d", r.count(k, id), k, id, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func (r *recObserver) storedCount(id ObjectID) int { return r.count(EventStored, id) }

// TestStoredAfterCloseAndWriteBack: Observer.Stored (what eager sharing
// waits for) comes once the last writer closed the object (Expedite) and
// its blocks are written back, not for an object still open for writing
// however clean it is, and again after the next write and close; Stat
// reports Sealed accordingly.
func TestStoredAfterCloseAndWriteBack(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir(), newMemTier("G3", 0), nil, 64<<20)
	defer s.Close()
	obs := newRecObserver(s)
	id, err := s.Create("ns", 4096, "file")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.WriteAt(ctx, id, pattern(1, 3*4096), 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx, id); err != nil { // clean, but still open for writing
		t.Fatal(err)
	}
	if n := obs.storedCount(id); n != 0 {
		t.Fatalf("Stored %d times for an object not closed", n)
	}
	if info, _ := s.Stat(id); info.Sealed {
		t.Fatal("sealed before Expedite")
	}
	s.Expedite(id) // the last writer closes: clean already
	obs.waitCount(t, EventStored, id, 1)
	if n := obs.storedCount(id); n != 1 {
		t.Fatalf("Stored %d times after the close of a clean object; want 1", n)
	}
	if info, _ := s.Stat(id); !info.Sealed || info.Dirty {
		t.Fatalf("after close: %+v", info)
	}
	// A new write unseals it; its close and write-back store it again.
	if _, err := s.WriteAt(ctx, id, []byte("x"), 5); err != nil {
		t.Fatal(err)
	}
	if info, _ := s.Stat(id); info.Sealed {
		t.Fatal("still sealed after a write")
	}
	s.Expedite(id)
	deadline := time.Now().Add(10 * time.Second)
	for obs.storedCount(id) != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("Stored %d times; want 2 once the rewrite was written back", obs.storedCount(id))
		}
		time.Sleep(time.Millisecond)
	}
}

func TestSinkMovesEveryBlockToG4(t *testing.T) {
	ctx := context.Background()
	g3, g4 := newMemTier("G3", 0), newMemTier("G4", 0)
	s := openTest(t, t.TempDir(), g3, g4, 64<<20)
	defer s.Close()
	obs := newRecObserver(s)
	id, err := s.Create("ns", 4096, "file")
	if err != nil {
		t.Fatal(err)
	}
	want := pattern(7, 5*4096+100)
	if _, err := s.WriteAt(ctx, id, want, 0); err != nil {
		t.Fatal(err)
	}
	res, err := s.Sink(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if res.Released == 0 {
		t.Fatalf("sink released nothing: %+v", res)
	}
	tiers, _ := s.BlockTiers(id)
	for i, tn := range tiers {
		if tn != TierG4 {
			t.Fatalf("block %d in %s after sink, want G4 (%v)", i, tn, tiers)
		}
	}
	// Sinking again is a no-op (idempotent command).
	if res, err := s.Sink(ctx, id); err != nil || res.Moved != 0 || res.Released != 0 {
		t.Fatalf("second sink: %+v %v", res, err)
	}
	got := make([]byte, len(want))
	if n, err := s.ReadAt(ctx, id, got, 0); err != nil || n != len(want) || !bytes.Equal(got, want) {
		t.Fatalf("read after sink: n=%d err=%v", n, err)
	}
	if err := s.SetPinned(id, true); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Sink(ctx, id); !errors.Is(err, ErrPinned) {
		t.Fatalf("sink of a pinned object: %v, want ErrPinned", err)
	}
	if err := s.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	obs.waitCount(t, EventRemoved, id, 1)
	if c, m, r := obs.count(EventCreated, id), obs.count(EventMoved, id), obs.count(EventRemoved, id); c != 1 || m != 1 || r != 1 {
		t.Fatalf("events: created=%d moved=%d removed=%d; want 1 each (the second sink moved nothing)", c, m, r)
	}
}

func TestDemoteEmptiesG2(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir(), newMemTier("G3", 0), newMemTier("G4", 0), 64<<20)
	defer s.Close()
	id, err := s.Create("ns", 4096, "file")
	if err != nil {
		t.Fatal(err)
	}
	want := pattern(9, 8*4096)
	if _, err := s.WriteAt(ctx, id, want, 0); err != nil {
		t.Fatal(err)
	}
	res, err := s.Demote(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if res.Released != 8 {
		t.Fatalf("demote released %d blocks, want 8", res.Released)
	}
	tiers, _ := s.BlockTiers(id)
	for i, tn := range tiers {
		if tn == TierG2 {
			t.Fatalf("block %d still in G2 after demote (%v)", i, tiers)
		}
	}
	got := make([]byte, len(want))
	if _, err := s.ReadAt(ctx, id, got, 0); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read after demote: %v", err)
	}
	if _, err := s.Demote(ctx, 9999); !errors.Is(err, ErrNotExist) {
		t.Fatalf("demote unknown: %v", err)
	}
}

func TestSinkWithoutG4(t *testing.T) {
	s := openTest(t, t.TempDir(), newMemTier("G3", 0), nil, 64<<20)
	defer s.Close()
	id, _ := s.Create("ns", 4096, "file")
	if _, err := s.Sink(context.Background(), id); !errors.Is(err, ErrInvalid) {
		t.Fatalf("sink without G4: %v", err)
	}
}
