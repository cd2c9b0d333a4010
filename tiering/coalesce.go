package tiering

import (
	"sync"
	"sync/atomic"
	"time"
)

// DefaultWriteBackDelay is Config.WriteBackDelay's default.
const DefaultWriteBackDelay = 30 * time.Millisecond

// delayMaxAge times Config.WriteBackDelay bounds how long a block being
// filled (written front to back, in pieces) is held back after its first
// write.
const delayMaxAge = 10

// rewriteMaxAge times Config.WriteBackDelay is how long a block rewritten
// in place (a write that did not extend what was written of it from its
// start: NBD's random writes, a file block read up and patched) is held
// back after its first write, whether or not it is idle: 3 s at the default
// delay. Random rewrites of one block come further apart than the idle
// delay, so holding such a block until it is idle stored it once per write,
// the whole block each time (16x the bytes of a 4 KiB write to a 64 KiB
// export block). The page cache holds dirty pages 30 s
// (dirty_expire_centisecs) and bcache's writeback_delay is 30 s; the dirty
// bound and Flush bound this one as they bound the others.
const rewriteMaxAge = 100

// Coalescing write-back. A write makes its block dirty; storing the block
// at once means a block written in eight 4 KiB pieces (NBD, or a file
// written in small writes) is stored eight times, each time whole. So a
// dirty block is held back (the delayed list) until it has not been written
// for Config.WriteBackDelay, and only then queued for write-back, as the
// page cache's dirty expiry and bcache's writeback delay do. It is queued at
// once instead when
//   - the write filled the block (nothing left to coalesce),
//   - Flush, Expedite or Close asks for its object or for every object,
//   - it has been dirty for delayMaxAge × WriteBackDelay (a block written
//     without pause is still stored regularly), or for rewriteMaxAge ×
//     WriteBackDelay if it was rewritten in place (held by age, not until
//     idle: see rewriteMaxAge).
//
// When dirty bytes pass half their bound (the background watermark: writers
// would soon wait at the bound) the oldest held-back blocks are queued,
// about as many bytes as the excess, once the write-back queue has drained
// (the page cache's dirty_background_bytes): so a working set of rewritten
// blocks larger than the watermark is still coalesced, oldest first, rather
// than every new dirty block being stored at once.
//
// Holding back changes no durability contract: Flush (fsync, NBD FLUSH,
// FUA) expedites the object's held-back blocks before it waits, so it
// returns exactly when it did before; a crash loses the same unflushed
// writes it always could.
//
// The list is in order of entry; an entry's due time only moves later
// (the block is written again), so the owner goroutine (delayLoop) sleeps
// until the front entry is due and requeues entries that are not due yet.

// delayed is the store's list of held-back blocks.
type delayed struct {
	mu    sync.Mutex
	items []delayItem // items[head:] are the entries, oldest first
	head  int
	ready *signal // broadcast when the front may have become due
	// seq numbers the entries (wbState.delaySeq), store-wide.
	seq atomic.Uint64
	all atomic.Bool // expedite every held-back block now
	// pressed: dirty bytes were over the watermark when delayLoop last
	// looked (it polls while so); writers wake it only on a crossing.
	pressed atomic.Bool
}

// delayItem is one entry: block r, due at unix ns due, valid while the
// block's delaySeq is still seq.
type delayItem struct {
	r   bref
	due int64
	seq uint64
	n   int64 // the block's dirty bytes when held back (for the watermark)
}

// coalescing reports whether write-back is held back at all.
func (s *Store) coalescing() bool { return s.cfg.WriteBackDelay > 0 && !s.volatile }

// queueDirtyLocked queues dirty block b (ref r) for write-back: at once
// when urgent or not coalescing, else held back (see above). A block held
// back and written again is held back longer; one already queued for
// write-back stays queued. o.mu held for writing.
func (s *Store) queueDirtyLocked(o *object, b *blockState, r bref, urgent bool) {
	now := s.clk.Now().UnixNano()
	w := b.w()
	if w.dirtySince == 0 {
		w.dirtySince = now
	}
	if !urgent && s.coalescing() && !s.closed.Load() && !s.delay.all.Load() {
		due := min(now+int64(s.cfg.WriteBackDelay), w.dirtySince+delayMaxAge*int64(s.cfg.WriteBackDelay))
		if w.inPlace {
			due = w.dirtySince + rewriteMaxAge*int64(s.cfg.WriteBackDelay)
		}
		switch {
		case !b.queued:
			b.queued = true
			w.delayUntil = due
			w.delaySeq = s.delay.seq.Add(1)
			s.pushDelayed(delayItem{r, due, w.delaySeq, w.dirtyN})
		case w.delayUntil != 0:
			w.delayUntil = max(w.delayUntil, due)
		}
		if s.g2dirty.Load() > s.limits().Dirty/2 && s.delay.pressed.CompareAndSwap(false, true) {
			s.delay.ready.broadcast() // crossed the watermark: release the oldest
		}
		return
	}
	switch {
	case !b.queued:
		b.queued = true
		s.enqueueWB(r)
	case w.delayUntil != 0:
		w.delayUntil = 0 // its delayed entry is skipped
		s.enqueueWB(r)
	}
}

// expediteLocked queues every held-back block of o for write-back now.
// o.mu held for writing.
func (s *Store) expediteLocked(o *object) {
	for idx, b := range o.blocks.all() {
		if b.heldBack() {
			b.wb.delayUntil = 0
			s.enqueueWB(bref{o.id, idx})
		}
	}
}

// Expedite queues the held-back dirty blocks of object id for write-back
// now (a file's last writer closed it: nothing more is coming) and marks
// the object sealed (ObjectInfo.Sealed) until its next change. Unknown ids
// are ignored.
func (s *Store) Expedite(id ObjectID) {
	o := s.get(id)
	if o == nil {
		return
	}
	o.mu.Lock()
	if !o.deleted {
		o.sealed = true
		s.expediteLocked(o)
		s.noteStoredLocked(o) // already clean (a G2-only store, or nothing written)
	}
	o.mu.Unlock()
}

// expediteAll makes delayLoop queue every held-back block now (dirty bytes
// high, G2 full of dirty blocks, Close). Until the list is empty new dirty
// blocks are not held back either.
func (s *Store) expediteAll() {
	if !s.coalescing() {
		return
	}
	s.delay.all.Store(true)
	s.delay.ready.broadcast()
}

func (s *Store) pushDelayed(it delayItem) {
	s.delay.mu.Lock()
	first := len(s.delay.items) == s.delay.head
	s.delay.items = append(s.delay.items, it)
	s.delay.mu.Unlock()
	if first {
		s.delay.ready.broadcast()
	}
}

// delayLoop moves held-back blocks to the write-back queue when due.
func (s *Store) delayLoop() {
	defer s.wg.Done()
	timer := s.clk.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		ch := s.delay.ready.c()
		wait := s.releaseDue()
		if wait > 0 {
			timer.Reset(wait)
		}
		if !s.wake(ch, timer) {
			return
		}
	}
}

// releaseDue queues the due entries (every entry when expediteAll was
// asked; the oldest, about the excess in bytes, when dirty bytes are over
// the watermark and the write-back queue is empty) and returns how long
// until it should run again (0: list empty).
func (s *Store) releaseDue() time.Duration {
	for {
		all := s.delay.all.Load()
		now := s.clk.Now().UnixNano()
		excess := s.g2dirty.Load() - s.limits().Dirty/2
		pressed := excess > 0
		s.delay.pressed.Store(pressed)
		if pressed && s.wbLen() > 0 {
			excess = 0 // what was released last is still being stored
		}
		s.delay.mu.Lock()
		d := &s.delay
		var due, early []delayItem // early: not due, released for the watermark
	scan:
		for ; d.head < len(d.items); d.head++ {
			it := d.items[d.head]
			switch {
			case all || it.due <= now:
				due = append(due, it)
			case excess > 0:
				excess -= it.n
				early = append(early, it)
			default:
				break scan
			}
		}
		if d.head > 1024 && d.head > len(d.items)/2 {
			d.items = append(d.items[:0], d.items[d.head:]...) // compact
			d.head = 0
		}
		left := len(d.items) - d.head
		var next int64
		if left > 0 {
			next = d.items[d.head].due
		}
		if all && left == 0 {
			s.delay.all.Store(false)
		}
		s.delay.mu.Unlock()
		for _, it := range due {
			s.releaseOne(it, all, now)
		}
		for _, it := range early {
			s.releaseOne(it, true, now)
		}
		if len(due)+len(early) == 0 || all {
			if left == 0 {
				return 0
			}
			if pressed {
				return time.Millisecond // look again once the queue drains
			}
			return max(time.Duration(next-now), time.Millisecond)
		}
	}
}

// releaseOne queues block it.r for write-back if the entry is current and
// due (or force), or holds it back again until its later due time.
func (s *Store) releaseOne(it delayItem, force bool, now int64) {
	o := s.get(it.r.id)
	if o == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	b := o.blocks.get(it.r.idx)
	if o.deleted || b == nil || !b.heldBack() || b.wb.delaySeq != it.seq {
		return // written back, dropped or expedited since
	}
	if !force && b.wb.delayUntil > now {
		s.pushDelayed(delayItem{it.r, b.wb.delayUntil, it.seq, it.n})
		return
	}
	b.wb.delayUntil = 0
	s.enqueueWB(it.r)
}
