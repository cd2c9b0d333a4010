package heat

import "time"

// SetConfig changes a live Tracker's half-life, gain and thresholds (a
// config reload). Zero fields take the defaults, as in NewTracker; an
// invalid cfg returns an error wrapping ErrConfig and changes nothing.
//
// Scores are kept. When the half-life changes, every stored score is first
// decayed to now at the old rate, so the new half-life applies from the
// change on and never rewrites the decay of the past. That pass is O(number
// of keys) under the Tracker's lock; it runs only when the half-life
// changes.
func (t *Tracker[K]) SetConfig(cfg TrackerConfig) error {
	return t.setConfig(cfg, time.Now())
}

// setConfig is SetConfig with the time of the change given (tests).
func (t *Tracker[K]) setConfig(cfg TrackerConfig, now time.Time) error {
	if err := cfg.fill(); err != nil {
		return err
	}
	n := now.UnixNano()
	t.mu.Lock()
	defer t.mu.Unlock()
	if cfg.HalfLife != t.cfg.HalfLife {
		for k, e := range t.m {
			if e.at < n {
				t.m[k] = scoreEntry{score: t.decayed(e, n), at: n}
			}
		}
		t.perNano = -1 / float64(cfg.HalfLife)
	}
	t.cfg = cfg
	return nil
}
