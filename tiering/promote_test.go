package tiering

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/faulttier"
)

// TestFailedPromotionKeepsTheWinnerEvictable: two readers promote the same
// block; the first to ask is held in its G3 get while the second promotes
// and installs the block, then the first gives up (its request ends).
// Giving back the loser's buffer must not take the winner's block out of
// the eviction order, or it stays in G2 for good (never evicted, G2 fills
// up with blocks nobody reads).
func TestFailedPromotionKeepsTheWinnerEvictable(t *testing.T) {
	ctx := context.Background()
	g3 := faulttier.Wrap(newMemTier("G3", 0))
	s := openTest(t, t.TempDir(), g3, nil, 8<<20)
	defer s.Close()
	id, err := s.Create("ns", 4096, "file")
	if err != nil {
		t.Fatal(err)
	}
	want := pattern(1, 4096)
	if _, err := s.WriteAt(ctx, id, want, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Demote(ctx, id); err != nil {
		t.Fatal(err)
	}
	gate := faulttier.NewGate()
	g3.Inject(faulttier.Fault{Op: faulttier.Get, Times: 1, Gate: gate})
	lctx, cancel := context.WithCancel(ctx)
	loser := make(chan error, 1)
	go func() {
		_, err := s.ReadAt(lctx, id, make([]byte, 4096), 0)
		loser <- err
	}()
	<-gate.Arrived()
	got := make([]byte, 4096)
	if _, err := s.ReadAt(ctx, id, got, 0); err != nil {
		t.Fatal(err)
	}
	r := bref{id, 0}
	s.g2mu.Lock()
	in := s.place.policy.Contains(r)
	s.g2mu.Unlock()
	if !in {
		t.Fatal("the promoted block is not in the eviction order")
	}
	cancel()
	select {
	case err := <-loser:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("held reader: %v; want cancelled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("held reader did not end")
	}
	s.g2mu.Lock()
	in = s.place.policy.Contains(r)
	s.g2mu.Unlock()
	if !in {
		t.Fatal("a failed promotion took the winner's block out of the eviction order")
	}
}
