package health

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newMachine(t *testing.T) (*Machine, *clock, *[]Snapshot) {
	t.Helper()
	c := &clock{t: time.Unix(1000, 0)}
	var changes []Snapshot
	var mu sync.Mutex
	m := New("G3", Config{DownAfter: 3, ProbeInterval: time.Second, FullBackoff: 500 * time.Millisecond, Now: c.now},
		func(s Snapshot) { mu.Lock(); changes = append(changes, s); mu.Unlock() })
	return m, c, &changes
}

var errIO = fmt.Errorf("pwrite seg-7: %w", errors.New("input/output error"))

func TestFailuresTakeTheTierDownAndAProbeBringsItBack(t *testing.T) {
	m, c, changes := newMachine(t)
	if err := m.Admit(Put); err != nil || m.State() != Up {
		t.Fatalf("fresh: %v %v", err, m.State())
	}
	m.Observe(Put, errIO)
	if m.State() != Degraded {
		t.Fatalf("after one failure: %v", m.State())
	}
	m.Observe(Get, nil) // a success in between resets the count
	if m.State() != Up {
		t.Fatalf("after a success: %v", m.State())
	}
	for range 3 {
		if err := m.Admit(Put); err != nil {
			t.Fatalf("refused before Down: %v", err)
		}
		m.Observe(Put, errIO)
	}
	if m.State() != Down {
		t.Fatalf("after 3 failures: %v", m.State())
	}
	err := m.Admit(Get)
	if !errors.Is(err, tier.ErrUnavailable) || !errors.Is(err, ErrRefused) {
		t.Fatalf("Down admits: %v", err)
	}
	c.add(time.Second)
	if err := m.Admit(Get); err != nil {
		t.Fatalf("probe not let through: %v", err)
	}
	if err := m.Admit(Get); !errors.Is(err, tier.ErrUnavailable) {
		t.Fatalf("second call during the probe: %v", err)
	}
	m.Observe(Get, errIO) // probe failed
	if m.State() != Down {
		t.Fatalf("after a failed probe: %v", m.State())
	}
	if err := m.Admit(Get); err == nil {
		t.Fatal("admitted right after a failed probe")
	}
	c.add(time.Second)
	if err := m.Admit(Get); err != nil {
		t.Fatalf("second probe: %v", err)
	}
	m.Observe(Get, fmt.Errorf("no such block: %w", tier.ErrNotFound)) // an answer
	if m.State() != Up {
		t.Fatalf("after an answered probe: %v", m.State())
	}
	s := m.Snapshot()
	if s.Transitions[Down] != 1 || s.Transitions[Up] != 2 || s.Transitions[Degraded] != 2 || s.Refused != 3 {
		t.Fatalf("counts: %+v", s)
	}
	want := []State{Degraded, Up, Degraded, Down, Up}
	if len(*changes) != len(want) {
		t.Fatalf("changes %v, want %v", *changes, want)
	}
	for i, w := range want {
		if (*changes)[i].State != w {
			t.Fatalf("change %d: %v, want %v", i, (*changes)[i].State, w)
		}
	}
}

func TestAProbeLostToCancellationIsRetried(t *testing.T) {
	m, c, _ := newMachine(t)
	for range 3 {
		m.Observe(Put, context.DeadlineExceeded)
	}
	c.add(time.Second)
	if err := m.Admit(Get); err != nil {
		t.Fatal(err)
	}
	m.Observe(Get, context.Canceled)
	if err := m.Admit(Get); err != nil {
		t.Fatalf("probe after a cancelled one: %v", err)
	}
	// A probe never answered is retried after ProbeInterval.
	c.add(time.Second)
	if err := m.Admit(Get); err != nil {
		t.Fatalf("probe after an unanswered one: %v", err)
	}
}

func TestFullTierSkipsPutsForTheBackoff(t *testing.T) {
	m, c, _ := newMachine(t)
	m.Observe(Put, fmt.Errorf("segment: %w", tier.ErrNoSpace))
	s := m.Snapshot()
	if s.State != Degraded || !s.Full || s.Reason != "full" {
		t.Fatalf("after no space: %+v", s)
	}
	if err := m.Admit(Put); !errors.Is(err, tier.ErrNoSpace) {
		t.Fatalf("put within backoff: %v", err)
	}
	if err := m.Admit(Get); err != nil {
		t.Fatalf("get of a full tier: %v", err)
	}
	m.Observe(Get, nil)
	if !m.Snapshot().Full || m.State() != Degraded {
		t.Fatal("a get cleared full")
	}
	c.add(500 * time.Millisecond)
	if err := m.Admit(Put); err != nil {
		t.Fatalf("put after backoff: %v", err)
	}
	m.Observe(Put, nil)
	if s := m.Snapshot(); s.Full || s.State != Up {
		t.Fatalf("after a stored put: %+v", s)
	}
}

// TestRoomMadeEndsTheFullBackoff: once the tier made room (G4 for a
// sink), the next put is admitted at once; the machine stays degraded
// (full) until a put is stored.
func TestRoomMadeEndsTheFullBackoff(t *testing.T) {
	m, _, _ := newMachine(t)
	m.RoomMade() // not full: nothing to end
	m.Observe(Put, fmt.Errorf("g4 put: %w", tier.ErrNoSpace))
	if err := m.Admit(Put); !errors.Is(err, tier.ErrNoSpace) {
		t.Fatalf("put within backoff: %v", err)
	}
	m.RoomMade()
	if err := m.Admit(Put); err != nil {
		t.Fatalf("put after RoomMade: %v", err)
	}
	if s := m.Snapshot(); !s.Full || s.State != Degraded {
		t.Fatalf("after RoomMade, before a put: %+v", s)
	}
	m.Observe(Put, nil)
	if s := m.Snapshot(); s.Full || s.State != Up {
		t.Fatalf("after a stored put: %+v", s)
	}
}

func TestNeutralErrorsDoNotCount(t *testing.T) {
	m, _, _ := newMachine(t)
	for _, err := range []error{tier.ErrNotFound, tier.ErrCorrupt, tier.ErrTooLarge, context.Canceled} {
		for range 5 {
			m.Observe(Get, err)
		}
	}
	if m.State() != Up {
		t.Fatalf("neutral errors moved the state: %v", m.State())
	}
}

func TestBypassRefusesUntilLiftedAndProbed(t *testing.T) {
	m, c, _ := newMachine(t)
	m.SetBypass(true, "link ens1 down")
	if err := m.Admit(Get); !errors.Is(err, tier.ErrUnavailable) {
		t.Fatalf("bypass admits: %v", err)
	}
	c.add(time.Hour)
	if err := m.Admit(Put); err == nil {
		t.Fatal("bypass let a probe through")
	}
	m.Observe(Put, errIO) // a call made beside the machine changes nothing
	if m.State() != Bypassed {
		t.Fatalf("failure in bypass: %v", m.State())
	}
	m.SetBypass(false, "link ens1 up")
	if m.State() != Down {
		t.Fatalf("lifted bypass: %v", m.State())
	}
	if err := m.Admit(Get); err != nil {
		t.Fatalf("first call after bypass is the probe: %v", err)
	}
	m.Observe(Get, nil)
	if m.State() != Up {
		t.Fatalf("after the probe: %v", m.State())
	}
}

func TestConcurrentUse(t *testing.T) {
	m, c, _ := newMachine(t)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 1000 {
				if m.Admit(Op(i%2)) == nil {
					if (i+g)%3 == 0 {
						m.Observe(Op(i%2), errIO)
					} else {
						m.Observe(Op(i%2), nil)
					}
				}
				if i%100 == 0 {
					c.add(time.Second)
					_ = m.Snapshot()
				}
			}
		})
	}
	wg.Wait()
}

// TestProbeOnlyLetsNoDataCallThrough: a ProbeOnly tier that is Down
// refuses every data call, also once a probe is due; only AdmitProbe lets
// the owner's probe through, once per ProbeInterval, and its answer
// brings the tier back.
func TestProbeOnlyLetsNoDataCallThrough(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	m := New("G3", Config{DownAfter: 2, ProbeInterval: time.Second, ProbeOnly: true, Now: c.now}, func(Snapshot) {})
	if err := m.AdmitProbe(); !errors.Is(err, ErrRefused) {
		t.Fatalf("probe of an Up tier admitted: %v", err)
	}
	for range 2 {
		m.Observe(Put, errIO)
	}
	c.add(2 * time.Second)
	for _, op := range []Op{Put, Get, PutLast} {
		if err := m.Admit(op); !errors.Is(err, tier.ErrUnavailable) {
			t.Fatalf("Down ProbeOnly tier admitted a %v call with a probe due: %v", op, err)
		}
	}
	if err := m.AdmitProbe(); err != nil {
		t.Fatalf("due probe refused: %v", err)
	}
	if err := m.AdmitProbe(); err == nil {
		t.Fatal("a second probe admitted within the probe interval")
	}
	m.Observe(Get, nil)
	if m.State() != Up {
		t.Fatalf("after an answered probe: %v", m.State())
	}
	if err := m.Admit(Put); err != nil {
		t.Fatalf("Up again, refused: %v", err)
	}
}

// TestStaleProbeIgnored: a probe that answers (with a failure) after the
// tier came back up through another call does not take it degraded; a
// probe's failure while the tier is still down counts as before.
func TestStaleProbeIgnored(t *testing.T) {
	m := New("G4", Config{ProbeInterval: time.Nanosecond}, nil)
	for range 5 {
		m.Observe(Get, tier.ErrUnavailable)
	}
	if m.State() != Down {
		t.Fatalf("state %v after 5 failures, want down", m.State())
	}
	time.Sleep(time.Millisecond)
	if err := m.AdmitProbe(); err != nil {
		t.Fatal(err)
	}
	m.Observe(Probe, tier.ErrUnavailable) // still down: counts
	if sn := m.Snapshot(); sn.State != Down || !strings.Contains(sn.Reason, "probe failed") {
		t.Fatalf("after a failed probe: %+v", sn)
	}
	time.Sleep(time.Millisecond)
	if err := m.Admit(Get); err != nil { // a call let through as a probe
		t.Fatal(err)
	}
	m.Observe(Get, nil)
	if m.State() != Up {
		t.Fatalf("state %v after a call succeeded, want up", m.State())
	}
	m.Observe(Probe, tier.ErrUnavailable) // the owner's probe, answering late
	if m.State() != Up {
		t.Fatalf("a late probe's failure took the tier %v; want it ignored (up)", m.State())
	}
}
