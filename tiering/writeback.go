package tiering

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/health"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// Write-back retry pauses: doubling from wbRetryMin up to wbRetryMax.
const (
	wbRetryMin = 100 * time.Millisecond
	wbRetryMax = 2 * time.Second
)

func (s *Store) enqueueWB(r bref) {
	s.wbmu.Lock()
	s.wbQueue = append(s.wbQueue, r)
	s.wbmu.Unlock()
	s.wbReady.broadcast()
}

func (s *Store) wbLen() int {
	s.wbmu.Lock()
	defer s.wbmu.Unlock()
	return len(s.wbQueue)
}

func (s *Store) popWB() (bref, bool) {
	for {
		ch := s.wbReady.c()
		s.wbmu.Lock()
		if len(s.wbQueue) > 0 {
			r := s.wbQueue[0]
			s.wbQueue[0] = bref{}
			s.wbQueue = s.wbQueue[1:]
			s.wbmu.Unlock()
			return r, true
		}
		s.wbmu.Unlock()
		select {
		case <-ch:
		case <-s.ctx.Done():
			return bref{}, false
		}
	}
}

// writeBackLoop copies dirty blocks below G2 until the store closes. Each
// worker owns one staging buffer (4 MiB, page aligned) so the object lock
// is not held during tier I/O.
func (s *Store) writeBackLoop() {
	defer s.wg.Done()
	var buf []byte
	defer func() { s.pool.put(buf) }()
	for {
		if buf == nil { // first, or handed to a put into a hung device (putToOwned)
			var err error
			if buf, err = s.pool.get(tier.MaxBlockSize); err != nil {
				s.log.Error("write-back worker cannot allocate its buffer", "err", err)
				return
			}
		}
		r, ok := s.popWB()
		if !ok {
			return
		}
		s.writeBack(r, &buf)
	}
}

// writeBack writes one dirty block below G2 (putLower: G3 unless it is
// down, full, fails the put, or is above its high watermark and admission
// predicts no reuse; else G4). When no tier takes it, writeBackFailed
// retries it (device class always; cache class while the failure is
// transient, for up to WriteTimeout) or drops the object.
//
// Identity: the put runs without the object lock, and the block may be
// dropped (truncate, TRIM) and written again meanwhile. The re-check
// compares the block state pointer and its version (the object's write
// sequence, unique across block states), never a version alone; a put
// whose block was replaced stored bytes nobody may read, so its copy is
// recorded stale and deleted before the object can be recorded clean.
func (s *Store) writeBack(r bref, bufp *[]byte) {
	buf := *bufp
	o := s.get(r.id)
	if o == nil {
		return
	}
	o.mu.Lock()
	b := o.blocks.get(r.idx)
	if b != nil {
		b.queued = false
		if !b.dirty {
			b.wb = nil // stored clean while it was queued
		}
	}
	g := (*g2block)(nil)
	if b != nil {
		g = b.g2.Load()
	}
	if o.deleted || b == nil || !b.dirty || g == nil {
		o.mu.Unlock()
		return
	}
	if o.isBusy(r.idx) {
		// Another copy of this key is being stored or deleted; whoever
		// ends it requeues the block (endBusyLocked).
		o.mu.Unlock()
		return
	}
	o.beginBusy(r.idx)
	n := o.blockLen(r.idx)
	data := buf[:n]
	copyBlock(data, g, 0)
	ver := b.version
	k := o.key(r.idx)
	dur := o.dur
	o.mu.Unlock()

	ti, err := s.putLower(s.ctx, r, k, data, bufp)
	if err != nil {
		s.writeBackFailed(o, b, r, k, dur, err)
		return
	}
	s.c.demotions[ti].Add(1)
	s.wbDone.Add(1)
	t := s.tierAt(ti)

	o.mu.Lock()
	defer func() {
		s.endBusyLocked(o, r.idx, true)
		o.mu.Unlock()
		s.space.broadcast()
	}()
	if o.deleted || o.gen != k.Gen || o.blocks.get(r.idx) != b {
		// Removed, or dropped (and maybe written again) during the put:
		// the copy in t is not the live block's.
		s.discardCopyLocked(o, r.idx, t, k)
		return
	}
	// The block now lives in t. A copy of the same key in the other tier is
	// stale: it is deleted before the object can be recorded clean, so
	// recovery never finds two different versions of one key. The delete
	// runs without the object lock (G3 may need to reclaim a segment, whose
	// hook takes object locks) while the key stays busy.
	var staleT tier.Tier
	if ti == tiG3 {
		b.in.add(tiG3)
		o.g3Seq = s.g3Puts.Add(1) // after the put returned: a sync begun from now on covers it
		o.clearStale(r.idx, staleG3)
		if b.in.has(tiG4) {
			staleT = s.g4
			b.in.drop(tiG4)
		}
	} else {
		b.in.add(tiG4)
		o.clearStale(r.idx, staleG4)
		if b.in.has(tiG3) {
			staleT = s.g3
			b.in.drop(tiG3)
		}
	}
	b.cleanVer = max(b.cleanVer, ver)
	if w := b.wb; w != nil {
		w.retries, w.failedAt = 0, time.Time{}
	}
	s.wbErr.Store(nil)
	if b.version == ver && b.dirty {
		b.dirty = false
		o.dirty--
		s.g2dirty.Add(-b.dirtyBytes())
		if b.queued {
			// Still in the write-back queue or held back: keep the entry's
			// state (a popped clean block is dropped there, writeBack).
			w := b.w()
			w.dirtySince = 0
			w.covered, w.inPlace = 0, false
			w.dirtyN = 0
		} else {
			b.wb = nil // the dirty period ended
		}
		s.noteStoredLocked(o)
		if !o.held() && b.g2.Load() != nil {
			s.g2mu.Lock()
			s.place.makeEvictable(r, s.clk.Now())
			s.g2mu.Unlock()
		}
	}
	if staleT != nil {
		o.markStale(r.idx, s.tierBit(staleT))
		o.mu.Unlock()
		err := s.deleteFrom(s.ctx, staleT, k)
		o.mu.Lock()
		if err != nil {
			s.log.Warn("delete stale copy", "tier", staleT.Name(), "key", k.String(), "err", err)
			s.gc(staleT, k) // retried; the object stays unrecorded until then
		} else if !o.deleted && o.gen == k.Gen && !s.holds(o.blocks.get(r.idx), staleT) {
			o.clearStale(r.idx, s.tierBit(staleT))
		}
	}
	if !o.deleted {
		s.signalFlushed(o) // NBD flushes wait for single blocks
		s.scheduleClean(o)
	}
}

// writeBackFailed handles a failed put of block r (version of b) of an
// object of class dur. Blocks of DurabilityDevice objects are retried
// until a tier takes them (a device never drops acknowledged writes).
// Blocks of DurabilityCache objects are retried while the tiers below are
// unavailable or full, for up to Config.WriteTimeout since the first
// failure, with pauses doubling to wbRetryMax; then, or at once for any
// other error, the object is dropped as lost and the reason counted.
func (s *Store) writeBackFailed(o *object, b *blockState, r bref, k tier.Key, dur Durability, err error) {
	if errors.Is(err, errFenced) {
		// Its key has a put or delete still in flight in a hung local
		// device (lateCalls): parked until that returns, holding no
		// worker and counting no failure (nothing was tried).
		o.mu.Lock()
		s.endBusyLocked(o, r.idx, false)
		o.mu.Unlock()
		if !s.late.park(k, r) {
			s.retryWB(r, b, o, wbRetryMin)
		}
		return
	}
	o.mu.Lock()
	w := b.w()
	w.retries++
	if w.failedAt.IsZero() {
		w.failedAt = s.clk.Now()
	}
	s.maybeStoredLocked(o, r.idx, k, err)
	tries, since := w.retries, s.clk.Since(w.failedAt)
	s.endBusyLocked(o, r.idx, false) // retryWB or lose decides what follows
	o.mu.Unlock()
	if s.ctx.Err() != nil {
		return
	}
	s.wbErr.Store(&err)
	s.logLimited("write-back failed", "key", k.String(), "err", err)
	transient := errors.Is(err, tier.ErrUnavailable) || errors.Is(err, tier.ErrNoSpace) || errors.Is(err, context.DeadlineExceeded)
	if dur == DurabilityDevice || (transient && since < s.cfg.WriteTimeout) {
		s.retryWB(r, b, o, min(wbRetryMin<<min(tries-1, 5), wbRetryMax))
		return
	}
	reason := dropNoSpace
	if !errors.Is(err, tier.ErrNoSpace) {
		reason = dropUnavailable
	}
	s.dropCount(reason)
	s.lose(r.id, fmt.Errorf("write-back of %s: %w", k, err))
}

// discardCopyLocked queues the delete of t's copy of k when the live block
// does not hold it (a put that outlived its block or its version, an
// unanswered put) and, while the object may still write k, records it
// stale so the object is not recorded clean and no NBD FLUSH returns
// before it is gone. o.mu held for writing.
func (s *Store) discardCopyLocked(o *object, idx uint32, t tier.Tier, k tier.Key) {
	if o.deleted || o.gen != k.Gen {
		s.gc(t, k) // the key is never written again
		return
	}
	if s.holds(o.blocks.get(idx), t) {
		return // the live block's own copy
	}
	o.markStale(idx, s.tierBit(t))
	s.gc(t, k)
}

// maybeStoredLocked handles a G4 put that failed without an answer (the
// object store's deadline passed, or it did not respond): the object may
// have been stored anyway, so the key's G4 copy is recorded stale and
// deleted once the key is free, unless the live block records a G4 copy
// itself. Without this, a later TRIM and FLUSH could leave that unknown
// copy for recovery to adopt. o.mu held for writing.
func (s *Store) maybeStoredLocked(o *object, idx uint32, k tier.Key, err error) {
	if s.g4 == nil || err == nil || o.deleted || o.gen != k.Gen {
		return
	}
	if !errors.Is(err, tier.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
		return
	}
	s.discardCopyLocked(o, idx, s.g4, k)
}

// holds reports whether block state b records a copy in t.
func (s *Store) holds(b *blockState, t tier.Tier) bool {
	if b == nil || t == nil {
		return false
	}
	for ti := tiG3; ti < nTiers; ti++ {
		if t == s.tierAt(ti) {
			return b.in.has(ti)
		}
	}
	return false
}

// tierBit is t's bit in object.stale (0 for tiers recovery does not scan).
func (s *Store) tierBit(t tier.Tier) uint8 {
	switch {
	case t == nil:
		return 0
	case t == s.g3:
		return staleG3
	case t == s.g4:
		return staleG4
	}
	return 0
}

// endBusyLocked ends one busy span of block idx (see object.busy) and, when
// it was the last and requeue is set, queues the block for write-back if it
// is dirty and not queued: a write-back skipped because of the span is not
// forgotten. o.mu held for writing.
func (s *Store) endBusyLocked(o *object, idx uint32, requeue bool) {
	if o.busy[idx]--; o.busy[idx] <= 0 {
		delete(o.busy, idx)
		if len(o.busy) == 0 {
			o.busy = nil // an emptied map keeps its buckets: ~200 B per file at rest
		}
	} else {
		return
	}
	if !requeue {
		return
	}
	b := o.blocks.get(idx)
	if !o.deleted && b != nil && b.dirty && !b.queued && s.ctx.Err() == nil {
		b.queued = true
		s.enqueueWB(bref{o.id, idx})
	}
}

// retryWB requeues a block after a pause.
func (s *Store) retryWB(r bref, b *blockState, o *object, pause time.Duration) {
	t := s.clk.NewTimer(pause)
	defer t.Stop()
	select {
	case <-t.C():
	case <-s.ctx.Done():
		return
	}
	o.mu.Lock()
	if cur := o.blocks.get(r.idx); cur == b && b.dirty && !b.queued {
		b.queued = true
		s.enqueueWB(r)
	}
	o.mu.Unlock()
}

// putLower stores a written-back block and returns the tier index used:
// G3 unless it is refused (down, full, admission), else G4. data is held
// in *owned, a pool buffer (putToOwned).
func (s *Store) putLower(ctx context.Context, r bref, k tier.Key, data []byte, owned *[]byte) (int, error) {
	var g3err error
	if s.g3 != nil {
		if s.g4 != nil && !s.health[tiG3].Refusing(health.Put) && !s.admitG3(r) {
			// Without G4 there is no other place: G3 takes the block and
			// reclaims its oldest segment instead.
			s.c.admissionsDenied.Add(1)
			g3err = fmt.Errorf("G3 admission refused: %w", tier.ErrNoSpace)
		} else if g3err = s.putToOwned(ctx, tiG3, k, data, s.g4 == nil, owned); g3err == nil {
			return tiG3, nil
		}
	}
	if s.g4 == nil {
		if g3err == nil {
			g3err = fmt.Errorf("no lower tier: %w", tier.ErrNoSpace)
		}
		return 0, g3err
	}
	if err := s.putTo(ctx, tiG4, k, data, false); err != nil {
		if g3err != nil {
			return 0, fmt.Errorf("%v; G4: %w", g3err, err)
		}
		return 0, err
	}
	return tiG4, nil
}

// stallError is the error of a writer that waited WriteTimeout without
// progress: tier.ErrNoSpace when the latest write-back failure was a full
// tier, else tier.ErrUnavailable.
func (s *Store) stallError(what string) error {
	if p := s.wbErr.Load(); p != nil && errors.Is(*p, tier.ErrNoSpace) {
		return fmt.Errorf("%s: no progress for %v, tiers below G2 full (%v): %w", what, s.cfg.WriteTimeout, *p, tier.ErrNoSpace)
	} else if p != nil {
		return fmt.Errorf("%s: no progress for %v (%v): %w", what, s.cfg.WriteTimeout, *p, tier.ErrUnavailable)
	}
	return fmt.Errorf("%s: no progress for %v: %w", what, s.cfg.WriteTimeout, tier.ErrUnavailable)
}

// writeBackRefused reports whether every tier write-back could store a
// block in (G3, G4) is configured and refusing puts (down or bypassed,
// health), so that no write-back can make progress until one is probed
// back up: writers waiting on the dirty bound then fail within a second
// (downError) instead of after Config.WriteTimeout. False for a store
// without tiers below G2, whose writers wait for eviction instead.
func (s *Store) writeBackRefused() bool {
	any := false
	for _, ti := range [...]int{tiG3, tiG4} {
		if s.tierAt(ti) == nil {
			continue
		}
		any = true
		if st := s.health[ti].State(); st != health.Down && st != health.Bypassed {
			return false
		}
	}
	return any
}

// downError is the error of a writer or Flush that waits on write-back
// while every tier below G2 is down (writeBackRefused): tier.ErrUnavailable
// (EIO at the front ends).
func (s *Store) downError(what string) error {
	var down []string
	for _, ti := range [...]int{tiG3, tiG4} {
		if s.tierAt(ti) != nil {
			sn := s.health[ti].Snapshot()
			down = append(down, fmt.Sprintf("%s %s (%s)", tierNames[ti], sn.State, sn.Reason))
		}
	}
	return fmt.Errorf("%s: write-back cannot progress, %s: %w", what, strings.Join(down, ", "), tier.ErrUnavailable)
}

// waitBoundFactor times Config.WriteTimeout is the longest any writer or
// Flush waits in all, even while write-back keeps making progress on other
// blocks (a writer must not starve behind others' write-back for ever).
const waitBoundFactor = 4

// waitBound is the total bound on a writer's or Flush's wait.
func (s *Store) waitBound() time.Duration { return waitBoundFactor * s.cfg.WriteTimeout }

// starveError is the error of a writer or Flush that waited waitBound while
// write-back made progress, but not enough for it: tier.ErrUnavailable
// (EIO at the front ends; the caller may retry).
func (s *Store) starveError(what string) error {
	return fmt.Errorf("%s: still waiting after %v while write-back works on other blocks: %w", what, s.waitBound(), tier.ErrUnavailable)
}

// admitG3 decides whether a block leaving G2 goes to flash: always while G3
// is under its high watermark; above it only when the frequency sketch has
// recently referenced the block at least g3ReuseMinCount times (one-hit
// blocks are not written to flash).
func (s *Store) admitG3(r bref) bool {
	u := s.g3.Usage()
	if u.CapacityBytes == 0 || float64(u.UsedBytes) < s.g3High()*float64(u.CapacityBytes) {
		return true
	}
	return s.place.policy.PredictReuse(r.hash())
}

// tierAt returns tier ti (tiG3, tiG35, tiG4), nil when not configured.
func (s *Store) tierAt(ti int) tier.Tier {
	switch ti {
	case tiG3:
		return s.g3
	case tiG35:
		return s.g35
	case tiG4:
		return s.g4
	}
	return nil
}

func (s *Store) dropCount(reason string) {
	for i, n := range dropNames {
		if n == reason {
			s.c.dropped[i].Add(1)
		}
	}
}

// Results of copyState.
const (
	copyDead = iota // no live block uses the copy: delete it
	copyLive        // the block exists at that generation and is recorded in the tier
	copyBusy        // a write of the block is in flight: decide later
)

// copyState tells what a queued deletion of t's copy of k may do. TRIM or
// truncate queue the deletion of a dropped block's copies; a block written
// again before the queue drains reuses the key, and deleting the new copy
// would lose it, while keeping a stale copy the tier flags do not know of
// could serve it after a restart. When the copy is dead and its object
// may still write the key, copyState opens a busy span of the block and
// returns the object: the caller deletes and then calls endGCDelete.
func (s *Store) copyState(t tier.Tier, k tier.Key) (*object, int) {
	o := s.get(ObjectID(k.Object))
	if o == nil {
		return nil, copyDead
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.deleted || o.gen != k.Gen || o.ns != k.Namespace {
		return nil, copyDead // the key is never written again
	}
	if o.isBusy(k.Index) {
		return nil, copyBusy
	}
	if s.holds(o.blocks.get(k.Index), t) {
		o.clearStale(k.Index, s.tierBit(t))
		return nil, copyLive
	}
	o.beginBusy(k.Index) // ended by endGCDelete
	return o, copyDead
}
