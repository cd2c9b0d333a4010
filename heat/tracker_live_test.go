package heat

import (
	"errors"
	"sync"
	"testing"
	"time"
)

func TestTrackerSetConfigThresholds(t *testing.T) {
	tr, err := NewTracker[string](TrackerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Class(40) != Warm {
		t.Fatalf("40 with defaults = %v, want warm", tr.Class(40))
	}
	if err := tr.SetConfig(TrackerConfig{Cold: 50, Hot: 80}); err != nil {
		t.Fatal(err)
	}
	if tr.Class(40) != Cold || tr.Class(60) != Warm || tr.Class(80) != Hot {
		t.Fatalf("classes after SetConfig: 40 %v, 60 %v, 80 %v", tr.Class(40), tr.Class(60), tr.Class(80))
	}
	c := tr.Config()
	if c.Cold != 50 || c.Hot != 80 || c.HalfLife != DefaultHalfLife || c.Gain != DefaultGain {
		t.Fatalf("Config() = %+v", c)
	}
	// Invalid: nothing changes.
	for _, bad := range []TrackerConfig{{Cold: 90, Hot: 80}, {Hot: 101}, {HalfLife: -time.Second}, {Gain: 200}} {
		if err := tr.SetConfig(bad); !errors.Is(err, ErrConfig) {
			t.Fatalf("SetConfig(%+v) = %v, want ErrConfig", bad, err)
		}
	}
	if got := tr.Config(); got != c {
		t.Fatalf("a refused SetConfig changed the config: %+v", got)
	}
}

// A new half-life applies from the change on; decay before it keeps the
// old rate.
func TestTrackerSetConfigHalfLife(t *testing.T) {
	tr, _ := NewTracker[int](TrackerConfig{HalfLife: time.Second, Gain: 80})
	tr.Touch(1, t0)
	// One old half-life passes (80 -> 40), then the half-life doubles.
	if err := tr.setConfig(TrackerConfig{HalfLife: 2 * time.Second, Gain: 80}, t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := tr.Score(1, t0.Add(time.Second)); !near(got, 40) {
		t.Fatalf("score at the change = %v, want 40", got)
	}
	// Two seconds later is one new half-life: 20 (the old rate would say 10).
	if got := tr.Score(1, t0.Add(3*time.Second)); !near(got, 20) {
		t.Fatalf("score one new half-life after the change = %v, want 20", got)
	}
	// A key touched after the change decays at the new rate only.
	tr.Touch(2, t0.Add(3*time.Second))
	if got := tr.Score(2, t0.Add(5*time.Second)); !near(got, 40) {
		t.Fatalf("new key after one new half-life = %v, want 40", got)
	}
	// Thresholds alone leave stored scores as they are.
	if err := tr.setConfig(TrackerConfig{HalfLife: 2 * time.Second, Gain: 80, Cold: 10, Hot: 20}, t0.Add(100*time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := tr.Score(2, t0.Add(5*time.Second)); !near(got, 40) {
		t.Fatalf("score after a threshold change = %v, want 40", got)
	}
}

// SetConfig races with readers and writers cleanly (run with -race).
func TestTrackerSetConfigConcurrent(t *testing.T) {
	tr, _ := NewTracker[int](TrackerConfig{})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				now := time.Now()
				tr.Touch(i%64+g, now)
				tr.Class(tr.Score(i%64, now))
				_ = tr.Config()
			}
		}()
	}
	for i := range 200 {
		hl := time.Duration(1+i%3) * time.Second
		if err := tr.SetConfig(TrackerConfig{HalfLife: hl, Cold: float64(10 + i%20), Hot: 60}); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if c := tr.Config(); c.HalfLife != 2*time.Second || c.Cold != 29 {
		t.Fatalf("last SetConfig not in effect: %+v", c)
	}
}
