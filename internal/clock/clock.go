// Package clock is the time source of packages whose timing tests need to
// control: Real is the system clock, Fake a clock that moves only when a
// test advances it, firing the timers and tickers made from it. Code that
// takes a Clock uses it for every reading of the time and every timer it
// waits on, so a test can step through hold-backs, idle delays, retries and
// heat decay without sleeping.
package clock

import (
	"sort"
	"sync"
	"time"
)

// Clock reads the time and makes timers and tickers on it.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// Since returns the time elapsed since t (Now().Sub(t)).
	Since(t time.Time) time.Duration
	// NewTimer returns a timer that sends the time on its channel once,
	// d from now (time.NewTimer).
	NewTimer(d time.Duration) Timer
	// NewTicker returns a ticker that sends the time every d (d > 0;
	// time.NewTicker); a tick the receiver is not ready for is dropped.
	NewTicker(d time.Duration) Ticker
}

// Timer is a time.Timer of a Clock.
type Timer interface {
	C() <-chan time.Time
	// Stop and Reset are time.Timer's (Go 1.23 semantics: no stale value
	// is received after either returns).
	Stop() bool
	Reset(d time.Duration) bool
}

// Ticker is a time.Ticker of a Clock.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// Real is the system clock.
type Real struct{}

// Now is time.Now.
func (Real) Now() time.Time { return time.Now() }

// Since is time.Since.
func (Real) Since(t time.Time) time.Duration { return time.Since(t) }

// NewTimer is time.NewTimer.
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

// NewTicker is time.NewTicker.
func (Real) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }

type realTicker struct{ t *time.Ticker }

func (r realTicker) C() <-chan time.Time { return r.t.C }
func (r realTicker) Stop()               { r.t.Stop() }

// Or returns c, or Real when c is nil.
func Or(c Clock) Clock {
	if c == nil {
		return Real{}
	}
	return c
}

// Fake is a Clock that stands still until Advance or Set moves it; timers
// and tickers made from it fire as it passes their deadlines, in deadline
// order. Safe for concurrent use. The zero value is not usable: NewFake.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer // armed
}

// NewFake returns a fake clock reading start.
func NewFake(start time.Time) *Fake { return &Fake{now: start} }

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Since returns Now().Sub(t).
func (f *Fake) Since(t time.Time) time.Duration { return f.Now().Sub(t) }

// Advance moves the clock forward by d (d >= 0) and fires every timer and
// ticker whose deadline it passes.
func (f *Fake) Advance(d time.Duration) {
	if d < 0 {
		panic("clock: Advance by a negative duration")
	}
	f.Set(f.Now().Add(d))
}

// Set moves the clock to t (not backwards) and fires what it passes.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t.Before(f.now) {
		panic("clock: Set moves the fake clock backwards")
	}
	for {
		// Fire the earliest armed deadline not after t, so tickers
		// fire once per period passed and in order with timers.
		sort.Slice(f.timers, func(i, j int) bool { return f.timers[i].at.Before(f.timers[j].at) })
		if len(f.timers) == 0 || f.timers[0].at.After(t) {
			break
		}
		tm := f.timers[0]
		f.now = tm.at
		select {
		case tm.ch <- tm.at:
		default: // the receiver is behind: dropped, as time's tickers do
		}
		if tm.period > 0 {
			tm.at = tm.at.Add(tm.period)
		} else {
			f.disarmLocked(tm)
		}
	}
	f.now = t
}

// Timers returns how many timers and tickers are armed (a test waits for
// a goroutine to arm its timer before advancing past it).
func (f *Fake) Timers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// NewTimer returns a timer of f.
func (f *Fake) NewTimer(d time.Duration) Timer {
	tm := &fakeTimer{f: f, ch: make(chan time.Time, 1)}
	tm.Reset(d)
	return tm
}

// NewTicker returns a ticker of f.
func (f *Fake) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive ticker period")
	}
	tm := &fakeTimer{f: f, ch: make(chan time.Time, 1), period: d}
	f.mu.Lock()
	tm.at = f.now.Add(d)
	f.timers = append(f.timers, tm)
	f.mu.Unlock()
	return fakeTicker{tm}
}

// fakeTicker is a Ticker of a Fake.
type fakeTicker struct{ t *fakeTimer }

func (k fakeTicker) C() <-chan time.Time { return k.t.ch }
func (k fakeTicker) Stop()               { k.t.Stop() }

func (f *Fake) disarmLocked(tm *fakeTimer) bool {
	for i, x := range f.timers {
		if x == tm {
			f.timers = append(f.timers[:i], f.timers[i+1:]...)
			return true
		}
	}
	return false
}

// fakeTimer is a timer (period 0) or ticker of a Fake.
type fakeTimer struct {
	f      *Fake
	ch     chan time.Time
	at     time.Time
	period time.Duration
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	armed := t.f.disarmLocked(t)
	t.drain()
	return armed
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	f := t.f
	f.mu.Lock()
	armed := f.disarmLocked(t)
	t.drain()
	t.at = f.now.Add(d)
	if d <= 0 {
		t.ch <- f.now // due at once (the channel was just drained)
		f.mu.Unlock()
		return armed
	}
	f.timers = append(f.timers, t)
	f.mu.Unlock()
	return armed
}

// drain empties the channel (Go 1.23 timer semantics: no stale value
// after Stop or Reset).
func (t *fakeTimer) drain() {
	select {
	case <-t.ch:
	default:
	}
}
