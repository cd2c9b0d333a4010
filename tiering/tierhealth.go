package tiering

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
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
		// A local tier (G3, G3.5) is probed by the core only: a data call
		// let through as a probe could hang in its device.
		var t tier.Tier
		switch ti {
		case tiG3:
			t = cfg.G3
		case tiG35:
			t = cfg.G35
		}
		_, prober := t.(tier.Prober)
		local := t != nil && prober
		hs[ti] = health.New(tierNames[ti], health.Config{FullBackoff: fullBackoff, ProbeInterval: probeInterval, ProbeOnly: local},
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
	return s.putToOwned(ctx, ti, k, data, last, nil)
}

// putToOwned is putTo for data held in *owned, a pool buffer the caller
// hands over for the call (nil: data is the caller's, and a put into a
// local tier copies it first). A put into a local tier then writes data
// in place; if it is given up past its deadline, the buffer goes with it
// (*owned is set to nil, and the late put gives it back to the pool), so
// the caller never writes into a buffer a late put still reads.
func (s *Store) putToOwned(ctx context.Context, ti int, k tier.Key, data []byte, last bool, owned *[]byte) error {
	lateG3 := false
	if s.late.n.Load() > 0 {
		if err := s.late.fences(ti, k, s.deviceKey(k)); err != nil {
			return err
		}
		lateG3 = ti != tiG3 && s.late.inG3(k)
	}
	h, t := s.health[ti], s.tierAt(ti)
	op := health.Put
	if last {
		op = health.PutLast
	}
	if err := h.Admit(op); err != nil {
		return err
	}
	var err error
	if ti == tiG3 || ti == tiG35 {
		err = s.putBounded(ctx, ti, t, k, data, owned)
	} else {
		err = t.Put(ctx, k, data) // an object store's requests have their own deadlines
	}
	h.Observe(health.Put, err)
	if err == nil && lateG3 {
		s.lateG3Stale(k)
	}
	return err
}

// isLocal reports whether t is a local tier (G3, G3.5): one whose calls
// end in pread, pwrite or fdatasync on a device, which no context
// interrupts, so the core bounds them itself (bounded).
func (s *Store) isLocal(t tier.Tier) bool {
	return t != nil && (t == s.g3 || t == s.g35)
}

// Outcomes of a bounded call (bounded's state).
const (
	boundedWaiting = iota
	boundedTaken
	boundedAbandoned
)

// bounded runs call on its own goroutine and waits for it at most d: true
// when call returned in time (what it wrote is then the caller's to read),
// false when it did not. Past d, abandon runs first, on the caller's
// goroutine, before bounded returns; the goroutine then calls late once
// call returns, and never before abandon has run, so whatever call uses
// (buffers, the key) must stay valid until late runs, not until bounded
// returns: the caller hands those to late. A local tier's pread, pwrite
// and fdatasync cannot be interrupted, and a call into a hung device
// would otherwise hold its caller (and the object lock or busy span it
// holds) for as long as the device is hung.
func bounded(d time.Duration, call, abandon, late func()) bool {
	return boundedUntil(nil, d, call, abandon, late)
}

// boundedUntil is bounded that also gives up when stop is closed (nil:
// never), as it does at d.
func boundedUntil(stop <-chan struct{}, d time.Duration, call, abandon, late func()) bool {
	var state atomic.Int32
	done := make(chan struct{})
	handedOver := make(chan struct{})
	go func() { // owned by bounded until it returns, then by itself (abandoned)
		call()
		if !state.CompareAndSwap(boundedWaiting, boundedTaken) {
			<-handedOver
			late()
			return
		}
		close(done)
	}()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-done:
		return true
	case <-stop:
	case <-timer.C:
	}
	if state.CompareAndSwap(boundedWaiting, boundedAbandoned) {
		abandon()
		close(handedOver)
		return false
	}
	<-done // it answered just in time
	return true
}

// bounded is the package's bounded for a call into local tier ti (tiG3,
// tiG35), counting the call in s.lateIO[ti] from its deadline until it
// returns: while one is out, closing that tier would wait for it
// (Store.BlockedIn).
func (s *Store) bounded(ti int, d time.Duration, call, abandon, late func()) bool {
	return s.boundedUntil(ti, nil, d, call, abandon, late)
}

// boundedUntil is Store.bounded that also gives up when stop is closed.
func (s *Store) boundedUntil(ti int, stop <-chan struct{}, d time.Duration, call, abandon, late func()) bool {
	return boundedUntil(stop, d, call, func() { s.lateIO[ti].Add(1); abandon() }, func() { defer s.lateIO[ti].Add(-1); late() })
}

// BlockedIn reports whether a call into tier name (TierG3, TierG35) that
// the core gave up on past its deadline (Config.LocalReadTimeout,
// LocalWriteTimeout, a probe's) has not returned yet: its device is hung,
// and closing the tier would wait for that call, so the tier's owner
// leaves it open at a stop (the process exit releases it, as after a
// crash). False for other names and unconfigured tiers.
func (s *Store) BlockedIn(name string) bool {
	for ti := tiG3; ti < nTiers; ti++ {
		if tierNames[ti] == name {
			return s.lateIO[ti].Load() > 0
		}
	}
	return false
}

// lateCalls are the block keys with a put or delete of a local tier still
// in flight past its deadline (bounded), by tier. Until that call
// returns, no other put or delete of the key goes to the same tier (a
// newer one could be ordered before it there: putTo, deleteFrom refuse
// with tier.ErrUnavailable at once; write-back and GC retry later).
//
// The late call lands whenever the device answers, and at the next
// start-up G3's copy of a key wins over G4's (recover.go). A block of a
// cache-class object is still written back to G4 meanwhile: its G3 copy
// is recorded stale (Store.lateG3Stale), so the object's record names the
// block G4-wins (object.g4Wins) and recovery takes the G4 copy. A block of
// a device-class object (an NBD export, whose recovery keeps every copy
// found) is fenced in every tier instead: it stays dirty in G2 until the
// late call returns, and a Flush of its object fails at once
// (Store.fencedBlockLocked). A late call into G3.5 fences the key in
// G3.5 only: recovery never adopts a G3.5 copy, and the copy it lands is
// recorded stale (lateLanded).
type lateCalls struct {
	n     atomic.Int32 // len(keys), read without mu on every put
	bytes atomic.Int64 // payload bytes of the late G3 puts: dirty bytes write-back cannot move
	mu    sync.Mutex
	keys  map[lateKey]int
	// parked are the blocks whose write-back was refused for a fenced key:
	// queued again when the key's last late G3 call returns (done), not
	// retried meanwhile, so they hold no write-back worker.
	parked map[tier.Key][]bref
}

// lateKey is a key with a late call in flight in local tier ti (tiG3,
// tiG35).
type lateKey struct {
	ti int
	k  tier.Key
}

// add fences k in local tier ti for one more late call, of a put of n
// bytes (0 for a delete).
func (l *lateCalls) add(ti int, k tier.Key, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.keys == nil {
		l.keys = map[lateKey]int{}
	}
	lk := lateKey{ti, k}
	if l.keys[lk] == 0 {
		l.n.Add(1)
	}
	l.keys[lk]++
	if ti == tiG3 {
		l.bytes.Add(int64(n))
	}
}

// done ends one late call of k of n bytes in tier ti (add must have run
// for it) and, when it was k's last in G3, returns the blocks parked on
// k.
func (l *lateCalls) done(ti int, k tier.Key, n int) []bref {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ti == tiG3 {
		l.bytes.Add(-int64(n))
	}
	lk := lateKey{ti, k}
	if l.keys[lk]--; l.keys[lk] > 0 {
		return nil
	}
	delete(l.keys, lk)
	l.n.Add(-1)
	if ti != tiG3 {
		return nil
	}
	p := l.parked[k]
	delete(l.parked, k)
	return p
}

// park records r, a block whose write-back was refused because k is
// fenced by a late G3 call, to be queued again by done; false when k is
// no longer fenced (its late call returned meanwhile: the caller queues r
// itself).
func (l *lateCalls) park(k tier.Key, r bref) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.keys[lateKey{tiG3, k}] <= 0 {
		return false
	}
	if l.parked == nil {
		l.parked = map[tier.Key][]bref{}
	}
	l.parked[k] = append(l.parked[k], r)
	return true
}

// lateDone ends a late call of k (n payload bytes) in tier ti and queues
// the blocks parked on it for write-back again.
func (s *Store) lateDone(ti int, k tier.Key, n int) {
	for _, r := range s.late.done(ti, k, n) {
		o := s.get(r.id)
		if o == nil {
			continue
		}
		o.mu.Lock()
		if b := o.blocks.get(r.idx); !o.deleted && b != nil && b.dirty && !b.queued && s.ctx.Err() == nil {
			b.queued = true
			s.enqueueWB(r)
		}
		o.mu.Unlock()
	}
}

// fences returns errLate when a put or delete of k into tier ti must
// wait for a late call: one of k in ti itself, or, for a put of a block of
// a device-class object (dev), one of k in G3, which fences such a key in
// every tier; nil otherwise.
func (l *lateCalls) fences(ti int, k tier.Key, dev bool) error {
	if l.n.Load() == 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.keys[lateKey{ti, k}] > 0:
		return errLate(ti, k)
	case dev && l.keys[lateKey{tiG3, k}] > 0:
		return errLate(tiG3, k)
	}
	return nil
}

// inG3 reports whether a late G3 call of k is out.
func (l *lateCalls) inG3(k tier.Key) bool {
	if l.n.Load() == 0 {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.keys[lateKey{tiG3, k}] > 0
}

// deviceKey reports whether k is a block of a device-class object (or of
// no live object, which is fenced as strictly). Not with an object lock
// held (it takes s.mu).
func (s *Store) deviceKey(k tier.Key) bool {
	o := s.get(ObjectID(k.Object))
	return o == nil || o.dur == DurabilityDevice // dur is fixed at creation
}

// lateG3Stale records k's G3 copy stale after k was put into another tier
// while a late G3 call of k was out: the late call may land an older
// version in G3, which recovery must not take (the object's record then
// names the block G4-wins, object.g4Wins), and GC deletes it once G3
// answers.
func (s *Store) lateG3Stale(k tier.Key) {
	o := s.get(ObjectID(k.Object))
	if o == nil {
		s.gc(s.g3, k)
		return
	}
	o.mu.Lock()
	s.discardCopyLocked(o, k.Index, s.g3, k)
	o.mu.Unlock()
}

// lateLanded handles a put of k into local tier t that succeeded after the
// core gave up on it: a copy the core does not know of, which recovery
// would prefer over G4's (recover.go: G3 wins) even once a newer version
// of the block is in G4. Unless the live block records a copy of k in t
// itself (the late one replaced it: its write-back deletes or replaces
// it, as any stale copy), the copy is recorded stale and deleted by GC,
// and until then the object is not recorded clean (discardCopyLocked), so
// a crash meanwhile loses the object rather than serving the old bytes.
func (s *Store) lateLanded(t tier.Tier, k tier.Key) {
	if s.closed.Load() {
		return // the next start-up's recovery finds the object unrecorded or the copy garbage
	}
	o := s.get(ObjectID(k.Object))
	if o == nil {
		s.gc(t, k)
		return
	}
	o.mu.Lock()
	s.discardCopyLocked(o, k.Index, t, k)
	o.mu.Unlock()
}

// fencedBlockLocked returns a dirty block of o whose key has a late call
// in flight (lateCalls): it cannot be written back until the hung device
// answers. o.mu held.
func (s *Store) fencedBlockLocked(o *object) (uint32, bool) {
	if s.late.n.Load() == 0 {
		return 0, false
	}
	for idx, b := range o.blocks.all() {
		// Write-back of the block can go nowhere while a late G3 call of
		// its key is out: not to G3 itself, nor to G4 (a device-class
		// block's, or there is no G4).
		if b.dirty && (o.dur == DurabilityDevice || s.g4 == nil) && s.late.inG3(o.key(idx)) {
			return idx, true
		}
	}
	return 0, false
}

// fencedError is the error of a Flush of object id while one of its dirty
// blocks is fenced (fencedBlockLocked), nil otherwise.
func (s *Store) fencedError(id ObjectID) error {
	o := s.get(id)
	if o == nil {
		return nil
	}
	o.mu.Lock()
	idx, ok := s.fencedBlockLocked(o)
	k := o.key(idx)
	o.mu.Unlock()
	if !ok {
		return nil
	}
	return fmt.Errorf("flush object %d: block %d: %w", id, idx, errLate(tiG3, k))
}

// errFenced marks errLate's errors: nothing was sent to the tier.
var errFenced = errors.New("an earlier call for it into a hung local tier has not returned")

// errLate is the error of a put or delete refused because a call of key k
// into hung local tier ti has not returned (lateCalls): errFenced and
// tier.ErrUnavailable, naming ti.
func errLate(ti int, k tier.Key) error {
	return fmt.Errorf("%v: %w (%s): %w", k, errFenced, tierNames[ti], tier.ErrUnavailable)
}

// putBounded is a put into a local tier (G3, G3.5) that returns within
// Config.LocalWriteTimeout even when the device never answers (bounded).
// The put writes data in place when the caller hands over the pool buffer
// holding it (owned, see putToOwned), else a copy, so that a put that
// answers after its deadline never writes bytes the caller has changed
// since: it stores k's bytes as they were, or nothing. Past the deadline
// it fails with tier.ErrUnavailable (five failed calls in a row take the
// tier down, and then no writer waits on it) and counts
// Stats.LocalWritesAbandoned; k stays fenced until the late put returns
// (lateCalls), and a copy it landed is recorded stale and deleted
// (lateLanded).
func (s *Store) putBounded(ctx context.Context, ti int, t tier.Tier, k tier.Key, data []byte, owned *[]byte) error {
	var buf, pooled []byte // what the put writes; the pool buffer holding it
	if owned != nil && *owned != nil {
		buf, pooled = data, *owned
	} else {
		var err error
		if pooled, err = s.pool.get(max(len(data), 1)); err != nil {
			return err
		}
		buf = pooled[:len(data)]
		copy(buf, data)
	}
	var perr error
	held := 0 // dirty bytes the late put keeps from write-back; set past the deadline only (deviceKey takes s.mu)
	if !s.bounded(ti, s.cfg.LocalWriteTimeout,
		func() { perr = t.Put(ctx, k, buf) },
		func() {
			if ti == tiG3 && (s.g4 == nil || s.deviceKey(k)) { // fenced from every tier (fencedBlockLocked)
				held = len(data)
			}
			s.late.add(ti, k, held)
			if owned != nil {
				*owned = nil // the late put has it now
			}
		},
		func() {
			s.pool.put(pooled[:cap(pooled)])
			if perr == nil {
				s.lateLanded(t, k) // before the fence goes: no put of k may come between
			}
			s.lateDone(ti, k, held) // its block may be written back now
			s.log.Warn("a local tier write answered after its deadline", "tier", tierNames[ti], "key", k.String(), "err", perr)
		}) {
		s.c.writesAbandoned.Add(1)
		return fmt.Errorf("%s put %v: no answer within %v (a hung device?): %w", tierNames[ti], k, s.cfg.LocalWriteTimeout, tier.ErrUnavailable)
	}
	if owned == nil || *owned == nil {
		s.pool.put(pooled[:cap(pooled)]) // the copy
	}
	return perr
}

// deleteFrom deletes block k from tier t, bounded by
// Config.LocalWriteTimeout when t is local (a tombstone is a pwrite):
// past it, tier.ErrUnavailable, counted in Stats.LocalWritesAbandoned
// (the caller retries as for any failed delete). A local tier that is
// down or bypassed is not asked (tier.ErrUnavailable with
// health.ErrRefused at once, nothing left behind in its device). A
// delete's outcome does not feed the tier's health: GC's failing deletes
// must not take down a tier whose reads and puts work (its readers would
// get EIO).
func (s *Store) deleteFrom(ctx context.Context, t tier.Tier, k tier.Key) error {
	if !s.isLocal(t) {
		return t.Delete(ctx, k)
	}
	ti := tiG3
	if t == s.g35 {
		ti = tiG35
	}
	if err := s.late.fences(ti, k, false); err != nil {
		return err
	}
	// While an earlier delete of this tier has not returned, none is
	// tried (GC retries later): deletes do not pile up goroutines in a
	// hung device.
	late := &s.lateDeletes[ti]
	if late.Load() > 0 {
		return fmt.Errorf("%s delete %v: an earlier delete has not returned (a hung device?): %w", t.Name(), k, tier.ErrUnavailable)
	}
	if s.health[ti].Refusing(health.PutLast) { // down or bypassed, not full
		return fmt.Errorf("%s delete %v: tier %s: %w: %w", t.Name(), k, s.health[ti].State(), health.ErrRefused, tier.ErrUnavailable)
	}
	var err error
	if !s.bounded(ti, s.cfg.LocalWriteTimeout, func() { err = t.Delete(ctx, k) },
		func() { s.late.add(ti, k, 0); late.Add(1) }, func() { late.Add(-1); s.lateDone(ti, k, 0) }) {
		s.c.writesAbandoned.Add(1)
		err = fmt.Errorf("%s delete %v: no answer within %v (a hung device?): %w", t.Name(), k, s.cfg.LocalWriteTimeout, tier.ErrUnavailable)
	}
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
	var n int
	var rerr error
	if !s.bounded(ti, s.cfg.LocalReadTimeout,
		func() { n, rerr = t.Get(ctx, k, buf, off) },
		func() {},
		func() {
			s.pool.put(buf[:cap(buf)])
			s.log.Warn("a local tier read answered after its deadline", "tier", tierNames[ti], "key", k.String(), "err", rerr)
		}) {
		s.c.readsAbandoned.Add(1)
		return 0, fmt.Errorf("%s read %v: no answer within %v (a hung device?): %w", tierNames[ti], k, s.cfg.LocalReadTimeout, tier.ErrUnavailable)
	}
	if rerr == nil {
		copy(p, buf[:n]) // a failed read's partial bytes stay out of p
	}
	s.pool.put(buf[:cap(buf)])
	return n, rerr
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
			if !ok || h.State() != health.Down || h.AdmitProbe() != nil {
				continue // a nil tier is not a Prober
			}
			if s.probing[ti].Load() {
				continue // the last probe has not returned (a hung device)
			}
			err := s.probeBounded(ti, p)
			if s.ctx.Err() != nil {
				return
			}
			h.Observe(health.Probe, err)
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
	ctx, cancel := context.WithTimeout(s.ctx, probeTimeout)
	var err error
	if !s.bounded(ti, probeTimeout+time.Second, func() { err = p.Probe(ctx) }, func() {},
		func() { cancel(); s.probing[ti].Store(false) }) {
		return fmt.Errorf("%s probe: no answer within %v (a hung device?): %w", tierNames[ti], probeTimeout, tier.ErrUnavailable)
	}
	cancel()
	s.probing[ti].Store(false)
	return err
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
		if p, ok := t.(tier.Prober); ok && !on && !s.probing[ti].Load() {
			err := s.probeBounded(ti, p) // a hung device does not hold the caller
			if h.AdmitProbe() == nil {   // take the probe slot
				h.Observe(health.Probe, err)
			}
		}
		return nil
	}
	return fmt.Errorf("bypass %s: no such tier configured", name)
}
