package tiering

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/health"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// maxObjectSize bounds object sizes (bytes): block indexes are uint32.
const maxObjectSize = int64(1) << 50

// ReadAt reads up to len(p) bytes of the object at byte offset off. It
// returns fewer bytes only at the end of the object (0, nil at or past it).
// Holes read as zeros. Blocks missing from G2 are read from G3, else G4
// (verified by the tier's CRC32C) and promoted into G2 when admission
// allows. Errors: ErrInvalid (negative offset), ErrNotExist, ErrLost (a block
// is gone from every tier: the object was removed), ctx errors.
func (s *Store) ReadAt(ctx context.Context, id ObjectID, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("%w: negative offset %d", ErrInvalid, off)
	}
	o := s.get(id)
	if o == nil {
		return 0, ErrNotExist
	}
	if len(p) > 0 {
		s.touched(id) // outside o.mu: the ranking takes its own lock
	}
	o.mu.RLock()
	if o.deleted {
		o.mu.RUnlock()
		return 0, ErrNotExist
	}
	if off >= o.size || len(p) == 0 {
		o.mu.RUnlock()
		return 0, nil
	}
	end := min(off+int64(len(p)), o.size)
	s.c.readRequests.Add(1)
	allG2 := true
	var n int
	var lostErr error
	for pos := off; pos < end; {
		idx := uint32(pos / int64(o.bs))
		boff := int(pos % int64(o.bs))
		cnt := int(min(int64(o.bs-boff), end-pos))
		dst := p[n : n+cnt]
		src, err := s.readBlock(ctx, o, idx, boff, dst, pos+int64(cnt) < end)
		if err != nil {
			if errors.Is(err, tier.ErrNotFound) || errors.Is(err, tier.ErrCorrupt) {
				lostErr = fmt.Errorf("block %d: %w", idx, err)
				break
			}
			o.mu.RUnlock()
			return n, err
		}
		if src != tiG2 {
			allG2 = false
		}
		n += cnt
		pos += int64(cnt)
	}
	o.mu.RUnlock()
	if lostErr != nil {
		s.c.blockReads.Add(1) // a read that missed: the hit ratio counts it
		s.c.blockMisses.Add(1)
		s.lose(id, lostErr)
		return n, fmt.Errorf("read object %d: %w: %v", id, ErrLost, lostErr)
	}
	if allG2 {
		s.c.readRequestHits.Add(1)
	}
	return n, nil
}

// readBlock fills dst with bytes [boff, boff+len(dst)) of block idx and
// returns the tier index that served it (tiG2 also for holes). more says
// the read goes on past this block. o.mu is held for reading.
func (s *Store) readBlock(ctx context.Context, o *object, idx uint32, boff int, dst []byte, more bool) (int, error) {
	b := o.blocks.get(idx)
	if b == nil {
		if o.awaitG4 {
			return 0, errAwaitG4 // the hole may be a block only G4 holds
		}
		clear(dst)
		return tiG2, nil
	}
	r := bref{o.id, idx}
	g := b.g2.Load()
	src := tiG2
	if g == nil {
		blen := o.blockLen(idx)
		if s.admitG2(r, blen) {
			// A batched G4 read (restore.go) for a read that looks
			// sequential (the file's first block, the block before it
			// in G2, or a read going on past this block; a lone block
			// read elsewhere costs one block's GET), with room up to
			// G2's high watermark.
			room := int64(-1)
			if more || idx == 0 || o.blocks.get(idx-1) != nil && o.blocks.get(idx-1).g2.Load() != nil {
				room = int64(s.limits().High*float64(s.limits().Bytes)) - s.g2used.Load() - int64(blen)
			}
			var ok bool
			var err error
			if g, src, ok, err = s.promoteRunLocked(ctx, o, idx, room, false); !ok {
				g, src, err = s.promoteLocked(ctx, o, idx, b)
			}
			if err != nil {
				return 0, err
			}
		}
	}
	if g != nil {
		copyBlock(dst, g, boff)
		s.usedPrestaged(g)
		s.touch(r, !b.dirty && !o.held())
		s.countHit(src, len(dst)) // a promoted block is a hit of the tier it came from
		return src, nil
	}
	// Not admitted to G2: read the range straight from the lower tier.
	src, err := s.readLower(ctx, o, idx, b, dst, int64(boff))
	if err != nil {
		return 0, err
	}
	s.touch(r, false)
	s.countHit(src, len(dst))
	return src, nil
}

// copyBlock copies g's bytes at boff into dst; bytes past g.n are zeros.
func copyBlock(dst []byte, g *g2block, boff int) {
	n := 0
	if boff < g.n {
		n = copy(dst, g.buf[boff:g.n])
	}
	clear(dst[n:])
}

func (s *Store) countHit(src, n int) {
	s.c.blockReads.Add(1)
	s.c.byteReads.Add(int64(n))
	s.c.blockHits[src].Add(1)
	s.c.byteHits[src].Add(int64(n))
}

// readLower reads dst from block idx at offset off in the first tier of
// the chain that holds it (G3, then G3.5, then G4). Bytes
// past the stored length read as zeros. Returns the serving tier index, or
// tier.ErrNotFound / tier.ErrCorrupt when no tier has a good copy. o.mu is
// held (read or write).
func (s *Store) readLower(ctx context.Context, o *object, idx uint32, b *blockState, dst []byte, off int64) (int, error) {
	k := o.key(idx)
	var firstErr error
	for ti := tiG3; ti < nTiers; ti++ { // in tier order: the fastest copy first
		t := s.tierAt(ti)
		if !b.in.has(ti) || t == nil {
			continue
		}
		t0 := time.Now()
		n, err := s.getFrom(ctx, ti, k, dst, off)
		if err == nil {
			s.noteRead(ti, time.Since(t0))
			clear(dst[n:])
			return ti, nil
		}
		if errors.Is(err, tier.ErrCorrupt) {
			s.c.crcErrors.Add(1)
			s.log.Error("corrupt block quarantined", "tier", t.Name(), "key", k.String(), "err", err)
		} else if !errors.Is(err, tier.ErrNotFound) {
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			if !errors.Is(err, health.ErrRefused) { // a refusal was not a read: its state change was logged
				s.log.Warn("tier read failed", "tier", t.Name(), "key", k.String(), "err", err)
			}
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	if firstErr == nil {
		firstErr = tier.ErrNotFound
	}
	if !errors.Is(firstErr, tier.ErrNotFound) && !errors.Is(firstErr, tier.ErrCorrupt) {
		// A tier is unavailable: an I/O error for this read, not a loss.
		return 0, fmt.Errorf("read %s: %w", k, firstErr)
	}
	return 0, firstErr
}

// promoteLocked copies block idx from a lower tier into a new G2 buffer and
// installs it, returning the installed copy (another reader's, if it won
// the race) and the tier index it was read from. o.mu is held for reading
// or writing.
func (s *Store) promoteLocked(ctx context.Context, o *object, idx uint32, b *blockState) (*g2block, int, error) {
	if o.mf != nil {
		return s.promoteMemLocked(ctx, o, idx, b)
	}
	blen := o.blockLen(idx)
	g, err := s.allocBlock(o, idx, max(blen, 1))
	if err != nil {
		return nil, 0, err
	}
	src, err := s.readLower(ctx, o, idx, b, g.buf[:blen], 0)
	if err != nil {
		// Never installed: another reader's copy may be in the eviction
		// order by now, and must stay there.
		s.releaseG2(g, o.pinned)
		return nil, 0, err
	}
	g.n = blen
	if !b.g2.CompareAndSwap(nil, g) {
		if g.mf != nil {
			// Another reader promoted the same bytes into the same pages
			// of the memory file: only the accounting is undone.
			s.unaccountG2(g, o.pinned)
		} else {
			s.releaseG2(g, o.pinned)
		}
		return b.g2.Load(), tiG2, nil
	}
	s.c.promotions.Add(1)
	return g, src, nil
}

// promote brings block idx of o into G2 (prestage). When force is set it
// may fill G2 up to its budget rather than the high watermark.
func (s *Store) promote(ctx context.Context, o *object, idx uint32, force bool) error {
	o.mu.RLock()
	defer o.mu.RUnlock()
	if o.deleted {
		return ErrNotExist
	}
	b := o.blocks.get(idx)
	if b == nil || b.g2.Load() != nil {
		return nil
	}
	blen := int64(o.blockLen(idx))
	if s.g2used.Load()+blen > s.limits().Bytes && !o.pinned {
		return fmt.Errorf("prestage: G2 full: %w", tier.ErrNoSpace)
	}
	room := s.limits().Bytes - s.g2used.Load() - blen // a batched G4 read fills G2 up to its budget
	if o.pinned {
		room = restoreRunBytes
	}
	g, src, ok, err := s.promoteRunLocked(ctx, o, idx, room, true)
	if !ok {
		g, src, err = s.promoteLocked(ctx, o, idx, b)
	}
	if err != nil {
		return err
	}
	if src != tiG2 { // brought up by this prestage, not by a reader racing it
		s.notePrestaged(g)
	}
	s.touch(bref{o.id, idx}, !b.dirty && !o.held())
	return nil
}

// WriteAt writes p at byte offset off, extending the object as needed. The
// bytes land in G2 and are visible to readers when WriteAt returns; they are
// written back below G2 in the background (see Flush). WriteAt waits while
// G2 is over budget or dirty bytes are over their bound. Errors:
// ErrInvalid, tier.ErrTooLarge (offset past 1 PiB), ErrNotExist, ErrLost
// (a partially overwritten block could not be read), ctx errors.
func (s *Store) WriteAt(ctx context.Context, id ObjectID, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("%w: negative offset %d", ErrInvalid, off)
	}
	if off+int64(len(p)) > maxObjectSize {
		return 0, fmt.Errorf("%w: write past %d bytes", tier.ErrTooLarge, maxObjectSize)
	}
	if len(p) == 0 {
		if s.get(id) == nil {
			return 0, ErrNotExist
		}
		return 0, nil
	}
	if s.closed.Load() {
		return 0, ErrClosed
	}
	if o := s.get(id); o != nil {
		o.writers.Add(1)
		defer func() { o.lastWrite.Store(s.clk.Now().UnixNano()); o.writers.Add(-1) }()
	}
	if err := s.waitRoom(ctx, int64(len(p))); err != nil {
		return 0, err
	}
	s.touched(id)
	o, err := s.lockLive(id)
	if err != nil {
		return 0, err
	}
	if o.awaitG4 {
		o.mu.Unlock()
		return 0, errAwaitG4
	}
	o.sealed = false
	if err := s.markMetaDirty(o); err != nil {
		o.mu.Unlock()
		return 0, err
	}
	end := off + int64(len(p))
	madeFile := s.maybeMemFileLocked(o, end)
	var n int
	var werr error
	for pos := off; pos < end; {
		idx := uint32(pos / int64(o.bs))
		boff := int(pos % int64(o.bs))
		cnt := int(min(int64(o.bs-boff), end-pos))
		if werr = s.writeBlock(ctx, o, idx, boff, p[n:n+cnt], end); werr != nil {
			break
		}
		n += cnt
		pos += int64(cnt)
		if pos > o.size {
			o.setSizeLocked(pos)
		}
	}
	o.mu.Unlock()
	if madeFile {
		s.askTrim()
	}
	if werr != nil && (errors.Is(werr, tier.ErrNotFound) || errors.Is(werr, tier.ErrCorrupt)) {
		s.lose(id, werr)
		return n, fmt.Errorf("write object %d: %w: %v", id, ErrLost, werr)
	}
	return n, werr
}

// markMetaDirty persists the object's "dirty" state before its bytes
// change, so a crash before write-back drops the object instead of serving
// older bytes. o.mu held for writing.
func (s *Store) markMetaDirty(o *object) error {
	if o.metaDirty || s.volatile {
		return nil // no record yet, or already recorded dirty
	}
	if err := s.meta.put(o.id, o.record(stateDirty)); err != nil {
		return fmt.Errorf("persist object %d: %w", o.id, err)
	}
	o.metaDirty = true
	return nil
}

// writeBlock copies data into block idx at boff. newEnd is the object size
// once the whole write is done (to size the buffer). o.mu held for writing.
func (s *Store) writeBlock(ctx context.Context, o *object, idx uint32, boff int, data []byte, newEnd int64) error {
	r := bref{o.id, idx}
	b := o.blocks.get(idx)
	if b == nil {
		b = &blockState{}
		o.blocks.set(idx, b)
	}
	need := boff + len(data)
	g := b.g2.Load()
	if g == nil {
		oldLen := 0
		if b.in.has(tiG3) || b.in.has(tiG4) {
			oldLen = o.blockLen(idx)
		}
		ng, err := s.allocBlock(o, idx, max(need, oldLen))
		if err != nil {
			return err
		}
		if oldLen > 0 && (boff > 0 || len(data) < oldLen) {
			// Partial overwrite of a block held below G2: read-modify-write.
			if _, err := s.readLower(ctx, o, idx, b, ng.buf[:oldLen], 0); err != nil {
				s.freeG2(r, ng, false, o.pinned)
				return err
			}
			ng.n = oldLen
		}
		b.g2.Store(ng)
		g = ng
	} else if g.mf != nil {
		if err := s.growMemBlockLocked(o, b, g, need); err != nil {
			return err
		}
	} else if len(g.buf) < need {
		ng, err := s.allocG2(need, o.pinned)
		if err != nil {
			return err
		}
		s.moveG2(b, g, ng)
		s.freeG2(r, g, false, o.pinned)
		g = ng
	}
	if boff > g.n {
		clear(g.buf[g.n:boff])
	}
	if err := g.fill(boff, data); err != nil {
		return err
	}
	g.n = max(g.n, need)
	if b.in.has(tiG35) {
		// The pool holds the old bytes under the same key: it is stale
		// now (the G3.5 tier withdraws it from the shared index).
		b.in.drop(tiG35)
		s.gc(s.g35, o.key(r.idx))
	}
	o.wseq++
	if s.volatile {
		// Nothing to write back to: the block is as clean as it will
		// ever be, and evictable (whole objects, see evictOne).
		b.version = o.wseq
		s.touch(r, !o.held())
		return nil
	}
	b.version = o.wseq
	// covered and inPlace are reset where the dirty period ends (writeBack).
	w := b.w()
	if boff <= w.covered && need > w.covered {
		w.covered = need
	} else {
		w.inPlace = true
	}
	// A block written whole since it was last stored has nothing left to
	// coalesce: stored at once. A part rewritten in a block that was whole
	// already (NBD, read-modify-write) is held back like any partial write.
	s.markDirtyLocked(o, b, r, g, w.covered >= o.bs)
	s.touch(r, false)
	return nil
}

// markDirtyLocked makes block r (state b, G2 copy g) dirty, out of the
// eviction order and queued for write-back. o.mu held for writing.
func (s *Store) markDirtyLocked(o *object, b *blockState, r bref, g *g2block, urgent bool) {
	if !b.dirty {
		b.dirty = true
		o.dirty++
		w := b.w()
		w.dirtyN = int64(len(g.buf))
		s.g2dirty.Add(w.dirtyN)
		s.g2mu.Lock()
		s.place.remove(r)
		s.g2mu.Unlock()
	}
	s.queueDirtyLocked(o, b, r, urgent)
}

// Truncate sets the object's size. Size 0 starts a new generation (every
// old block is freed); shrinking frees whole blocks past the end and zeroes
// the tail of the last one; growing adds a hole. A shrink whose last
// block's tail cannot be zeroed (its copy unreadable: a hung or failing
// tier) fails and changes nothing. Errors: ErrInvalid, ErrNotExist,
// ErrLost, the read's error (tier.ErrUnavailable), ctx errors.
func (s *Store) Truncate(ctx context.Context, id ObjectID, size int64) error {
	if size < 0 || size > maxObjectSize {
		return fmt.Errorf("%w: size %d", ErrInvalid, size)
	}
	o, err := s.lockLive(id)
	if err != nil {
		return err
	}
	if o.awaitG4 {
		o.mu.Unlock()
		return errAwaitG4
	}
	o.sealed = false
	s.adoptIfWrittenLocked(o)
	if size == o.size && size != 0 {
		o.mu.Unlock()
		return nil
	}
	if size == 0 {
		for idx := range o.blocks.all() {
			s.dropBlockLocked(o, idx)
		}
		if err := s.markMetaDirty(o); err != nil {
			o.mu.Unlock()
			return err
		}
		o.gen++
		o.stale = nil // copies of the old generation's keys are garbage, never read
		o.setSizeLocked(0)
		if o.mf != nil {
			if err := o.mf.setSize(0); err != nil {
				s.log.Error("memory file truncate", "object", o.id, "err", err)
			}
		}
		s.scheduleClean(o)
		o.mu.Unlock()
		return nil
	}
	if err := s.markMetaDirty(o); err != nil {
		o.mu.Unlock()
		return err
	}
	if size < o.size {
		last := uint32((size - 1) / int64(o.bs))
		tail := int(size - int64(last)*int64(o.bs))
		if b := o.blocks.get(last); b != nil && tail < o.blockLen(last) {
			// Zero the bytes past the new end inside the last block by
			// rewriting its tail: read-modify-write through G2. First, so
			// that a read that fails (the only copy in a hung or dead
			// tier) leaves the object as it was: the blocks past the end
			// still there, its size unchanged. Dropping them first made a
			// failed truncate read as holes inside the old size.
			zeros := make([]byte, o.blockLen(last)-tail)
			err = s.writeBlock(ctx, o, last, tail, zeros, o.size)
			if g := b.g2.Load(); err == nil && g != nil {
				g.n = min(g.n, tail)
			}
		}
		if err == nil {
			for idx := range o.blocks.all() {
				if idx > last {
					s.dropBlockLocked(o, idx)
				}
			}
		}
	}
	if err == nil {
		o.setSizeLocked(size)
		if o.mf != nil {
			// After the bytes past the new end were dropped (a shrink) or
			// before any write into the new range (a growth).
			err = o.mf.setSize(size)
		}
	}
	s.scheduleClean(o) // recorded clean again even when nothing changed (markMetaDirty ran)
	o.mu.Unlock()
	if err != nil && (errors.Is(err, tier.ErrNotFound) || errors.Is(err, tier.ErrCorrupt)) {
		s.lose(id, err)
		return fmt.Errorf("truncate object %d: %w: %v", id, ErrLost, err)
	}
	return err
}

// persistCleanLocked writes the object's clean record and wakes Flush
// waiters. o.mu held for writing; o.clean() must hold.
func (s *Store) persistCleanLocked(o *object) error {
	if err := s.meta.put(o.id, o.record(stateClean)); err != nil {
		return fmt.Errorf("persist object %d: %w", o.id, err)
	}
	o.metaDirty = false
	o.persisted = true
	s.signalFlushed(o)
	return nil
}

// signalFlushed wakes Flush waiters of o. o.mu held for writing.
func (s *Store) signalFlushed(o *object) {
	if o.flushed != nil {
		close(o.flushed)
		o.flushed = nil
	}
}

// flushWaitLocked returns the channel signalFlushed closes next, made on
// first use. o.mu held for writing.
func (o *object) flushWaitLocked() <-chan struct{} {
	if o.flushed == nil {
		o.flushed = make(chan struct{})
	}
	return o.flushed
}

// Flush returns once every block of the object written before the call is
// stored below G2 (G3 or G4) and the object's record is persisted, so the
// bytes survive a kill -9 of the daemon; when the G3 tier supports Sync,
// also a power cut. Errors: ErrNotExist, ErrLost, ctx errors.
func (s *Store) Flush(ctx context.Context, id ObjectID) error {
	if o := s.get(id); o != nil && o.dur == DurabilityDevice {
		return s.flushDevice(ctx, o)
	}
	stall := time.NewTimer(s.cfg.WriteTimeout)
	defer stall.Stop()
	tick := time.NewTicker(time.Second) // to notice every tier below G2 going down
	defer tick.Stop()
	start, lastDone := time.Now(), s.wbDone.Load()
	adopted := false
	for {
		o := s.get(id)
		if o == nil {
			return ErrNotExist
		}
		o.mu.Lock()
		if o.deleted {
			o.mu.Unlock()
			return ErrNotExist
		}
		if !adopted {
			s.adoptIfWrittenLocked(o) // fsync covers passthrough writes made so far
			adopted = true
		}
		if o.clean() {
			var err error
			if o.metaDirty && !s.volatile {
				err = s.persistCleanLocked(o)
			}
			needSync := o.g3Seq > s.g3Synced.Load()
			o.mu.Unlock()
			if err != nil || !needSync {
				return err // nothing of it written to G3 since the latest sync: none to wait for (nor to fail on)
			}
			return s.syncTiers(ctx)
		}
		s.expediteLocked(o)
		ch := o.flushWaitLocked()
		o.mu.Unlock()
		s.wbReady.broadcast()
		select {
		case <-ch: // a block of the object was stored: progress
			if time.Since(start) >= s.waitBound() {
				return s.starveError(fmt.Sprintf("flush object %d", id))
			}
			stall.Reset(s.cfg.WriteTimeout)
		case <-tick.C:
			if s.writeBackRefused() {
				return s.downError(fmt.Sprintf("flush object %d", id))
			}
			if err := s.fencedError(id); err != nil {
				return err
			}
		case <-stall.C:
			if d := s.wbDone.Load(); d != lastDone && time.Since(start) < s.waitBound() { // others' blocks drain first
				lastDone = d
				stall.Reset(s.cfg.WriteTimeout)
				continue
			} else if d != lastDone {
				return s.starveError(fmt.Sprintf("flush object %d", id))
			}
			return s.stallError(fmt.Sprintf("flush object %d", id))
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// syncer is implemented by tiers that can make written blocks durable
// against power loss.
type syncer interface {
	Sync(ctx context.Context) error
}

// syncTiers asks G3 to make the blocks written to it durable against
// power loss (its Sync: fdatasync), bounded by Config.LocalWriteTimeout.
// A G3 that is down or bypassed is not asked (tier.ErrUnavailable at
// once): what a flush wrote there can then be neither made durable nor
// read. Flush calls it only for an object written back to G3 since the
// latest sync that succeeded (object.g3Seq, Store.g3Synced).
func (s *Store) syncTiers(ctx context.Context) error {
	sy, ok := s.g3.(syncer)
	if !ok {
		return nil
	}
	// One sync at a time past its deadline: while an abandoned one has not
	// returned, fsync fails at once instead of leaving one more goroutine
	// in the hung device per call.
	if s.syncLate.Load() {
		return fmt.Errorf("sync %s: an earlier sync has not returned (a hung device?): %w", s.g3.Name(), tier.ErrUnavailable)
	}
	h := s.health[tiG3]
	if err := h.Admit(health.PutLast); err != nil { // refused when down or bypassed
		return fmt.Errorf("sync %s: %w", s.g3.Name(), err)
	}
	upTo := s.g3Puts.Load() // write-backs that returned before the sync began
	var err error
	if !s.bounded(tiG3, s.cfg.LocalWriteTimeout, func() { err = sy.Sync(ctx) },
		func() { s.syncLate.Store(true) }, func() { s.syncLate.Store(false) }) {
		s.c.writesAbandoned.Add(1)
		err = fmt.Errorf("no answer within %v (a hung device?): %w", s.cfg.LocalWriteTimeout, tier.ErrUnavailable)
	}
	h.Observe(health.Get, err)
	switch {
	case err == nil:
		for {
			cur := s.g3Synced.Load()
			if upTo <= cur || s.g3Synced.CompareAndSwap(cur, upTo) {
				return nil
			}
		}
	case errors.Is(err, tier.ErrUnavailable):
		return fmt.Errorf("sync %s: %w", s.g3.Name(), err)
	}
	// The device's error (EIO, or ENOENT for a G3 directory deleted
	// under the daemon) is not the caller's: not an fs.ErrNotExist for
	// the file being flushed, which admin would report as "no such path".
	return fmt.Errorf("sync %s: %v: %w", s.g3.Name(), err, tier.ErrUnavailable)
}

// Discard makes the byte range [off, off+length) of the object read as
// zeros without changing its size: whole blocks inside the range are freed
// from every tier (they become holes); partial blocks at the edges are
// zeroed in place, first: an edge whose copy cannot be read (a hung or
// failing tier) fails the call before any whole block is freed. It is
// what NBD TRIM and WRITE_ZEROES and FUSE fallocate(PUNCH_HOLE) map to.
// Errors: ErrInvalid, ErrNotExist, ErrLost, the read's error
// (tier.ErrUnavailable), ctx errors.
func (s *Store) Discard(ctx context.Context, id ObjectID, off, length int64) error {
	if off < 0 || length < 0 {
		return fmt.Errorf("%w: discard offset %d length %d", ErrInvalid, off, length)
	}
	if err := s.waitRoom(ctx, 0); err != nil {
		return err
	}
	o, err := s.lockLive(id)
	if err != nil {
		return err
	}
	if o.awaitG4 {
		o.mu.Unlock()
		return errAwaitG4
	}
	o.sealed = false
	s.adoptIfWrittenLocked(o)
	end := min(off+length, o.size)
	if off >= end {
		o.mu.Unlock()
		return nil
	}
	if err := s.markMetaDirty(o); err != nil {
		o.mu.Unlock()
		return err
	}
	// The partial blocks at the edges are zeroed first (a read-modify-write
	// that fails, the only copy unreadable, leaves the object as it was),
	// then the whole blocks inside are dropped.
	for _, whole := range [...]bool{false, true} {
		for pos := off; pos < end && err == nil; {
			idx := uint32(pos / int64(o.bs))
			boff := int(pos % int64(o.bs))
			cnt := int(min(int64(o.bs-boff), end-pos))
			if b := o.blocks.get(idx); b != nil {
				switch all := boff == 0 && cnt >= o.blockLen(idx); {
				case all && whole:
					s.dropBlockLocked(o, idx)
				case !all && !whole:
					err = s.writeBlock(ctx, o, idx, boff, make([]byte, cnt), o.size)
				}
			}
			pos += int64(cnt)
		}
	}
	if o.mf != nil && err == nil {
		// Passthrough readers read the memory file: the whole blocks just
		// dropped must read as zeros there too (the edges were zeroed
		// through G2 above). One punch for the whole run of them.
		bs := int64(o.bs)
		lo, hi := (off+bs-1)/bs*bs, end/bs*bs
		if end == o.size {
			hi = end // the object's last block, partial, was dropped whole
		}
		o.mf.punchData(lo, hi-lo)
	}
	s.scheduleClean(o) // recorded clean again even when nothing changed (markMetaDirty ran)
	o.mu.Unlock()
	if err != nil && (errors.Is(err, tier.ErrNotFound) || errors.Is(err, tier.ErrCorrupt)) {
		s.lose(id, err)
		return fmt.Errorf("discard object %d: %w: %v", id, ErrLost, err)
	}
	return err
}

// flushDevice is Flush for objects of class DurabilityDevice (NBD
// exports): it waits only for the blocks dirty at the call (a device's
// FLUSH covers writes completed before it, and a busy writer must not
// starve it), and makes sure the object has a record, so recovery finds it
// (see recoverDevice).
func (s *Store) flushDevice(ctx context.Context, o *object) error {
	o.mu.Lock()
	if o.deleted {
		o.mu.Unlock()
		return ErrNotExist
	}
	if !o.persisted && !s.volatile {
		if err := s.meta.put(o.id, o.record(stateDirty)); err != nil {
			o.mu.Unlock()
			return fmt.Errorf("persist export %d: %w", o.id, err)
		}
		o.persisted = true
	}
	s.expediteLocked(o)
	snap := make(map[uint32]uint64, o.dirty)
	for idx, b := range o.blocks.all() {
		if b.dirty {
			snap[idx] = b.version
		}
	}
	// Copies of blocks a TRIM or WRITE_ZEROES dropped must be deleted
	// before the FLUSH is answered: recovery of an export adopts every
	// copy of its keys it finds.
	for idx := range o.stale {
		if _, ok := snap[idx]; !ok {
			snap[idx] = 0
		}
	}
	o.mu.Unlock()
	if len(snap) > 0 {
		s.wbReady.broadcast()
	}
	stall := time.NewTimer(s.cfg.WriteTimeout)
	defer stall.Stop()
	tick := time.NewTicker(time.Second) // to notice every tier below G2 going down
	defer tick.Stop()
	start, lastDone := time.Now(), s.wbDone.Load()
	for {
		o.mu.Lock()
		if o.deleted {
			o.mu.Unlock()
			return ErrNotExist
		}
		for idx, v := range snap {
			// A stale copy of the key (TRIM then rewrite) must be gone too:
			// recovery of an export prefers G3's copy.
			if b := o.blocks.get(idx); (b == nil || !b.dirty || b.cleanVer >= v) && o.stale[idx] == 0 {
				delete(snap, idx)
			}
			if v == 0 && o.stale[idx] == 0 {
				delete(snap, idx) // a dropped block's copies are gone
			}
		}
		needSync := o.g3Seq > s.g3Synced.Load() // written to G3 since the latest sync
		ch := o.flushWaitLocked()
		o.mu.Unlock()
		if len(snap) == 0 {
			if !needSync {
				return nil
			}
			return s.syncTiers(ctx)
		}
		select {
		case <-ch:
			if time.Since(start) >= s.waitBound() {
				return s.starveError(fmt.Sprintf("flush export %d", o.id))
			}
			stall.Reset(s.cfg.WriteTimeout)
		case <-tick.C:
			if s.writeBackRefused() {
				return s.downError(fmt.Sprintf("flush export %d", o.id))
			}
			if err := s.fencedError(o.id); err != nil {
				return err
			}
		case <-stall.C:
			if d := s.wbDone.Load(); d != lastDone && time.Since(start) < s.waitBound() {
				lastDone = d
				stall.Reset(s.cfg.WriteTimeout)
				continue
			} else if d != lastDone {
				return s.starveError(fmt.Sprintf("flush export %d", o.id))
			}
			return s.stallError(fmt.Sprintf("flush export %d", o.id))
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
