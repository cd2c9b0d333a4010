package g3

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/ctxmem/ctxmemd/tiering/tier"
	"github.com/ctxmem/ctxmemd/tiering/tiertest"
)

const limBlock = 100 * kib // 9 records per 1 MiB test segment

func limitsRecorder(t *testing.T, s **Store) *evictRecorder {
	return &evictRecorder{t: t, store: func() *Store { return *s },
		want: func(key tier.Key) []byte { return tiertest.Pattern(key, limBlock, 0) }}
}

// checkEvicted checks that the evicted keys are exactly the oldest of
// written (FIFO), that they are gone, and that every other key reads back.
// It returns how many were evicted.
func checkEvicted(t *testing.T, s *Store, rec *evictRecorder, written []tier.Key) int {
	t.Helper()
	rec.mu.Lock()
	evicted := map[tier.Key]bool{}
	for _, key := range rec.keys {
		evicted[key] = true
	}
	rec.mu.Unlock()
	for i, key := range written {
		if evicted[key] {
			if i > 0 && !evicted[written[i-1]] {
				t.Fatalf("evicted %v but not the older %v: not oldest first", key, written[i-1])
			}
			mustNotFound(t, s, key)
			continue
		}
		mustRead(t, s, key, tiertest.Pattern(key, limBlock, 0))
	}
	return len(evicted)
}

func TestSetLimitsGrowThenShrink(t *testing.T) {
	dir := t.TempDir()
	var s *Store
	rec := limitsRecorder(t, &s)
	s = openT(t, Options{Dir: dir, CapacityBytes: 4 * mib, OnEvict: rec.onEvict})
	var written []tier.Key
	write := func(n int) {
		for range n {
			key := k(1, uint32(len(written)))
			put(t, s, key, limBlock)
			written = append(written, key)
			if st := s.Stats(); st.SegmentBytes > s.Limits().CapacityBytes {
				t.Fatalf("%d bytes of segments > capacity %d", st.SegmentBytes, s.Limits().CapacityBytes)
			}
		}
	}
	write(60) // ~7 segments of data through a 4-segment store
	if s.Stats().Reclaims == 0 {
		t.Fatal("no reclaim at 4 MiB")
	}

	// Grow: later roll-overs keep more segments and reclaim nothing.
	if err := s.SetLimits(context.Background(), Limits{CapacityBytes: 16 * mib}); err != nil {
		t.Fatal(err)
	}
	if l := s.Limits(); l.CapacityBytes != 16*mib || l.HighWatermark != DefaultHighWatermark || l.LowWatermark != DefaultLowWatermark {
		t.Fatalf("Limits() = %+v", l)
	}
	if u := s.Usage(); u.CapacityBytes != 16*mib {
		t.Fatalf("Usage().CapacityBytes = %d", u.CapacityBytes)
	}
	reclaims := s.Stats().Reclaims
	write(90) // 10 more segments: 14 at most under the 0.9 high watermark
	if st := s.Stats(); st.Reclaims != reclaims || st.Segments <= 4 {
		t.Fatalf("after growing: %d reclaims (was %d), %d segments", st.Reclaims, reclaims, st.Segments)
	}
	evictedBefore := checkEvicted(t, s, rec, written)

	// Shrink: reclaims at once, oldest first, through OnEvict (which
	// reads every block back: they are still there during the call).
	if err := s.SetLimits(context.Background(), Limits{CapacityBytes: 4 * mib, HighWatermark: 0.9, LowWatermark: 0.5}); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.SegmentBytes > 4*mib || st.Segments > 2 {
		t.Fatalf("after shrinking to 4 MiB (low 0.5): %d segments, %d bytes", st.Segments, st.SegmentBytes)
	}
	if n := checkEvicted(t, s, rec, written); n <= evictedBefore {
		t.Fatalf("shrinking evicted nothing (%d before, %d after)", evictedBefore, n)
	}
	if int64(len(rec.keys)) != s.Stats().Evicted {
		t.Fatalf("OnEvict got %d keys, Stats.Evicted = %d", len(rec.keys), s.Stats().Evicted)
	}
	// Writing goes on within the new capacity, and a restart with it
	// sees the same blocks.
	write(30)
	checkEvicted(t, s, rec, written)
	s.Close()
	s = openT(t, Options{Dir: dir, CapacityBytes: 4 * mib, LowWatermark: 0.5, OnEvict: rec.onEvict})
	checkEvicted(t, s, rec, written)
}

func TestSetWatermarksReclaims(t *testing.T) {
	var s *Store
	rec := limitsRecorder(t, &s)
	s = openT(t, Options{Dir: t.TempDir(), CapacityBytes: 8 * mib, OnEvict: rec.onEvict})
	var written []tier.Key
	for i := range 60 { // ~7 segments: under 0.9 × 8
		key := k(1, uint32(i))
		put(t, s, key, limBlock)
		written = append(written, key)
	}
	if n := s.Stats().Segments; n < 6 {
		t.Fatalf("%d segments before lowering the watermarks", n)
	}
	if err := s.SetWatermarks(context.Background(), 0.5, 0.25); err != nil {
		t.Fatal(err)
	}
	if h, l := s.Watermarks(); h != 0.5 || l != 0.25 {
		t.Fatalf("Watermarks() = %v, %v", h, l)
	}
	if l := s.Limits(); l.CapacityBytes != 8*mib {
		t.Fatalf("SetWatermarks changed the capacity: %+v", l)
	}
	if n := s.Stats().Segments; n > 2 {
		t.Fatalf("%d segments after lowering the watermarks to 0.5/0.25 of 8 segments; want <= 2", n)
	}
	if checkEvicted(t, s, rec, written) == 0 {
		t.Fatal("nothing evicted")
	}
}

func TestSetLimitsInvalidKeepsRunning(t *testing.T) {
	s := openT(t, Options{Dir: t.TempDir(), CapacityBytes: 8 * mib})
	before := s.Limits()
	ctx := context.Background()
	for _, l := range []Limits{
		{CapacityBytes: mib}, // not two segments under the high watermark
		{CapacityBytes: -1},  // negative
		{CapacityBytes: 8 * mib, HighWatermark: 0.5, LowWatermark: 0.6}, // low above high
		{CapacityBytes: 8 * mib, HighWatermark: 1.5},                    // high above 1
	} {
		if err := s.SetLimits(ctx, l); !errors.Is(err, ErrLimits) {
			t.Fatalf("SetLimits(%+v) = %v, want ErrLimits", l, err)
		}
	}
	if err := s.SetWatermarks(ctx, 0.3, 0.4); !errors.Is(err, ErrLimits) {
		t.Fatalf("SetWatermarks(0.3, 0.4) = %v, want ErrLimits", err)
	}
	if got := s.Limits(); got != before {
		t.Fatalf("a refused change took effect: %+v, was %+v", got, before)
	}
	// Unbounded is a valid capacity.
	if err := s.SetLimits(ctx, Limits{}); err != nil || s.Usage().CapacityBytes != 0 {
		t.Fatalf("SetLimits(unbounded) = %v, capacity %d", err, s.Usage().CapacityBytes)
	}
	s.Close()
	if err := s.SetLimits(ctx, before); !errors.Is(err, tier.ErrClosed) {
		t.Fatalf("SetLimits after Close = %v, want ErrClosed", err)
	}
}

// Capacity changes race with writers and readers: every read returns the
// right bytes or not found, and the files fit the capacity once the last
// change has returned (run with -race).
func TestSetLimitsConcurrent(t *testing.T) {
	var s *Store
	rec := limitsRecorder(t, &s)
	s = openT(t, Options{Dir: t.TempDir(), CapacityBytes: 16 * mib, OnEvict: rec.onEvict})
	ctx := context.Background()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := make([]byte, limBlock)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := k(uint64(10+w), uint32(i))
				if err := s.Put(ctx, key, tiertest.Pattern(key, limBlock, 0)); err != nil {
					t.Errorf("Put(%v): %v", key, err)
					return
				}
				old := k(uint64(10+w), uint32(i/2))
				n, err := s.Get(ctx, old, p, 0)
				if err != nil && !errors.Is(err, tier.ErrNotFound) {
					t.Errorf("Get(%v): %v", old, err)
					return
				}
				if err == nil && !bytes.Equal(p[:n], tiertest.Pattern(old, limBlock, 0)) {
					t.Errorf("Get(%v): wrong bytes", old)
					return
				}
			}
		}()
	}
	for i := range 20 {
		c := int64(16 * mib)
		if i%2 == 0 {
			c = 4 * mib
		}
		if err := s.SetLimits(ctx, Limits{CapacityBytes: c}); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if st := s.Stats(); st.SegmentBytes > 16*mib {
		t.Fatalf("%d bytes of segments > 16 MiB", st.SegmentBytes)
	}
	if err := s.SetLimits(ctx, Limits{CapacityBytes: 4 * mib}); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.SegmentBytes > 4*mib {
		t.Fatalf("%d bytes of segments > 4 MiB after the last shrink", st.SegmentBytes)
	}
}
