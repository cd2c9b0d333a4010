package heat

import (
	"errors"
	"math"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestTrackerTouchAndDecay(t *testing.T) {
	tr, err := NewTracker[string](TrackerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if got := tr.Touch("a", t0); !near(got, DefaultGain) {
		t.Fatalf("first touch = %v, want %v", got, DefaultGain)
	}
	if got := tr.Touch("a", t0); !near(got, 2*DefaultGain) {
		t.Fatalf("second touch = %v, want %v", got, 2*DefaultGain)
	}
	// One half-life later the score halves; Score does not change state.
	for range 2 {
		if got := tr.Score("a", t0.Add(DefaultHalfLife)); !near(got, DefaultGain) {
			t.Fatalf("score after one half-life = %v, want %v", got, DefaultGain)
		}
	}
	if got := tr.Score("a", t0.Add(2*DefaultHalfLife)); !near(got, DefaultGain/2) {
		t.Fatalf("score after two half-lives = %v, want %v", got, DefaultGain/2)
	}
	// A touch applies decay first: 50/2 + 25.
	if got := tr.Touch("a", t0.Add(DefaultHalfLife)); !near(got, 2*DefaultGain) {
		t.Fatalf("touch after one half-life = %v, want %v", got, 2*DefaultGain)
	}
	// Cap at 100.
	for range 10 {
		tr.Touch("b", t0)
	}
	if got := tr.Score("b", t0); got != MaxScore {
		t.Fatalf("capped score = %v, want %v", got, MaxScore)
	}
	if got := tr.Score("unknown", t0); got != 0 {
		t.Fatalf("unknown key score = %v", got)
	}
}

func TestTrackerOutOfOrderTime(t *testing.T) {
	tr, _ := NewTracker[int](TrackerConfig{HalfLife: time.Second, Gain: 10})
	tr.Touch(1, t0.Add(time.Second))
	// An earlier time does not decay the score or move its time back.
	if got := tr.Touch(1, t0); !near(got, 20) {
		t.Fatalf("out-of-order touch = %v, want 20", got)
	}
	if got := tr.Score(1, t0.Add(2*time.Second)); !near(got, 10) {
		t.Fatalf("score one half-life after the later touch = %v, want 10", got)
	}
}

func TestTrackerClass(t *testing.T) {
	tr, _ := NewTracker[int](TrackerConfig{})
	for _, c := range []struct {
		s    float64
		want Class
	}{{0, Cold}, {29.99, Cold}, {30, Warm}, {59.99, Warm}, {60, Hot}, {100, Hot}} {
		if got := tr.Class(c.s); got != c.want {
			t.Errorf("Class(%v) = %v, want %v", c.s, got, c.want)
		}
	}
	tr2, _ := NewTracker[int](TrackerConfig{Cold: 10, Hot: 90})
	if tr2.Class(50) != Warm || tr2.Class(9) != Cold || tr2.Class(90) != Hot {
		t.Errorf("custom thresholds not applied")
	}
	if Hot.String() != "hot" || Warm.String() != "warm" || Cold.String() != "cold" {
		t.Errorf("class names")
	}
}

func TestTrackerConfigErrors(t *testing.T) {
	for _, cfg := range []TrackerConfig{
		{HalfLife: -time.Second},
		{Cold: 70, Hot: 60},
		{Hot: 101},
		{Gain: -1},
		{Cold: -5},
	} {
		if _, err := NewTracker[int](cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("NewTracker(%+v) err = %v, want ErrConfig", cfg, err)
		}
	}
}

func TestTrackerForgetPruneRange(t *testing.T) {
	tr, _ := NewTracker[int](TrackerConfig{HalfLife: time.Second})
	for k := range 10 {
		tr.Touch(k, t0.Add(time.Duration(k)*time.Second))
	}
	if tr.Len() != 10 {
		t.Fatalf("Len = %d", tr.Len())
	}
	tr.Forget(0)
	if tr.Len() != 9 || tr.Score(0, t0) != 0 {
		t.Fatalf("Forget did not drop key 0")
	}
	// At t0+9s key k has 25·2^-(9-k): keys 9..7 are >= 6.25, keys 1..6 <= 3.125.
	now := t0.Add(9 * time.Second)
	seen := map[int]float64{}
	tr.Range(now, func(k int, s float64) bool { seen[k] = s; return true })
	if len(seen) != 9 || !near(seen[7], 6.25) {
		t.Fatalf("Range saw %v", seen)
	}
	if n := tr.Prune(now, 6); n != 6 {
		t.Fatalf("Prune dropped %d, want 6", n)
	}
	if tr.Len() != 3 {
		t.Fatalf("Len after prune = %d", tr.Len())
	}
	calls := 0
	tr.Range(now, func(int, float64) bool { calls++; return false })
	if calls != 1 {
		t.Fatalf("Range did not stop: %d calls", calls)
	}
}

func TestTrackerConcurrent(t *testing.T) {
	tr, _ := NewTracker[int](TrackerConfig{Gain: 0.5})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				tr.Touch(-1, t0)
				tr.Touch(g, t0)
				tr.Score(-1, t0)
			}
		}()
	}
	wg.Wait()
	if got := tr.Score(-1, t0); !near(got, 100) {
		t.Fatalf("shared key = %v, want 100 (200 touches of 0.5, capped)", got)
	}
	if got := tr.Score(2, t0); !near(got, 25) {
		t.Fatalf("private key = %v, want 25", got)
	}
}
