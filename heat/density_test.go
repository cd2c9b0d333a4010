package heat

import (
	"testing"
	"time"
)

func TestAgeBucket(t *testing.T) {
	prev := -1
	for a := uint64(0); a < 1<<20; a++ {
		b := ageBucket(a)
		if b != prev && b != prev+1 {
			t.Fatalf("age %d: bucket %d after %d", a, b, prev)
		}
		if b != prev && b >= 2*ageSub && a&(uint64(ageWidth(b))-1) != 0 {
			t.Fatalf("bucket %d starts at age %d, not a multiple of its width %v", b, a, ageWidth(b))
		}
		prev = b
	}
	if ageBucket(1<<63) != nAge-1 {
		t.Errorf("huge age: bucket %d", ageBucket(1<<63))
	}
}

// drive replays one reference to k with capacity blocks.
func drive(p Placer[uint64], k uint64, capacity int, now time.Time) bool {
	return replayRef(p, k, Mix64(k), capacity, now)
}

// checkProtocol runs the Placer protocol on p, an empty Placer with a
// capacity of 4 blocks whose ShouldAdmit is always true.
func checkProtocol(t *testing.T, p Placer[uint64]) {
	t.Helper()
	if _, ok := p.Victim(); ok {
		t.Fatal("victim of an empty policy")
	}
	now := time.Unix(0, 0)
	for k := range uint64(4) {
		if p.Access(k, Mix64(k), now) {
			t.Fatalf("%d: hit before insert", k)
		}
		p.Insert(k, Mix64(k), now)
		p.Insert(k, Mix64(k), now) // no-op
	}
	if p.Len() != 4 || !p.Contains(2) || !p.Access(2, Mix64(2), now) {
		t.Fatalf("len %d, contains 2: %v", p.Len(), p.Contains(2))
	}
	v, ok := p.Victim()
	if w, _ := p.Victim(); !ok || w != v {
		t.Fatalf("victim %d then %d", v, w)
	}
	if !p.Remove(v) || p.Remove(v) || p.Contains(v) || p.Len() != 3 {
		t.Fatalf("remove %d", v)
	}
	if !p.PredictReuse(Mix64(2)) || p.PredictReuse(Mix64(1000)) {
		t.Error("reuse prediction")
	}
}

func TestDensityProtocol(t *testing.T) {
	p, err := NewDensityPolicy[uint64](PolicyConfig{Capacity: 4}, func(k uint64) int { return int(k) })
	if err != nil {
		t.Fatal(err)
	}
	checkProtocol(t, p)
	if !p.ShouldAdmit(Mix64(9), time.Unix(0, 0)) {
		t.Error("admission")
	}
	if _, err := NewDensityPolicy[uint64](PolicyConfig{}, nil); err == nil {
		t.Error("capacity 0 accepted")
	}
}

// loopHitRatio replays 40 turns of a cyclic scan of 2·c blocks through p
// (capacity c, a reference per millisecond) and returns the hit ratio of
// the last 20.
func loopHitRatio(p Placer[uint64], c int) float64 {
	now := time.Unix(0, 0)
	hits := 0
	for i := range 40 * c {
		now = now.Add(time.Millisecond)
		if drive(p, uint64(i%(2*c)), c, now) && i >= 20*c {
			hits++
		}
	}
	return float64(hits) / (20 * float64(c))
}

// TestDensityLearnsLoop: a cyclic scan of 2·C blocks gives LRU no hit at
// all; the density policy learns that blocks come back at the cycle's age
// (through its ghosts) and keeps some of them.
func TestDensityLearnsLoop(t *testing.T) {
	const c = 2000
	p, err := NewDensityPolicy[uint64](PolicyConfig{Capacity: c}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r := loopHitRatio(p, c); r < 0.1 {
		t.Errorf("loop hit ratio %.3f in the second half, want >= 0.1", r)
	}
}

// TestDensityKeepsFrequent: a small hot set referenced among one-shot
// blocks stays resident.
func TestDensityKeepsFrequent(t *testing.T) {
	const c = 1000
	p, err := NewDensityPolicy[uint64](PolicyConfig{Capacity: c}, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(0, 0)
	next, hot := uint64(1<<32), 0
	for i := range 100 * c {
		if i%4 == 0 {
			if drive(p, uint64(i/4%(c/2)), c, now) && i >= 50*c {
				hot++
			}
			continue
		}
		next++
		drive(p, next, c, now)
	}
	if r := float64(hot) / (50 * c / 4); r < 0.9 {
		t.Errorf("hot-set hit ratio %.3f, want >= 0.9", r)
	}
}
