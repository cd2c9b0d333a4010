package tiering

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// wbRetries is how many times write-back retries a block whose lower tiers
// all failed (unavailable) before the block's object is dropped.
const wbRetries = 20

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
	buf, err := s.pool.get(tier.MaxBlockSize)
	if err != nil {
		s.log.Error("write-back worker cannot allocate its buffer", "err", err)
		return
	}
	defer s.pool.put(buf)
	for {
		r, ok := s.popWB()
		if !ok {
			return
		}
		s.writeBack(r, buf)
	}
}

// writeBack writes one dirty block below G2: to G3 when G3 is below its high
// watermark or admission predicts reuse, else to G4; G3 full → G4. When no
// tier takes it the object is dropped (files) or the block is retried
// (NBD exports, and transient failures up to wbRetries times).
func (s *Store) writeBack(r bref, buf []byte) {
	o := s.get(r.id)
	if o == nil {
		return
	}
	o.mu.Lock()
	b := o.blocks[r.idx]
	if b != nil {
		b.queued = false
	}
	g := (*g2block)(nil)
	if b != nil {
		g = b.g2.Load()
	}
	if o.deleted || b == nil || !b.dirty || g == nil {
		o.mu.Unlock()
		return
	}
	if b.wbBusy {
		// Another worker is storing an older version; it requeues the
		// block when it finishes if the block is still dirty.
		o.mu.Unlock()
		return
	}
	b.wbBusy = true
	n := o.blockLen(r.idx)
	data := buf[:n]
	copyBlock(data, g, 0)
	ver := b.version
	k := o.key(r.idx)
	kind := o.kind
	o.mu.Unlock()

	ti, err := s.putLower(s.ctx, r, k, data)
	defer s.requeueIfDirty(o, b, r)
	if err != nil {
		if s.ctx.Err() != nil {
			return
		}
		s.log.Warn("write-back failed", "key", k.String(), "err", err)
		o.mu.Lock()
		b.retries++
		tries := b.retries
		o.mu.Unlock()
		// Export blocks are retried until a tier takes them; file blocks
		// while a tier is unavailable, up to wbRetries times.
		if kind == KindNBD || (errors.Is(err, tier.ErrUnavailable) && tries <= wbRetries) {
			s.retryWB(r, b, o)
			return
		}
		reason := dropNoSpace
		if !errors.Is(err, tier.ErrNoSpace) {
			reason = dropUnavailable
		}
		s.dropCount(reason)
		s.lose(r.id, fmt.Errorf("write-back of %s: %w", k, err))
		return
	}
	s.c.demotions[ti].Add(1)
	t := s.tierAt(ti)

	o.mu.Lock()
	b = o.blocks[r.idx]
	if o.deleted || o.gen != k.Gen || b == nil {
		o.mu.Unlock()
		s.gc(t, k)
		return
	}
	// The block now lives in t. A copy of the same key in the other tier is
	// stale: it is deleted before the object can be recorded clean, so
	// recovery never finds two different versions of one key. The delete
	// runs without the object lock (G3 may need to reclaim a segment, whose
	// hook takes object locks).
	var staleT tier.Tier
	if ti == tiG3 {
		b.inG3 = true
		if b.inG4 {
			staleT, b.inG4 = s.g4, false
		}
	} else {
		b.inG4 = true
		if b.inG3 {
			staleT, b.inG3 = s.g3, false
		}
	}
	b.cleanVer = max(b.cleanVer, ver)
	b.retries = 0
	if b.version == ver {
		b.dirty = false
		o.dirty--
		s.g2dirty.Add(-b.dirtyN)
		b.dirtyN = 0
		if !o.pinned && b.g2.Load() != nil {
			s.g2mu.Lock()
			s.place.makeEvictable(r, time.Now())
			s.g2mu.Unlock()
		}
	}
	if staleT != nil {
		o.mu.Unlock()
		if err := staleT.Delete(s.ctx, k); err != nil {
			s.log.Warn("delete stale copy", "tier", staleT.Name(), "key", k.String(), "err", err)
		}
		o.mu.Lock()
	}
	if !o.deleted {
		s.signalFlushed(o) // NBD flushes wait for single blocks
		s.scheduleClean(o)
	}
	o.mu.Unlock()
	s.space.broadcast()
}

// retryWB requeues a block after a pause (bounded for files).
func (s *Store) retryWB(r bref, b *blockState, o *object) {
	select {
	case <-time.After(100 * time.Millisecond):
	case <-s.ctx.Done():
		return
	}
	o.mu.Lock()
	if cur := o.blocks[r.idx]; cur == b && b.dirty && !b.queued {
		b.queued = true
		s.enqueueWB(r)
	}
	o.mu.Unlock()
}

// putLower stores a written-back block and returns the tier index used.
func (s *Store) putLower(ctx context.Context, r bref, k tier.Key, data []byte) (int, error) {
	var g3err error
	if s.g3 != nil {
		if s.admitG3(r) {
			g3err = s.g3.Put(ctx, k, data)
			if g3err == nil {
				return tiG3, nil
			}
		} else {
			s.c.admissionsDenied.Add(1)
			g3err = fmt.Errorf("G3 admission refused: %w", tier.ErrNoSpace)
		}
	}
	if s.g4 == nil {
		if g3err == nil {
			g3err = fmt.Errorf("no lower tier: %w", tier.ErrNoSpace)
		}
		return 0, g3err
	}
	if err := s.g4.Put(ctx, k, data); err != nil {
		if g3err != nil {
			return 0, fmt.Errorf("%v; G4: %w", g3err, err)
		}
		return 0, err
	}
	return tiG4, nil
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

func (s *Store) tierAt(ti int) tier.Tier {
	if ti == tiG3 {
		return s.g3
	}
	return s.g4
}

func (s *Store) dropCount(reason string) {
	for i, n := range dropNames {
		if n == reason {
			s.c.dropped[i].Add(1)
		}
	}
}

// gc queues deletion of k from t.
func (s *Store) gc(t tier.Tier, k tier.Key) {
	if t == nil {
		return
	}
	s.gcMu.Lock()
	s.gcQueue = append(s.gcQueue, gcItem{t, k})
	s.gcMu.Unlock()
	s.gcReady.broadcast()
}

func (s *Store) gcLoop() {
	defer s.wg.Done()
	var retry <-chan time.Time
	for {
		ch := s.gcReady.c()
		if deferred := s.drainGC(); len(deferred) > 0 {
			s.gcMu.Lock()
			s.gcQueue = append(s.gcQueue, deferred...)
			s.gcMu.Unlock()
			retry = time.After(100 * time.Millisecond)
		}
		select {
		case <-ch:
		case <-retry:
		case <-s.ctx.Done():
			return
		}
	}
}

// drainGC deletes every queued block copy that no live block uses (errors
// are logged: a missed delete leaves garbage that the next start
// collects). Copies of a block with a write in flight are returned, to be
// decided once the write has finished and the tier flags are true again.
func (s *Store) drainGC() (deferred []gcItem) {
	for {
		s.gcMu.Lock()
		q := s.gcQueue
		s.gcQueue = nil
		s.gcMu.Unlock()
		if len(q) == 0 {
			return deferred
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		for _, it := range q {
			switch s.copyState(it.t, it.k) {
			case copyLive:
				continue // the key was written again since it was queued
			case copyBusy:
				deferred = append(deferred, it)
				continue
			}
			if err := it.t.Delete(ctx, it.k); err != nil {
				s.log.Debug("gc delete", "tier", it.t.Name(), "key", it.k.String(), "err", err)
			}
		}
		cancel()
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
// could serve it after a restart.
func (s *Store) copyState(t tier.Tier, k tier.Key) int {
	o := s.get(ObjectID(k.Object))
	if o == nil {
		return copyDead
	}
	o.mu.RLock()
	defer o.mu.RUnlock()
	b := o.blocks[k.Index]
	if o.deleted || o.gen != k.Gen || o.ns != k.Namespace || b == nil {
		return copyDead
	}
	if b.wbBusy {
		return copyBusy
	}
	if (t == s.g3 && b.inG3) || (t == s.g4 && b.inG4) || (t == s.g35 && b.inG35) {
		return copyLive
	}
	return copyDead
}

// requeueIfDirty ends a write-back of b: it clears wbBusy and queues the
// block again when it is still dirty and not queued (written meanwhile,
// or a failed attempt that is not being retried elsewhere).
func (s *Store) requeueIfDirty(o *object, b *blockState, r bref) {
	o.mu.Lock()
	defer o.mu.Unlock()
	b.wbBusy = false
	if !o.deleted && o.blocks[r.idx] == b && b.dirty && !b.queued && s.ctx.Err() == nil {
		b.queued = true
		s.enqueueWB(r)
	}
}
