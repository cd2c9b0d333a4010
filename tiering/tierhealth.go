package tiering

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/health"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// fullBackoff is how long a tier that answered "no space" is skipped by
// write-back (which then goes to the next tier) before it is tried again
// (a full tier is not retried in a loop; status shows it FULL meanwhile).
const fullBackoff = health.DefaultFullBackoff

// probeTimeout bounds a tier.Prober's probe.
const probeTimeout = 5 * time.Second

// probeInterval is how long a down tier refuses calls before one goes
// through as a probe (health.Config.ProbeInterval): short, because until
// then reads of blocks only that tier holds fail even once it is back.
const probeInterval = 250 * time.Millisecond

// newHealth makes the health machine of every tier below G2 (package
// health: up, degraded, down, bypassed), logging each change of state.
func newHealth(cfg Config) [nTiers]*health.Machine {
	var hs [nTiers]*health.Machine
	for ti := tiG3; ti < nTiers; ti++ {
		log := cfg.Logger
		hs[ti] = health.New(tierNames[ti], health.Config{FullBackoff: fullBackoff, ProbeInterval: probeInterval},
			func(sn health.Snapshot) {
				lvl := slog.LevelWarn
				if sn.State == health.Up {
					lvl = slog.LevelInfo
				}
				log.Log(context.Background(), lvl, "tier health changed", "tier", sn.Tier, "state", sn.State.String(), "reason", sn.Reason)
			})
	}
	return hs
}

// putTo stores data as k in tier ti through its health machine: a tier
// that is down or bypassed is not tried (tier.ErrUnavailable at once),
// nor is a full one within fullBackoff unless last is set (there is no
// other tier to go to, so the tier should reclaim space instead).
func (s *Store) putTo(ctx context.Context, ti int, k tier.Key, data []byte, last bool) error {
	h, t := s.health[ti], s.tierAt(ti)
	op := health.Put
	if last {
		op = health.PutLast
	}
	if err := h.Admit(op); err != nil {
		return err
	}
	err := t.Put(ctx, k, data)
	h.Observe(health.Put, err)
	return err
}

// getFrom reads block k of tier ti through its health machine: a tier
// that is down or bypassed is not asked (tier.ErrUnavailable at once, so
// the reader goes to the next copy, or gets EIO, but never waits on it).
func (s *Store) getFrom(ctx context.Context, ti int, k tier.Key, p []byte, off int64) (int, error) {
	h, t := s.health[ti], s.tierAt(ti)
	if err := h.Admit(health.Get); err != nil {
		return 0, err
	}
	var n int
	var err error
	if ti == tiG3 || ti == tiG35 {
		n, err = s.getBounded(ctx, ti, t, k, p, off)
	} else {
		n, err = t.Get(ctx, k, p, off) // an object store's requests have their own deadlines
	}
	h.Observe(health.Get, err)
	return n, err
}

// getBounded is a read of a local tier (G3, G3.5) that returns within
// Config.LocalReadTimeout even when the device never answers: pread
// cannot be interrupted, and a reader of a block only a hung disk holds
// waited for as long as the disk did, holding its object's lock (a
// status walk and SIGTERM then waited too). The read runs on its own
// goroutine into a scratch buffer, copied into p once it returns in time;
// past the deadline the caller gets tier.ErrUnavailable (a failed call:
// five in a row take the tier down, and then no read waits on it) and the
// goroutine, which owns the scratch buffer from then on, gives it back
// whenever the device answers, so a late read never writes into p.
func (s *Store) getBounded(ctx context.Context, ti int, t tier.Tier, k tier.Key, p []byte, off int64) (int, error) {
	buf, err := s.pool.get(max(len(p), 1))
	if err != nil {
		return 0, err
	}
	buf = buf[:len(p)]
	type result struct {
		n   int
		err error
	}
	const (
		waiting = iota
		taken
		abandoned
	)
	var state atomic.Int32
	done := make(chan result, 1)
	go func() { // owned by this call until it returns, then by itself (abandoned)
		n, err := t.Get(ctx, k, buf, off)
		if !state.CompareAndSwap(waiting, taken) {
			s.pool.put(buf[:cap(buf)])
			s.log.Warn("a local tier read answered after its deadline", "tier", tierNames[ti], "key", k.String(), "err", err)
			return
		}
		done <- result{n, err}
	}()
	timer := time.NewTimer(s.cfg.LocalReadTimeout)
	defer timer.Stop()
	var r result
	select {
	case r = <-done:
	case <-timer.C:
		if state.CompareAndSwap(waiting, abandoned) {
			s.c.readsAbandoned.Add(1)
			return 0, fmt.Errorf("%s read %v: no answer within %v (a hung device?): %w", tierNames[ti], k, s.cfg.LocalReadTimeout, tier.ErrUnavailable)
		}
		r = <-done // it answered just in time
	}
	if r.err == nil {
		copy(p, buf[:r.n]) // a failed read's partial bytes stay out of p
	}
	s.pool.put(buf[:cap(buf)])
	return r.n, r.err
}

// probeLoop probes every down tier that can be probed (tier.Prober: G3
// reads its active segment's header, G3.5 its superblock, G4 HEADs an
// object) once per probeInterval, so a tier comes back up when its device
// or backend answers again even if no request needs it meanwhile (and
// status tells the truth). Owner: the Store (s.wg); it ends with s.ctx.
func (s *Store) probeLoop() {
	defer s.wg.Done()
	tick := time.NewTicker(probeInterval)
	defer tick.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-tick.C:
		}
		for ti := tiG3; ti < nTiers; ti++ {
			p, ok := s.tierAt(ti).(tier.Prober)
			h := s.health[ti]
			if !ok || h.State() != health.Down || h.Admit(health.Get) != nil {
				continue // a nil tier is not a Prober
			}
			if s.probing[ti].Load() {
				continue // the last probe has not returned (a hung device)
			}
			err := s.probeBounded(ti, p)
			if s.ctx.Err() != nil {
				return
			}
			h.Observe(health.Get, err)
		}
	}
}

// probeBounded runs p.Probe on its own goroutine and returns within
// probeTimeout and a second, even when the device never answers (a
// probe of a hung disk reads it too, with pread): the goroutine then
// finishes on its own, and until it has, tier ti is not probed again
// (s.probing), so probes of a hung device do not pile up, and the probe
// loop, which Close waits for, never waits on it.
func (s *Store) probeBounded(ti int, p tier.Prober) error {
	s.probing[ti].Store(true)
	done := make(chan error, 1)
	go func() { // owned by this call, or by itself once abandoned
		ctx, cancel := context.WithTimeout(s.ctx, probeTimeout)
		defer cancel()
		err := p.Probe(ctx)
		s.probing[ti].Store(false)
		done <- err
	}()
	timer := time.NewTimer(probeTimeout + time.Second)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		return fmt.Errorf("%s probe: no answer within %v (a hung device?): %w", tierNames[ti], probeTimeout, tier.ErrUnavailable)
	}
}

// TierHealth is one tier's health as status and metrics show it.
type TierHealth = health.Snapshot

// Health returns the health of every configured tier below G2 (G3, G3.5,
// G4, in that order).
func (s *Store) Health() []TierHealth {
	var out []TierHealth
	for ti := tiG3; ti < nTiers; ti++ {
		if s.tierAt(ti) != nil {
			out = append(out, s.health[ti].Snapshot())
		}
	}
	return out
}

// SetBypass puts the tier named name (TierG3, TierG35, TierG4) into bypass
// or lifts it (package health): while bypassed the core neither reads
// from nor writes to it, so a reader of a block whose only copy is there
// gets EIO (not a loss) and write-back goes to the next tier. A lifted
// bypass leaves the tier down until a call to it succeeds; a tier that
// can be probed (tier.Prober) is probed at once (within probeTimeout) and
// is up again if it answers. A tier that has its own bypass (G3.5:
// interface{ SetBypass(bool) }) is told too, for its callers beside the
// core. Errors: the tier is not configured.
func (s *Store) SetBypass(name string, on bool, reason string) error {
	for ti := tiG3; ti < nTiers; ti++ {
		if tierNames[ti] != name {
			continue
		}
		t := s.tierAt(ti)
		if t == nil {
			break
		}
		if b, ok := t.(interface{ SetBypass(bool) }); ok {
			b.SetBypass(on)
		}
		h := s.health[ti]
		h.SetBypass(on, reason)
		if p, ok := t.(tier.Prober); ok && !on {
			ctx, cancel := context.WithTimeout(s.ctx, probeTimeout)
			err := p.Probe(ctx)
			cancel()
			if h.Admit(health.Get) == nil { // take the probe slot
				h.Observe(health.Get, err)
			}
		}
		return nil
	}
	return fmt.Errorf("bypass %s: no such tier configured", name)
}
