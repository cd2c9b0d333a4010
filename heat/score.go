package heat

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// Heat score defaults (DESIGN "Policy"; the 30-point cold threshold is a
// seeded figure of the design papers).
const (
	// MaxScore is the ceiling of a heat score (scores are in [0, MaxScore]).
	MaxScore = 100.0
	// DefaultHalfLife is the default score half-life: an untouched block's
	// score halves every 60 s.
	DefaultHalfLife = 60 * time.Second
	// DefaultGain is the default number of points one access adds (before
	// the MaxScore cap): one access makes a block cold (25), two quick
	// accesses warm (50), three hot (75).
	DefaultGain = 25.0
	// DefaultCold is the default cold threshold: a score below 30 is cold.
	DefaultCold = 30.0
	// DefaultHot is the default warm/hot boundary: a score of 60 or more is hot.
	DefaultHot = 60.0
)

// ErrConfig is returned (wrapped) by constructors given an invalid
// configuration.
var ErrConfig = errors.New("heat: invalid configuration")

// Class is a block's heat class, derived from its score by thresholds.
type Class uint8

// Heat classes, coldest first.
const (
	Cold Class = iota // score < Cold threshold
	Warm              // Cold threshold <= score < Hot threshold
	Hot               // score >= Hot threshold
)

// String returns "cold", "warm" or "hot".
func (c Class) String() string {
	switch c {
	case Cold:
		return "cold"
	case Warm:
		return "warm"
	case Hot:
		return "hot"
	}
	return fmt.Sprintf("Class(%d)", uint8(c))
}

// TrackerConfig configures a Tracker. Zero fields take the defaults above.
type TrackerConfig struct {
	// HalfLife is the time in which an untouched score halves (> 0).
	HalfLife time.Duration
	// Gain is the points one access adds, in (0, MaxScore].
	Gain float64
	// Cold: scores below it are Cold, in (0, Hot].
	Cold float64
	// Hot: scores at or above it are Hot, in [Cold, MaxScore].
	Hot float64
}

func (c *TrackerConfig) fill() error {
	if c.HalfLife == 0 {
		c.HalfLife = DefaultHalfLife
	}
	if c.Gain == 0 {
		c.Gain = DefaultGain
	}
	if c.Cold == 0 {
		c.Cold = DefaultCold
	}
	if c.Hot == 0 {
		c.Hot = DefaultHot
	}
	switch {
	case c.HalfLife < 0:
		return fmt.Errorf("%w: half-life %v must be positive", ErrConfig, c.HalfLife)
	case c.Gain < 0 || c.Gain > MaxScore:
		return fmt.Errorf("%w: gain %v outside (0, %v]", ErrConfig, c.Gain, MaxScore)
	case c.Cold < 0 || c.Hot > MaxScore || c.Cold > c.Hot:
		return fmt.Errorf("%w: thresholds cold %v, hot %v must satisfy 0 < cold <= hot <= %v",
			ErrConfig, c.Cold, c.Hot, MaxScore)
	}
	return nil
}

// scoreEntry is a score as of its last update (decay is applied lazily).
type scoreEntry struct {
	score float64
	at    int64 // UnixNano of the last update
}

// Tracker keeps a heat score in [0, 100] per key: each access adds Gain
// points (capped at 100) and the score decays exponentially with HalfLife.
// Only the last score and its time are stored (16 bytes plus the key); decay
// is computed on read. Memory grows with the number of keys touched: call
// Forget when a block is gone, or Prune periodically.
//
// A Tracker is safe for concurrent use. Times need not be monotonic: a time
// earlier than a key's last update is treated as that update's time.
type Tracker[K comparable] struct {
	cfg     TrackerConfig
	perNano float64 // decay exponent per nanosecond: -1/halfLife
	mu      sync.Mutex
	m       map[K]scoreEntry
}

// NewTracker returns an empty Tracker. It returns an error wrapping
// ErrConfig when cfg is invalid.
func NewTracker[K comparable](cfg TrackerConfig) (*Tracker[K], error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	return &Tracker[K]{cfg: cfg, perNano: -1 / float64(cfg.HalfLife), m: make(map[K]scoreEntry)}, nil
}

// Config returns the effective configuration (defaults filled in; the
// latest SetConfig's once one was made).
func (t *Tracker[K]) Config() TrackerConfig {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cfg
}

// decayed returns e's score as of now; t.mu held.
func (t *Tracker[K]) decayed(e scoreEntry, now int64) float64 {
	dt := now - e.at
	if dt <= 0 || e.score == 0 {
		return e.score
	}
	return e.score * math.Exp2(float64(dt)*t.perNano)
}

// Touch records one access of k at now and returns k's new score.
func (t *Tracker[K]) Touch(k K, now time.Time) float64 {
	n := now.UnixNano()
	t.mu.Lock()
	e := t.m[k]
	s := min(t.decayed(e, n)+t.cfg.Gain, MaxScore)
	t.m[k] = scoreEntry{score: s, at: max(n, e.at)}
	t.mu.Unlock()
	return s
}

// Score returns k's score as of now (0 for an unknown key). It does not
// change the stored state.
func (t *Tracker[K]) Score(k K, now time.Time) float64 {
	n := now.UnixNano()
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.m[k]
	if !ok {
		return 0
	}
	return t.decayed(e, n) // under mu: SetConfig may change the decay rate
}

// Class maps a score to its class with the configured thresholds.
func (t *Tracker[K]) Class(score float64) Class {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case score >= t.cfg.Hot:
		return Hot
	case score >= t.cfg.Cold:
		return Warm
	}
	return Cold
}

// Forget drops k's score (a later Touch starts from 0).
func (t *Tracker[K]) Forget(k K) {
	t.mu.Lock()
	delete(t.m, k)
	t.mu.Unlock()
}

// Len returns the number of keys with a stored score.
func (t *Tracker[K]) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}

// Prune drops every key whose score as of now is below floor and returns
// how many it dropped. It is O(number of keys) and holds the lock
// throughout; call it from a background sweep, not per access.
func (t *Tracker[K]) Prune(now time.Time, floor float64) int {
	n := now.UnixNano()
	t.mu.Lock()
	defer t.mu.Unlock()
	dropped := 0
	for k, e := range t.m {
		if t.decayed(e, n) < floor {
			delete(t.m, k)
			dropped++
		}
	}
	return dropped
}

// Range calls fn with every key and its score as of now, in no order,
// until fn returns false (for heat summaries: top-N, histograms). It holds
// the Tracker's lock: fn must not call the Tracker.
func (t *Tracker[K]) Range(now time.Time, fn func(k K, score float64) bool) {
	n := now.UnixNano()
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, e := range t.m {
		if !fn(k, t.decayed(e, n)) {
			return
		}
	}
}
