package g3

import (
	"context"
	"errors"
	"fmt"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// ErrLimits is returned (wrapped) by SetLimits and SetWatermarks for a
// capacity or watermarks that Open would refuse.
var ErrLimits = errors.New("g3: invalid limits")

// Limits are the G3 settings that can change while the store runs (config
// reload): the fields of Options with the same names and meanings
// (CapacityBytes: bytes of segment files on disk). The store implements
// tier.Resizer with them.
type Limits = tier.Limits

// Limits returns the capacity and watermarks in effect.
func (s *Store) Limits() Limits {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return Limits{CapacityBytes: s.opts.CapacityBytes, HighWatermark: s.opts.HighWatermark, LowWatermark: s.opts.LowWatermark}
}

// Watermarks returns the high and low watermarks in effect (fractions of
// CapacityBytes).
func (s *Store) Watermarks() (high, low float64) {
	l := s.Limits()
	return l.HighWatermark, l.LowWatermark
}

// SetWatermarks changes the watermarks and keeps the capacity; see
// SetLimits. Errors: ErrLimits, tier.ErrClosed, ctx's error.
func (s *Store) SetWatermarks(ctx context.Context, high, low float64) error {
	return s.setLimits(ctx, func(l *Limits) { l.HighWatermark, l.LowWatermark = high, low })
}

// SetLimits changes the capacity and watermarks of the running store.
//
// Growing (or raising the watermarks) only lets later roll-overs keep more
// segments. Shrinking reclaims at once, on the caller's goroutine, through
// the reclaim path a roll-over uses: oldest segments first, each one's live
// blocks handed to OnEvict (demoted) before it goes, never the active
// segment. If more segments than the new high watermark allows are in the
// log, they are reclaimed down to the low watermark; then spares and
// segments go until the files fit in the new capacity. Puts that need a
// new segment wait meanwhile (as during any reclaim); other Puts, Gets and
// Deletes go on. The caller must not hold locks OnEvict takes.
//
// The new values must pass Open's checks (at least two segments under the
// high watermark and one under the low one); otherwise nothing changes and
// the error wraps ErrLimits. Other errors: tier.ErrClosed, or ctx's error
// when it ends during the reclaim (the new limits are then in effect and
// the next roll-over finishes the reclaim).
func (s *Store) SetLimits(ctx context.Context, l Limits) error {
	return s.setLimits(ctx, func(cur *Limits) { *cur = l })
}

// setLimits applies change to the current limits under rollMu (so that two
// setters cannot lose each other's change) and reclaims as needed.
func (s *Store) setLimits(ctx context.Context, change func(*Limits)) error {
	s.rollMu.Lock()
	defer s.rollMu.Unlock()
	// The capacity and watermarks in s.opts are read by roll-over (under
	// rollMu) and by Usage and spareRoom (under mu): writing them with both
	// held keeps every reader consistent.
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return tier.ErrClosed
	}
	l := Limits{CapacityBytes: s.opts.CapacityBytes, HighWatermark: s.opts.HighWatermark, LowWatermark: s.opts.LowWatermark}
	old := l
	change(&l)
	o := s.opts
	o.CapacityBytes, o.HighWatermark, o.LowWatermark = l.CapacityBytes, l.HighWatermark, l.LowWatermark
	o, err := o.withDefaults()
	if err != nil {
		s.mu.Unlock()
		return fmt.Errorf("%w: %v", ErrLimits, err)
	}
	s.opts.CapacityBytes, s.opts.HighWatermark, s.opts.LowWatermark = o.CapacityBytes, o.HighWatermark, o.LowWatermark
	s.mu.Unlock()

	before := s.st.reclaims.Load()
	err = s.fitLimits(ctx)
	s.log.Info("G3 limits changed", "capacity_bytes", o.CapacityBytes, "high", o.HighWatermark, "low", o.LowWatermark,
		"old_capacity_bytes", old.CapacityBytes, "old_high", old.HighWatermark, "old_low", old.LowWatermark,
		"segments_reclaimed", s.st.reclaims.Load()-before)
	return err
}

// fitLimits reclaims until the log is within the current limits, as a
// roll-over would: above the high watermark down to the low one, then
// spares and oldest segments while the files exceed the capacity. Caller
// holds rollMu.
func (s *Store) fitLimits(ctx context.Context) error {
	if s.opts.CapacityBytes == 0 {
		return nil
	}
	high, low := s.opts.segLimits()
	hard := int(s.opts.CapacityBytes / s.opts.SegmentBytes)
	s.mu.RLock()
	n := len(s.segs)
	s.mu.RUnlock()
	if n > high {
		for {
			if err := ctx.Err(); err != nil {
				return err
			}
			s.mu.RLock()
			over := len(s.segs) > low
			s.mu.RUnlock()
			if !over || !s.reclaimOldest("limits lowered") {
				break
			}
		}
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		s.mu.RLock()
		onDisk := len(s.segs) + len(s.spares)
		s.mu.RUnlock()
		// Spares hold no data: they go first.
		if onDisk <= hard || !(s.dropSpare() || s.reclaimOldest("capacity lowered")) {
			return nil
		}
	}
}
