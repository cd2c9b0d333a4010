package tiering

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/health"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// Garbage collection of block copies.
//
// A copy of a block that no live block uses (its object was deleted or
// rewritten, a TRIM or truncate dropped the block, a put outlived the
// version it carried) is queued with gc and deleted in the background by
// gcLoop. Deletion does not give up while the store runs: every delete has
// its own deadline (gcDeleteTimeout, not one for a whole batch), up to
// gcParallel run at once, and a failed one is queued again with an
// exponential backoff from gcRetryMin to gcRetryMax, counted in
// Stats.GCFailed and logged as a rate-limited WARN with the number still
// pending. Copies still queued when the store closes (or at a kill -9) are
// found again at the next Open: recovery queues every G3 record and every
// listed G4 object that no live block uses (recover.go, g4recover.go), so
// the queue itself needs no persistence.
const (
	gcDeleteTimeout = 10 * time.Second
	gcRetryMin      = 100 * time.Millisecond
	gcRetryMax      = 30 * time.Second
	gcParallel      = 8
)

// gcItem is a block copy to delete from a tier in the background.
type gcItem struct {
	t     tier.Tier
	k     tier.Key
	tries int       // failed deletes so far
	due   time.Time // when a failed or busy item may be tried again
}

// gcBackoff is the pause before try n+1 after n failed deletes.
func gcBackoff(n int) time.Duration {
	d := gcRetryMin
	for i := 1; i < n && d < gcRetryMax; i++ {
		d *= 2
	}
	return min(d, gcRetryMax)
}

// gcKey names one queued copy: a key in a tier.
type gcKey struct {
	t tier.Tier
	k tier.Key
}

// gc queues deletion of k from t.
func (s *Store) gc(t tier.Tier, k tier.Key) {
	if t == nil {
		return
	}
	s.gcPending.Add(1)
	s.gcMu.Lock()
	s.gcQueue = append(s.gcQueue, gcItem{t: t, k: k})
	if s.gcKeys == nil {
		s.gcKeys = make(map[gcKey]int)
	}
	s.gcKeys[gcKey{t, k}]++
	s.gcMu.Unlock()
	s.gcReady.broadcast()
}

// gcDone forgets one queued item of it's copy (it was deleted, or found
// live again).
func (s *Store) gcDone(it gcItem) {
	s.gcPending.Add(-1)
	s.gcMu.Lock()
	gk := gcKey{it.t, it.k}
	if s.gcKeys[gk]--; s.gcKeys[gk] <= 0 {
		delete(s.gcKeys, gk)
	}
	s.gcMu.Unlock()
}

// gcQueued reports whether a deletion of t's copy of k is queued and not
// done yet (CollectGarbage does not queue it twice).
func (s *Store) gcQueued(t tier.Tier, k tier.Key) bool {
	s.gcMu.Lock()
	defer s.gcMu.Unlock()
	return s.gcKeys[gcKey{t, k}] > 0
}

// gcLoop drains the GC queue whenever something is queued, and tries
// failed or busy items again when they fall due. It owns s.gcLater until
// it returns (then CloseContext does).
func (s *Store) gcLoop() {
	defer s.wg.Done()
	timer := s.clk.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		ch := s.gcReady.c()
		now := s.clk.Now()
		keep := s.gcLater[:0]
		var due []gcItem
		for _, it := range s.gcLater {
			if now.Before(it.due) {
				keep = append(keep, it)
			} else {
				due = append(due, it)
			}
		}
		s.gcLater = keep
		if len(due) > 0 {
			s.gcMu.Lock()
			s.gcQueue = append(s.gcQueue, due...)
			s.gcMu.Unlock()
		}
		s.gcLater = append(s.gcLater, s.drainGC(s.ctx)...)
		if len(s.gcLater) > 0 {
			next := s.gcLater[0].due
			for _, it := range s.gcLater[1:] {
				if it.due.Before(next) {
					next = it.due
				}
			}
			timer.Reset(max(next.Sub(s.clk.Now()), time.Millisecond))
		}
		if !s.wake(ch, timer) {
			return
		}
	}
}

// drainGC deletes every queued block copy that no live block uses, up to
// gcParallel at a time, until the queue is empty or ctx ends. A copy of a
// key the live object may still write (its current generation) is deleted
// inside a busy span of its block, so no write-back of the key can land
// between the check and the delete; once deleted, its stale record
// (object.stale) is cleared. It returns the items to try again later: a
// failed delete (with its backoff), a block with an I/O in flight, and
// every item not tried before ctx ended.
func (s *Store) drainGC(ctx context.Context) (later []gcItem) {
	var mu sync.Mutex
	for ctx.Err() == nil {
		s.gcMu.Lock()
		q := s.gcQueue
		s.gcQueue = nil
		s.gcMu.Unlock()
		if len(q) == 0 {
			break
		}
		work := make(chan gcItem)
		var wg sync.WaitGroup
		for range min(gcParallel, len(q)) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for it := range work {
					if again, done := s.gcOne(ctx, it); !done {
						mu.Lock()
						later = append(later, again)
						mu.Unlock()
					}
				}
			}()
		}
	feed:
		for i, it := range q {
			select {
			case work <- it:
			case <-ctx.Done():
				mu.Lock()
				later = append(later, q[i:]...)
				mu.Unlock()
				break feed
			}
		}
		close(work)
		wg.Wait()
	}
	// What was queued after ctx ended stays for the next drain.
	s.gcMu.Lock()
	later = append(later, s.gcQueue...)
	s.gcQueue = nil
	s.gcMu.Unlock()
	return later
}

// gcOne tries to delete it's copy once: done when the copy is gone or is
// live again, else it returns the item with its next due time.
func (s *Store) gcOne(ctx context.Context, it gcItem) (gcItem, bool) {
	o, state := s.copyState(it.t, it.k)
	switch state {
	case copyLive:
		s.gcDone(it) // the key was written again since it was queued
		return it, true
	case copyBusy:
		it.due = s.clk.Now().Add(gcRetryMin)
		return it, false
	}
	dctx, cancel := context.WithTimeout(ctx, gcDeleteTimeout)
	err := s.deleteFrom(dctx, it.t, it.k)
	cancel()
	if o != nil {
		s.endGCDelete(o, it, err)
	}
	if err == nil {
		s.gcDone(it)
		s.c.gcDeleted.Add(1)
		return it, true
	}
	if errors.Is(err, health.ErrRefused) || errors.Is(err, errFenced) {
		// Not tried (the tier is down or bypassed, or a late call of the
		// key is out): no failure, no backoff, checked again once the
		// tier may have been probed up.
		it.due = s.clk.Now().Add(probeInterval)
		return it, false
	}
	s.c.gcFailed.Add(1)
	it.tries++
	it.due = s.clk.Now().Add(gcBackoff(it.tries))
	if ctx.Err() == nil {
		s.logLimited("gc delete failed, will retry", "tier", it.t.Name(), "key", it.k.String(),
			"tries", it.tries, "pending", s.gcPending.Load(), "err", err)
	}
	return it, false
}

// endGCDelete ends the busy span copyState opened for a delete of it's copy
// in live object o and clears the copy's stale record when the delete
// worked (a failed one stays recorded stale, so the object is not recorded
// clean, until a retry works).
func (s *Store) endGCDelete(o *object, it gcItem, err error) {
	idx, bit := it.k.Index, s.tierBit(it.t)
	o.mu.Lock()
	defer o.mu.Unlock()
	s.endBusyLocked(o, idx, true)
	if err != nil || o.deleted || o.gen != it.k.Gen {
		return
	}
	if bit != 0 && o.stale[idx]&bit != 0 {
		if o.clearStale(idx, bit) {
			s.scheduleClean(o)
		}
		s.signalFlushed(o) // an NBD FLUSH may wait for this one copy
	}
}
