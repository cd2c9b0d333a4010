package tiering

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// evictLoop keeps G2 under its high watermark: when used bytes cross it,
// clean unpinned blocks leave G2 in policy order until used bytes are under
// the low watermark.
func (s *Store) evictLoop() {
	defer s.wg.Done()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		ch := s.needEvict.c()
		lim := s.limits()
		high := int64(lim.High * float64(lim.Bytes))
		low := int64(lim.Low * float64(lim.Bytes))
		if want := s.roomWanted.Load(); want > 0 && s.g2used.Load()+want > lim.Bytes {
			// A writer waits for more room than the watermarks leave.
			high = min(high, lim.Bytes-want)
			low = min(low, high)
		}
		if s.g2used.Load() > high {
			var kept []bref
			for s.g2used.Load() > low && s.ctx.Err() == nil {
				s.g2mu.Lock()
				r, ok := s.place.victim()
				s.g2mu.Unlock()
				if !ok {
					s.expediteAll() // dirty blocks held back become evictable sooner
					break           // everything left is dirty or pinned
				}
				if !s.evictOne(r) {
					kept = append(kept, r)
				}
			}
			if len(kept) > 0 {
				// Victims kept in G2 (objects being written in a G2-only
				// store) go back to the eviction order.
				now := s.clk.Now()
				s.g2mu.Lock()
				for _, r := range kept {
					s.place.makeEvictable(r, now)
				}
				s.g2mu.Unlock()
			}
			s.space.broadcast()
		}
		select {
		case <-ch:
		case <-tick.C:
		case <-s.ctx.Done():
			return
		}
	}
}

// evictOne drops block r's G2 copy if it is still clean and unpinned. A
// block whose only lower copy is in G4 is first written to G3 when
// admission predicts reuse (the block is warm: it was read while in G2).
// G3 writes happen without the object lock (G3's reclaim hook takes object
// locks), so the block is re-checked afterwards.
//
// It returns false only for a victim that stays evictable but was kept for
// now (see evictObject); the caller gives it back to the eviction order.
func (s *Store) evictOne(r bref) bool {
	o := s.get(r.id)
	if o == nil {
		return true
	}
	if s.volatile {
		return s.evictObject(o)
	}
	s.evictBlock(o, r)
	return true
}

// evictBlock drops block r's G2 copy (see evictOne).
func (s *Store) evictBlock(o *object, r bref) {
	o.mu.Lock()
	b := o.blocks.get(r.idx)
	if o.deleted || b == nil || b.dirty || o.held() || b.g2.Load() == nil {
		o.mu.Unlock()
		return
	}
	if b.in.empty() {
		// Cannot happen for a clean block; keep it rather than lose it.
		o.mu.Unlock()
		s.log.Error("clean G2 block without a lower copy", "object", r.id, "block", r.idx)
		return
	}
	if !b.in.has(tiG3) && s.g3 != nil && !o.isBusy(r.idx) {
		if s.place.policy.PredictReuse(r.hash()) && s.admitG3(r) {
			k, n := o.key(r.idx), o.blockLen(r.idx)
			buf, err := s.pool.get(n)
			if err == nil {
				copyBlock(buf[:n], b.g2.Load(), 0)
				ver := b.version
				o.beginBusy(r.idx) // no write-back of a newer version may race this put
				o.mu.Unlock()
				ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
				err = s.putToOwned(ctx, tiG3, k, buf[:n], s.g4 == nil, &buf)
				cancel()
				s.pool.put(buf) // nil when a late put into a hung G3 kept it
				o.mu.Lock()
				live := !o.deleted && o.gen == k.Gen && o.blocks.get(r.idx) == b
				switch {
				case err == nil && live && b.version == ver:
					b.in.add(tiG3)
					o.clearStale(r.idx, staleG3)
					s.c.demotions[tiG3].Add(1)
				case err == nil:
					// Rewritten, dropped or removed meanwhile: the copy is stale.
					s.discardCopyLocked(o, r.idx, s.g3, k)
				}
				s.endBusyLocked(o, r.idx, true)
				if !live || b.dirty || o.held() {
					o.mu.Unlock()
					return
				}
			}
		}
	}
	if g := b.g2.Load(); g != nil {
		b.g2.Store(nil)
		s.freeG2(r, g, false, false)
		s.c.evictions[tiG2].Add(1)
		if g.mf != nil && g.mf.exposed && o.retirable() {
			// Its pages were not freed (see memFile.exposed): let the
			// whole memory file go so they can be.
			s.retireMemFileLocked(o)
		}
	}
	o.mu.Unlock()
}

var errNoLowerTier = errors.New("evicted from G2: no tier below it")

// evictObject is eviction in a G2-only store: with no lower copy to fall
// back on, the victim's whole object leaves (it is removed and the front
// end told through OnLost, as for a lost object), never a block of it,
// which would leave a file with a hole nobody wrote. Pinned objects and
// objects of class DurabilityDevice (never dropped) stay.
//
// An object written less than volatileWriteGrace ago is kept for now
// (false): evicting the file a writer is filling would make its next write
// fail with ENOENT; that writer gets ENOSPC from waitRoom instead.
func (s *Store) evictObject(o *object) bool {
	o.mu.RLock()
	gone := o.deleted || o.pinned || o.dur == DurabilityDevice
	if !gone && o.held() {
		o.mu.RUnlock()
		return false // open by passthrough: kept for now
	}
	recent := o.writers.Load() > 0 || s.clk.Since(time.Unix(0, o.lastWrite.Load())) < volatileWriteGrace
	blocks := o.blocks.len()
	o.mu.RUnlock()
	if gone {
		return true // not evictable: leaves the eviction order
	}
	if recent {
		return false
	}
	s.c.evictions[tiG2].Add(int64(blocks))
	s.c.dropped[dropEvicted].Add(int64(blocks))
	s.removeObject(o.id, errNoLowerTier, false)
	return true
}

// volatileWriteGrace: see evictObject.
const volatileWriteGrace = 250 * time.Millisecond

// g3Demoter is the core's tier.Demoter port for G3 (attached in Open).
type g3Demoter struct{ s *Store }

// Demote implements tier.Demoter.
func (d g3Demoter) Demote(keys []tier.Key) { d.s.DemoteFromG3(keys) }

// DemoteFromG3 is the body of the core's G3 reclaim port (tier.Demoter,
// attached to G3 by Open): G3 calls it with the live blocks of a segment
// it is about to reuse, before it reuses it. Each block that
// still belongs to a live object and has no G4 copy is copied to G4 (from
// G2 when it is there, else read from G3); a block that cannot be demoted
// makes its object lost. Blocks of NBD exports are never dropped: when G4
// cannot take them they are marked dirty again so write-back stores them.
// Up to Config.DemoteWorkers keys are handled at once; it returns when
// all are.
func (s *Store) DemoteFromG3(keys []tier.Key) {
	// Up to DemoteWorkers keys at once, each with its own buffer: every
	// step of demoteOne holds only its block's object lock, and a block's
	// busy span orders its G4 put against other puts of the same key, so
	// keys are independent. The reclaim waits for all of them.
	workers := min(s.cfg.DemoteWorkers, len(keys))
	// Buffers of the largest block size among the keys' objects (fixed at
	// create), not of tier.MaxBlockSize: eight of 4 MiB were 32 MiB mapped
	// and zeroed per reclaim for blocks of 16-256 KiB.
	size := 1
	for _, k := range keys {
		if o := s.get(ObjectID(k.Object)); o != nil {
			size = max(size, o.bs)
		}
	}
	bufs := make([][]byte, 0, workers)
	for range workers {
		buf, err := s.pool.get(size)
		if err != nil {
			s.log.Error("demote: no buffer", "err", err)
			break
		}
		bufs = append(bufs, buf)
	}
	if len(bufs) == 0 {
		return
	}
	var (
		next atomic.Int64
		mu   sync.Mutex
		lost []ObjectID
		wg   sync.WaitGroup
	)
	for _, buf := range bufs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer s.pool.put(buf)
			for {
				i := int(next.Add(1) - 1)
				if i >= len(keys) {
					return
				}
				if id, ok := s.demoteOne(keys[i], buf); !ok {
					mu.Lock()
					lost = append(lost, id)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	for _, id := range lost {
		s.lose(id, fmt.Errorf("G3 reclaimed a block G4 could not take (G4 full, down or absent): %w", tier.ErrNoSpace))
	}
}

// demoteOne handles one key of DemoteFromG3; ok=false means the object must
// be dropped.
//
// A file block without a G4 copy is copied there; if that fails it keeps
// its G2 bytes (made dirty again, write-back retries) or its file is lost.
// An export block (NBD) is never dropped: the copy in the reclaimed segment
// may be the last one of bytes a FLUSH acknowledged, so
//   - a dirty export block (newer bytes in G2 not yet written back) has its
//     G3 copy, the older acknowledged version, copied to G4 first, so a
//     kill -9 before the write-back finds that version (write-back of the
//     newer bytes then replaces it);
//   - a clean export block that G4 cannot take is copied forward: its bytes
//     go to G2 as a dirty block and write-back stores them again (in a
//     newer G3 segment when there is no G4).
func (s *Store) demoteOne(k tier.Key, buf []byte) (ObjectID, bool) {
	id := ObjectID(k.Object)
	o := s.get(id)
	if o == nil {
		return id, true
	}
	o.mu.Lock()
	b := o.blocks.get(k.Index)
	if o.deleted || o.gen != k.Gen || o.ns != k.Namespace || b == nil || !b.in.has(tiG3) {
		o.mu.Unlock()
		return id, true
	}
	s.c.evictions[tiG3].Add(1)
	export := o.dur == DurabilityDevice
	if export && !b.in.has(tiG4) && o.isBusy(k.Index) && (s.relocateInG3(k) || s.postponeG3Reclaim()) {
		// A put or delete of this key is in flight (often the very
		// write-back whose roll-over reclaims this segment), so neither a
		// G4 copy nor a copy forward can be ordered against it. G3 keeps
		// the record instead, ordered as before against that put: the
		// flushed version stays stored until newer bytes replace it; and
		// when it has no room for a copy, the segment stays for now.
		o.mu.Unlock()
		return id, true
	}
	// Every path below forgets the G3 copy, but its record stays in the
	// log on disk until G3 has taken the segment out of it, after this
	// hook returns: a kill -9 before then finds it again at the next
	// start, where a G3 copy wins over G4's. Recorded stale and deleted
	// (a tombstone while the segment is still in the log, a no-op once it
	// is gone), so the object is not recorded clean and no NBD FLUSH
	// returns while an older version could come back.
	o.markStale(k.Index, staleG3)
	s.gc(s.g3, k)
	if b.in.has(tiG4) || (b.dirty && (!export || s.g4 == nil)) {
		// G4 has it, or write-back will store the newer bytes (an export
		// without G4 has nowhere to keep the older version meanwhile).
		b.in.drop(tiG3)
		o.mu.Unlock()
		return id, true
	}
	if b.dirty && o.isBusy(k.Index) {
		// The newer bytes are being written back right now; a put of the
		// older version could land after them.
		b.in.drop(tiG3)
		o.mu.Unlock()
		return id, true
	}
	n := o.blockLen(k.Index)
	data := buf[:n]
	if g := b.g2.Load(); g != nil && !b.dirty {
		copyBlock(data, g, 0)
	} else {
		// Not resident, or resident with newer unacknowledged bytes: the
		// G3 copy (readable until the segment is reused) is what to keep.
		ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
		_, err := s.readLower(ctx, o, k.Index, b, data, 0)
		cancel()
		if err != nil {
			b.in.drop(tiG3)
			o.mu.Unlock()
			if export {
				s.log.Error("export block unreadable while G3 reclaims it", "key", k.String(), "err", err)
			}
			return id, export
		}
	}
	if o.isBusy(k.Index) && !b.dirty {
		// Another put or a GC delete of this key is in flight (a put now
		// could land before that delete and be erased by it). An export
		// block keeps its bytes in G2 (write-back stores them once the key
		// is free); a cached file is dropped unless another tier holds
		// the block (copying files forward here after a restart, when
		// recovery queues many G4 deletes, stalled writers: see the stop
		// note of issue 11).
		defer o.mu.Unlock()
		if export {
			return id, s.copyForwardLocked(o, b, k, data)
		}
		if !b.in.has(tiG4) && !b.in.has(tiG35) && s.postponeG3Reclaim() {
			// Its only copy is here: keep the whole segment for now
			// rather than lose the file (the in-flight put or delete is
			// short; the next roll-over tries again).
			o.clearStale(k.Index, staleG3)
			return id, true
		}
		b.in.drop(tiG3)
		return id, b.in.has(tiG4) || b.in.has(tiG35)
	}
	// The G4 write runs without the object lock, so a slow object store
	// does not stall the object's readers and writers; the block keeps
	// reading from G3 meanwhile (the segment is not reused before this hook
	// returns), and the busy span keeps a write-back of a newer version
	// from racing this put to the same key.
	ver, wasDirty := b.version, b.dirty
	o.beginBusy(k.Index)
	o.mu.Unlock()
	err := errors.New("no G4")
	if s.g4 != nil {
		ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
		err = s.putTo(ctx, tiG4, k, data, false)
		cancel()
		if err != nil {
			s.logLimited("demote to G4 failed", "key", k.String(), "err", err)
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	defer s.endBusyLocked(o, k.Index, true)
	s.maybeStoredLocked(o, k.Index, k, err)
	if o.deleted || o.gen != k.Gen || o.blocks.get(k.Index) != b {
		if err == nil {
			s.discardCopyLocked(o, k.Index, s.g4, k)
		}
		return id, true
	}
	b.in.drop(tiG3)
	if wasDirty {
		// The older version of an export block: G4 keeps it until the
		// write-back of the newer bytes replaces or deletes it (writeBack
		// deletes a G4 copy once G3 holds the key).
		if err == nil {
			b.in.add(tiG4)
			o.clearStale(k.Index, staleG4)
			s.c.demotions[tiG4].Add(1)
		} else {
			s.log.Error("export block: older acknowledged version not kept while its newer bytes await write-back", "key", k.String(), "err", err)
		}
		return id, true
	}
	if err == nil && b.version != ver {
		// Rewritten during the put: this copy is stale; write-back stores
		// the new bytes.
		s.discardCopyLocked(o, k.Index, s.g4, k)
		return id, true
	}
	if err == nil {
		b.in.add(tiG4)
		o.clearStale(k.Index, staleG4)
		s.c.demotions[tiG4].Add(1)
		return id, true
	}
	if b.dirty {
		return id, true // write-back stores the newer bytes
	}
	if export && (s.relocateInG3(k) || s.postponeG3Reclaim()) {
		// G4 did not take it: G3 keeps it (the key is busy with this
		// hook's own span, so nothing can be ordered against it), or
		// keeps the whole segment for now (a copy forward would leave the
		// flushed bytes in G2 alone until written back again).
		b.in.add(tiG3)
		o.clearStale(k.Index, staleG3)
		return id, true
	}
	if export || !errors.Is(err, tier.ErrNoSpace) {
		// Keep the bytes: write-back retries them (G4 did not answer; a
		// full G4 would only fail again, so a cached file not in G2 is
		// dropped instead, as G3 reclaim drops it without G4).
		if b.g2.Load() != nil || export {
			return id, s.copyForwardLocked(o, b, k, data)
		}
	}
	s.dropCount(dropNoSpace)
	return id, false
}

// relocateInG3 asks G3 to keep k's record through the reclaim that called
// DemoteFromG3 (tier.Relocator) and reports whether it did.
func (s *Store) relocateInG3(k tier.Key) bool {
	r, ok := s.g3.(tier.Relocator)
	if !ok {
		return false
	}
	ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
	defer cancel()
	if err := r.Relocate(ctx, k); err != nil {
		s.logLimited("G3 could not keep a block through reclaim", "key", k.String(), "err", err)
		return false
	}
	s.c.relocations.Add(1)
	return true
}

// postponeG3Reclaim asks G3 to give up the reclaim that called
// DemoteFromG3 (tier.Relocator) and reports whether it can.
func (s *Store) postponeG3Reclaim() bool {
	r, ok := s.g3.(tier.Relocator)
	if !ok {
		return false
	}
	r.PostponeReclaim()
	s.c.reclaimsPostponed.Add(1)
	return true
}

// copyForwardLocked keeps block b's bytes (data, read from the segment G3
// is about to reuse, or its G2 copy) as a dirty G2 block, so write-back
// stores them again. It reports false when no G2 buffer could be had (the
// block is then dropped). o.mu held for writing; b.in already lacks G3.
func (s *Store) copyForwardLocked(o *object, b *blockState, k tier.Key, data []byte) bool {
	r := bref{o.id, k.Index}
	b.in.drop(tiG3)
	g := b.g2.Load()
	if g == nil {
		ng, err := s.allocBlock(o, k.Index, max(len(data), 1))
		if err != nil {
			s.log.Error("block lost: no G2 buffer to copy it forward", "key", k.String(), "err", err)
			s.dropCount(dropNoSpace)
			return false
		}
		copy(ng.buf, data)
		ng.n = len(data)
		b.g2.Store(ng)
		g = ng
	}
	s.markDirtyLocked(o, b, r, g, true)
	if !o.metaDirty {
		_ = s.markMetaDirty(o)
	}
	return true
}
