package clock

import (
	"testing"
	"time"
)

func TestFakeTimersFireInOrderOnAdvance(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	f := NewFake(start)
	a, b := f.NewTimer(2*time.Second), f.NewTimer(time.Second)
	tick := f.NewTicker(500 * time.Millisecond)
	if f.Timers() != 3 {
		t.Fatalf("%d armed; want 3", f.Timers())
	}
	f.Advance(999 * time.Millisecond)
	select {
	case <-b.C():
		t.Fatal("timer fired before its deadline")
	default:
	}
	if got := <-tick.C(); !got.Equal(start.Add(500 * time.Millisecond)) {
		t.Fatalf("tick at %v", got.Sub(start))
	}
	f.Advance(time.Millisecond)
	if got := <-b.C(); !got.Equal(start.Add(time.Second)) {
		t.Fatalf("timer b fired at %v", got.Sub(start))
	}
	if a.Stop() != true {
		t.Fatal("Stop of an armed timer reported false")
	}
	f.Advance(5 * time.Second)
	select {
	case <-a.C():
		t.Fatal("a stopped timer fired")
	default:
	}
	// The ticker's channel holds one tick; the others were dropped.
	<-tick.C()
	select {
	case <-tick.C():
		t.Fatal("more than one tick buffered")
	default:
	}
	tick.Stop()
	if f.Timers() != 0 {
		t.Fatalf("%d armed after Stop; want 0", f.Timers())
	}
	if f.Since(start) != 6*time.Second {
		t.Fatalf("Since %v", f.Since(start))
	}
	b.Reset(0)
	select {
	case <-b.C():
	default:
		t.Fatal("Reset(0) did not fire at once")
	}
}

func TestRealIsTheSystemClock(t *testing.T) {
	c := Or(nil)
	if d := c.Since(time.Now()); d > time.Second || d < -time.Second {
		t.Fatalf("Since(now) = %v", d)
	}
	tm := c.NewTimer(time.Millisecond)
	<-tm.C()
}
