package tiering

import (
	"context"
	"testing"
	"time"
)

// TestEventsDropWhenBehindAndCloseWithStore: a subscriber that does not
// read loses events beyond its buffer (counted, the store never waits),
// and Close of the store closes every subscription.
func TestEventsDropWhenBehindAndCloseWithStore(t *testing.T) {
	s := openTest(t, t.TempDir(), newMemTier("G3", 0), nil, 64<<20)
	sub := s.Subscribe(1)
	closed := s.Subscribe(1)
	closed.Close()
	for range 3 {
		if _, err := s.Create("ns", 4096, "file"); err != nil {
			t.Fatal(err)
		}
	}
	if d := sub.Dropped(); d != 2 {
		t.Fatalf("dropped %d events; want 2 (buffer 1, 3 creates)", d)
	}
	if d := closed.Dropped(); d != 0 {
		t.Fatalf("a closed subscription counted %d drops", d)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ev, ok := <-sub.C()
	if !ok || ev.Kind != EventCreated || ev.Namespace != "ns" || ev.Label != "file" || ev.Durability != DurabilityCache {
		t.Fatalf("first event %+v ok=%v", ev, ok)
	}
	select {
	case _, ok := <-sub.C():
		if ok {
			t.Fatal("more events than the buffer held")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("store Close did not close the subscription")
	}
	if _, ok := <-s.Subscribe(0).C(); ok {
		t.Fatal("a subscription made after Close is open")
	}
}

// TestObjectRanking: with RankObjects the store ranks objects by access
// (recovered ones too) and forgets deleted ones; without it there is no
// ranking.
func TestObjectRanking(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	g3 := newMemTier("G3", 0)
	s, err := Open(ctx, Config{DataDir: dir, G2Bytes: 64 << 20, G3: g3, RankObjects: true})
	if err != nil {
		t.Fatal(err)
	}
	cold, _ := s.Create("ns", 4096, "file")
	hot, _ := s.Create("ns", 4096, "file")
	gone, _ := s.Create("ns", 4096, "file")
	for range 5 {
		if _, err := s.WriteAt(ctx, hot, []byte("kv"), 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Delete(ctx, gone); err != nil {
		t.Fatal(err)
	}
	r := s.ObjectRanking()
	if r.Len() != 2 {
		t.Fatalf("ranking holds %d objects; want 2", r.Len())
	}
	top := r.Hottest(1, time.Now(), nil)
	if len(top) != 1 || top[0].Key != hot {
		t.Fatalf("hottest %+v; want object %d", top, hot)
	}
	if _, ok := r.Score(cold, time.Now()); !ok {
		t.Fatal("the cold object is not ranked")
	}
	for _, id := range []ObjectID{cold, hot} {
		if err := s.Flush(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(ctx, Config{DataDir: dir, G2Bytes: 64 << 20, G3: g3, RankObjects: true})
	if err != nil {
		t.Fatal(err)
	}
	if n := s.ObjectRanking().Len(); n != 2 {
		t.Fatalf("after a restart the ranking holds %d objects; want the 2 recovered", n)
	}
	s.Close()
	s, err = Open(ctx, Config{DataDir: dir, G2Bytes: 64 << 20, G3: g3})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.ObjectRanking() != nil {
		t.Fatal("a ranking without RankObjects")
	}
}
