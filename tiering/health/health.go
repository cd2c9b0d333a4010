// Package health is the state machine the tiering core keeps for each
// tier below G2 (G3, G3.5, G4): it is fed the outcome of the puts and gets
// of the data path (write-back, eviction, sink, share, promotion), of
// fsck's reads and of a local tier's syncs (gc lists and deletes
// directly, with its own timeouts, and sends no delete to a local tier
// the machine refuses), and it decides whether the next one is tried at
// all.
//
// A tier is in one of four states:
//
//	Up        every call goes through.
//	Degraded  every call goes through, but the tier is not all right: its
//	          latest calls failed (fewer than Config.DownAfter in a row), or
//	          it is full (a put answered "no space"; puts skip it for
//	          Config.FullBackoff, then one is tried again).
//	Down      Config.DownAfter calls in a row failed with an I/O error, an
//	          unavailable backend or a deadline: calls fail at once with
//	          tier.ErrUnavailable, so no request waits on a dead disk or a
//	          hung object store. Every Config.ProbeInterval one call is let
//	          through as a probe (a half-open circuit breaker); its success
//	          brings the tier Up, its failure keeps it Down.
//	Bypassed  set from outside (SetBypass: the pool's link is down): calls
//	          fail at once as in Down and no probe is let through until the
//	          bypass is lifted; the tier is then Down until a probe succeeds,
//	          so it is only used again once it has answered.
//
// Errors that say something about the data rather than the device
// (tier.ErrNotFound, tier.ErrCorrupt, tier.ErrTooLarge) and the caller's
// own cancellation are neither successes nor failures here.
//
// This is the scheme JuiceFS uses for its cache disks (normal, unstable,
// down, with probes), and the half-open state of a circuit breaker
// (M. Nygard, "Release It!", 2nd ed., ch. 5).
package health

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// State is a tier's health state.
type State uint8

// The states, in order of how little the core may rely on the tier.
const (
	Up State = iota
	Degraded
	Down
	Bypassed
	numStates
)

// States lists every state, for metrics that export one series per state.
var States = [...]State{Up, Degraded, Down, Bypassed}

// String returns the state's name as status and metrics show it.
func (s State) String() string {
	switch s {
	case Up:
		return "up"
	case Degraded:
		return "degraded"
	case Down:
		return "down"
	case Bypassed:
		return "bypassed"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Op is the kind of call Admit is asked about.
type Op uint8

// Ops the machine gates.
const (
	// Put is a put that has another tier to go to when this one is
	// refused.
	Put Op = iota
	// Get is a read.
	Get
	// PutLast is a put with nowhere else to go: it is refused while the
	// tier is Down or Bypassed but not for being full (the tier should
	// reclaim space for it instead).
	PutLast
	// Probe is the owner's probe of a Down tier (AdmitProbe): its outcome
	// counts only while the tier is still Down. A probe that answers after
	// the tier came back up by another call (a slow probe, an object
	// store client retrying a refused connection) says nothing about the
	// tier now, and is ignored.
	Probe
)

// ErrRefused is wrapped (with tier.ErrUnavailable or tier.ErrNoSpace) by
// the errors of calls Admit refused: the call was not made, so callers
// need not log it (the change of state was logged once).
var ErrRefused = errors.New("refused by the tier's health")

// DefaultFullBackoff is Config.FullBackoff's default.
const DefaultFullBackoff = time.Second

// Config tunes a Machine. Zero fields take the defaults given.
type Config struct {
	// DownAfter is how many failed calls in a row take the tier Down
	// (default 5).
	DownAfter int
	// ProbeInterval is how long a Down tier refuses calls before it lets
	// one through as a probe (default 1 s).
	ProbeInterval time.Duration
	// FullBackoff is how long puts skip a tier after it answered "no
	// space" (default 1 s).
	FullBackoff time.Duration
	// Now is the clock (default time.Now); tests pass a fake one.
	Now func() time.Time
	// ProbeOnly makes a Down tier refuse every call: only AdmitProbe lets
	// one through, for the owner's own probe. For a local device, whose
	// calls cannot be interrupted: a put let through as a probe into a
	// hung disk would be one more call left hanging (and its block held
	// back until the disk answers), each probe interval.
	ProbeOnly bool
}

func (c Config) withDefaults() Config {
	if c.DownAfter <= 0 {
		c.DownAfter = 5
	}
	if c.ProbeInterval <= 0 {
		c.ProbeInterval = time.Second
	}
	if c.FullBackoff <= 0 {
		c.FullBackoff = DefaultFullBackoff
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Snapshot is a Machine's state as status and metrics report it.
type Snapshot struct {
	Tier   string
	State  State
	Reason string    // why the tier is not Up ("" when Up)
	Since  time.Time // when State was entered
	// Full reports a tier that answered "no space" to its latest put (it
	// is Degraded, or worse, meanwhile); FullSince is when that began.
	Full      bool
	FullSince time.Time
	// Failures is the count of failed calls in a row.
	Failures int
	// Transitions counts the changes into each state since start, and
	// Refused the calls refused without being tried (Down, Bypassed, or a
	// put to a full tier within FullBackoff).
	Transitions [numStates]int64
	Refused     int64
}

// Machine is one tier's health. It is safe for concurrent use.
type Machine struct {
	name string
	cfg  Config

	mu          sync.Mutex
	state       State
	reason      string
	since       time.Time
	failures    int
	full        bool
	fullSince   time.Time
	fullRetryAt time.Time
	probeAt     time.Time // Down: when the next call may go through as a probe
	probing     bool      // Down: a probe call is out
	transitions [numStates]int64
	refused     int64
	onChange    func(Snapshot)
}

// New returns the machine of the tier named name (as in status: "G3"),
// Up. onChange, if set, is called (without the machine's lock held, so
// possibly from several goroutines at once) after every change of state,
// e.g. to log it.
func New(name string, cfg Config, onChange func(Snapshot)) *Machine {
	cfg = cfg.withDefaults()
	return &Machine{name: name, cfg: cfg, since: cfg.Now(), onChange: onChange}
}

// Admit reports whether a call of kind op may be made to the tier now:
// nil, or an error wrapping tier.ErrUnavailable (Down, Bypassed) or, for
// a put, tier.ErrNoSpace (full within FullBackoff). Every admitted call's
// outcome must be given to Observe, or a Down tier's probe is never
// answered (a probe left unanswered is retried after ProbeInterval).
func (m *Machine) Admit(op Op) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.cfg.Now()
	switch m.state {
	case Bypassed:
		m.refused++
		return fmt.Errorf("%s bypassed (%s): %w: %w", m.name, m.reason, ErrRefused, tier.ErrUnavailable)
	case Down:
		if m.cfg.ProbeOnly || now.Before(m.probeAt) { // also while a probe is out

			m.refused++
			return fmt.Errorf("%s down (%s): %w: %w", m.name, m.reason, ErrRefused, tier.ErrUnavailable)
		}
		m.probing = true
		m.probeAt = now.Add(m.cfg.ProbeInterval) // a lost probe is retried then
		return nil
	}
	if op == Put && m.full && now.Before(m.fullRetryAt) {
		m.refused++
		return fmt.Errorf("%s full: %w: %w", m.name, ErrRefused, tier.ErrNoSpace)
	}
	return nil
}

// AdmitProbe reports whether the owner's probe of a Down tier may run now
// (nil, as Admit, when one is due), whatever ProbeOnly says; its outcome
// must be given to Observe. A tier that is not Down is not probed
// (tier.ErrUnavailable-class error for Bypassed, an ErrRefused one else).
func (m *Machine) AdmitProbe() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.cfg.Now()
	switch {
	case m.state == Bypassed:
		return fmt.Errorf("%s bypassed (%s): %w: %w", m.name, m.reason, ErrRefused, tier.ErrUnavailable)
	case m.state != Down, now.Before(m.probeAt):
		return fmt.Errorf("%s: no probe due: %w", m.name, ErrRefused)
	}
	m.probing = true
	m.probeAt = now.Add(m.cfg.ProbeInterval)
	return nil
}

// RoomMade ends a full tier's backoff at once: the tier has just made
// room for a put (tier.RoomMaker), so the next put is admitted; its
// outcome, given to Observe, sets the state as usual.
func (m *Machine) RoomMade() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.full {
		m.fullRetryAt = m.cfg.Now()
	}
}

// Refusing reports whether Admit(op) would refuse a call now, without
// letting a probe through (a Down tier whose probe is due is not refusing,
// unless only its owner probes it: Config.ProbeOnly).
func (m *Machine) Refusing(op Op) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.cfg.Now()
	switch m.state {
	case Bypassed:
		return true
	case Down:
		return m.cfg.ProbeOnly || now.Before(m.probeAt)
	}
	return op == Put && m.full && now.Before(m.fullRetryAt)
}

// Neutral reports whether err says nothing about the tier's health: nil is
// not neutral (it is a success); missing, corrupt and oversized blocks and
// the caller's cancellation are.
func Neutral(err error) bool {
	return err != nil && (errors.Is(err, tier.ErrNotFound) || errors.Is(err, tier.ErrCorrupt) ||
		errors.Is(err, tier.ErrTooLarge) || errors.Is(err, context.Canceled))
}

// Observe records the outcome of a call of kind op that Admit let through
// (or any other call to the tier whose outcome tells its health).
func (m *Machine) Observe(op Op, err error) {
	var snap *Snapshot
	m.mu.Lock()
	now := m.cfg.Now()
	if op == Probe && m.state != Down {
		m.mu.Unlock()
		return // a stale probe: the tier is up (or bypassed) already
	}
	switch {
	case err == nil:
		m.failures = 0
		if op == Put || op == PutLast {
			m.full = false
		}
		if m.state == Down && m.probing || m.state == Degraded && !m.full {
			m.probing = false
			snap = m.setLocked(Up, "", now)
		}
	case errors.Is(err, tier.ErrNoSpace):
		if !m.full {
			m.fullSince = now
		}
		m.full, m.fullRetryAt = true, now.Add(m.cfg.FullBackoff)
		if m.state == Down && m.probing { // it answered: the device works
			m.probing, m.failures = false, 0
			snap = m.setLocked(Degraded, "full", now)
		} else if m.state == Up {
			snap = m.setLocked(Degraded, "full", now)
		}
	case Neutral(err):
		if m.state == Down && m.probing && !errors.Is(err, context.Canceled) {
			// It answered (a miss, a bad block): the device works.
			m.probing, m.failures = false, 0
			snap = m.setLocked(Up, "", now)
		} else if m.probing && errors.Is(err, context.Canceled) {
			m.probing = false
			m.probeAt = now // the caller gave up, not the tier: probe again
		}
	default:
		m.failures++
		switch m.state {
		case Down:
			if m.probing {
				m.probing = false
				m.probeAt = now.Add(m.cfg.ProbeInterval)
				m.reason = fmt.Sprintf("probe failed: %v", err)
			}
		case Bypassed:
		default:
			if m.failures >= m.cfg.DownAfter {
				m.probeAt = now.Add(m.cfg.ProbeInterval)
				snap = m.setLocked(Down, fmt.Sprintf("%d failed calls in a row, the latest: %v", m.failures, err), now)
			} else if m.state == Up || m.state == Degraded && m.full {
				snap = m.setLocked(Degraded, fmt.Sprintf("failed call: %v", err), now)
			} else {
				m.reason = fmt.Sprintf("%d failed calls in a row, the latest: %v", m.failures, err)
			}
		}
	}
	m.mu.Unlock()
	m.changed(snap)
}

// SetBypass puts the tier into bypass (on, with reason saying why) or
// lifts it. A lifted bypass leaves the tier Down with its probe due at
// once: the next call is the probe, and only its success brings it Up.
func (m *Machine) SetBypass(on bool, reason string) {
	var snap *Snapshot
	m.mu.Lock()
	now := m.cfg.Now()
	switch {
	case on && m.state != Bypassed:
		m.probing = false
		snap = m.setLocked(Bypassed, reason, now)
	case on:
		m.reason = reason
	case m.state == Bypassed:
		m.probing, m.probeAt = false, now
		snap = m.setLocked(Down, "bypass lifted ("+reason+"); waiting for a call to succeed", now)
	}
	m.mu.Unlock()
	m.changed(snap)
}

// State returns the current state.
func (m *Machine) State() State {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state
}

// Snapshot returns the machine's state for status and metrics.
func (m *Machine) Snapshot() Snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.snapshotLocked()
}

func (m *Machine) snapshotLocked() Snapshot {
	return Snapshot{Tier: m.name, State: m.state, Reason: m.reason, Since: m.since, Full: m.full,
		FullSince: m.fullSince, Failures: m.failures, Transitions: m.transitions, Refused: m.refused}
}

func (m *Machine) setLocked(s State, reason string, now time.Time) *Snapshot {
	m.state, m.reason, m.since = s, reason, now
	m.transitions[s]++
	snap := m.snapshotLocked()
	return &snap
}

func (m *Machine) changed(s *Snapshot) {
	if s != nil && m.onChange != nil {
		m.onChange(*s)
	}
}
