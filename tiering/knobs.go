package tiering

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ctxmem/ctxmemd/heat"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// Live knobs: the heat and G3 settings a config reload changes while the
// store runs (SetG2Limits in store.go covers G2). They need no state of
// their own in Store: the heat knobs live in the heat tracker (its
// SetConfig), the G3 watermarks in the G3 tier (g3.Store.SetWatermarks).

// HeatKnobs are the heat-score settings that can change while the store
// runs.
type HeatKnobs struct {
	// Cold and Warm are heat scores (0–100): a block scoring below Cold is
	// cold, one scoring Warm or more is hot, in between it is warm.
	// 0 < Cold < Warm <= 100.
	Cold, Warm float64
	// HalfLife is the time in which an untouched block's score halves
	// (> 0).
	HalfLife time.Duration
}

// HeatKnobs returns the heat settings in effect. Anything that classifies
// blocks as cold or hot (status, xattrs, schedulers) should read Cold and
// Warm here rather than keep its own copy, so a reload reaches it.
func (s *Store) HeatKnobs() HeatKnobs {
	c := s.place.heat.Config()
	return HeatKnobs{Cold: c.Cold, Warm: c.Hot, HalfLife: c.HalfLife}
}

// SetHeatKnobs changes the heat thresholds and half-life live (config
// reload). Scores are kept: a new half-life applies from now on (see
// heat.Tracker.SetConfig), new thresholds to every later classification.
// Errors: ErrInvalid unless 0 < Cold < Warm <= 100 and HalfLife > 0
// (nothing changes then).
func (s *Store) SetHeatKnobs(k HeatKnobs) error {
	if !(k.Cold > 0 && k.Cold < k.Warm && k.Warm <= heat.MaxScore) || k.HalfLife <= 0 {
		return fmt.Errorf("%w: heat knobs cold %g, warm %g, half-life %v (need 0 < cold < warm <= %g, half-life > 0)",
			ErrInvalid, k.Cold, k.Warm, k.HalfLife, heat.MaxScore)
	}
	c := s.place.heat.Config()
	c.Cold, c.Hot, c.HalfLife = k.Cold, k.Warm, k.HalfLife
	if err := s.place.heat.SetConfig(c); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return nil
}

// liveWatermarks is implemented by a G3 tier whose watermarks can change
// while it runs (g3.Store). Its high watermark is then also the G3 fill
// fraction above which write-back asks admission (Config.G3High applies
// only to a G3 tier without it).
type liveWatermarks interface {
	Watermarks() (high, low float64)
	SetWatermarks(ctx context.Context, high, low float64) error
}

// G3Limits are G3's capacity and watermarks as they change live (config
// reload).
type G3Limits = tier.Limits

// G3Limits returns G3's capacity and watermarks in effect; ok is false
// when there is no G3 tier whose limits change live.
func (s *Store) G3Limits() (l G3Limits, ok bool) {
	r, ok := s.g3.(tier.Resizer)
	if !ok {
		return l, false
	}
	return r.Limits(), true
}

// SetG3Limits changes G3's capacity and watermarks live (config reload):
// the one route for both, so the core's admission threshold (G3's high
// watermark) and G3's reclaim never disagree. Shrinking reclaims at once,
// on the caller's goroutine (which must hold no lock of this Store), the
// live blocks of reclaimed segments demoted through the core's port.
// Errors: ErrInvalid when there is no G3 tier whose limits change live or
// it refuses the values (nothing changes then); ErrClosed after Close.
func (s *Store) SetG3Limits(ctx context.Context, l G3Limits) error {
	if s.closed.Load() {
		return ErrClosed
	}
	r, ok := s.g3.(tier.Resizer)
	if !ok {
		return fmt.Errorf("%w: %v", ErrInvalid, errNoLiveG3)
	}
	switch err := r.SetLimits(ctx, l); {
	case err == nil:
		return nil
	case errors.Is(err, tier.ErrClosed), s.ctx.Err() != nil:
		return fmt.Errorf("G3 limits: %w (%v)", ErrClosed, err)
	case ctx.Err() != nil:
		return err
	default:
		return fmt.Errorf("%w: G3 limits: %v", ErrInvalid, err)
	}
}

// G3Watermarks returns the G3 high and low watermarks in effect (fractions
// of G3 capacity): the G3 tier's own when it reports them, else
// Config.G3High and 0. Both are 0 without a G3 tier.
func (s *Store) G3Watermarks() (high, low float64) {
	if s.g3 == nil {
		return 0, 0
	}
	if w, ok := s.g3.(liveWatermarks); ok {
		return w.Watermarks()
	}
	return s.cfg.G3High, 0
}

// g3High is the G3 fill fraction above which admission filters blocks.
func (s *Store) g3High() float64 {
	h, _ := s.G3Watermarks()
	return h
}

// errNoLiveG3 says the store has no G3 tier whose watermarks can change.
var errNoLiveG3 = errors.New("no G3 tier with live watermarks")

// SetG3Watermarks changes the G3 watermarks live (config reload): the
// high watermark above which write-back asks admission before writing a
// block to G3, and the G3 tier's reclaim watermarks (above high, its
// oldest segments are reclaimed down to low, their live blocks demoted to
// G4 through DemoteFromG3). Lowering them reclaims at once, on the
// caller's goroutine, which must hold no lock of this Store.
// Errors: ErrInvalid unless 0 < low < high <= 1, or when the G3 tier
// cannot change its watermarks live (no G3, or not a g3.Store) or refuses
// them; ErrClosed after Close (the tier's or this Store's).
func (s *Store) SetG3Watermarks(high, low float64) error {
	if !(0 < low && low < high && high <= 1) {
		return fmt.Errorf("%w: G3 watermarks low %g high %g (need 0 < low < high <= 1)", ErrInvalid, low, high)
	}
	if s.closed.Load() {
		return ErrClosed
	}
	w, ok := s.g3.(liveWatermarks)
	if !ok {
		return fmt.Errorf("%w: %v", ErrInvalid, errNoLiveG3)
	}
	switch err := w.SetWatermarks(s.ctx, high, low); {
	case err == nil:
		return nil
	case errors.Is(err, tier.ErrClosed), s.ctx.Err() != nil:
		return fmt.Errorf("G3 watermarks: %w (%v)", ErrClosed, err)
	default:
		return fmt.Errorf("%w: G3 watermarks: %v", ErrInvalid, err)
	}
}
