package g3

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// roll replaces the active segment seen by the caller with a new one,
// reclaiming old segments as the capacity and watermarks require. If
// another goroutine already rolled past seen, it returns at once.
//
// Order: seal the old segment (no new reservations) and wait for its
// writes in flight, so that at most one segment — the newest — can hold a
// torn record after a crash; if the new segment would exceed CapacityBytes,
// reclaim before creating it (writers wait); create it (on ENOSPC reclaim
// the oldest segment and retry); install it; then, if the store is above
// the high watermark, reclaim down to the low one while other writers
// append to the new segment.
func (s *Store) roll(ctx context.Context, seen *segment) error {
	s.rollMu.Lock()
	defer s.rollMu.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return tier.ErrClosed
	}
	if s.active != seen {
		s.mu.Unlock()
		return nil
	}
	if old := s.active; old != nil {
		s.active = nil
		for old.inflight > 0 {
			s.drained.Wait()
		}
	}
	s.mu.Unlock()

	high, low := s.opts.segLimits()
	hard := int(s.opts.CapacityBytes / s.opts.SegmentBytes)
	var seg *segment
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		s.mu.RLock()
		id, onDisk := s.nextSegID, len(s.segs)+len(s.spares)
		s.mu.RUnlock()
		if seg = s.takeSpare(id); seg != nil {
			break
		}
		if s.opts.CapacityBytes > 0 && onDisk+1 > hard {
			// Every step frees a segment or a spare, so this ends.
			if s.reclaimOldest("capacity") || s.dropSpare() {
				continue
			}
		}
		var err error
		if seg, err = s.createSegment(id); err == nil {
			break
		}
		if !errors.Is(err, tier.ErrNoSpace) {
			return err
		}
		s.st.noSpace.Add(1)
		if s.reclaimOldest("filesystem full") || s.dropSpare() {
			continue
		}
		s.log.Warn("G3 filesystem full and nothing to reclaim", "err", err)
		return err
	}
	s.mu.Lock()
	s.nextSegID = seg.id + 1
	s.segs = append(s.segs, seg)
	s.active = seg
	n := len(s.segs)
	s.mu.Unlock()
	if s.opts.CapacityBytes > 0 && n > high {
		s.reclaimTo(low)
	}
	return nil
}

// reclaimTo reclaims the oldest segments until at most n remain (never the
// active one).
func (s *Store) reclaimTo(n int) {
	for {
		s.mu.RLock()
		over := len(s.segs) > n
		s.mu.RUnlock()
		if !over || !s.reclaimOldest("watermark") {
			return
		}
	}
}

// reclaimOldest drops the oldest segment unless it is the active one (or
// there is none) and reports whether it did. The caller holds rollMu, so no
// Put or Delete can append meanwhile to a segment being reclaimed, and
// OnEvict sees the segment's live blocks still readable. Segments go
// strictly oldest first, so a tombstone never outlives the records it
// hides (see package doc).
func (s *Store) reclaimOldest(why string) bool {
	s.mu.Lock()
	if len(s.segs) == 0 || s.segs[0] == s.active || s.closed {
		s.mu.Unlock()
		return false
	}
	seg := s.segs[0]
	var live []tier.Key
	var need int64 // bytes the live records take when copied forward
	seen := make(map[ikey]bool, len(seg.keys))
	for _, ik := range seg.keys {
		if e, ok := s.index[ik]; ok && e.seg == seg && !e.tomb && !seen[ik] {
			seen[ik] = true
			k := s.tierKey(ik)
			live = append(live, k)
			need += int64(recordLen(k.Namespace, int(e.plen)))
		}
	}
	compact := s.compactableLocked()
	if compact && why == "watermark" && s.active.writeOff+need > s.active.size {
		// The active segment cannot take them: stop reclaiming for now
		// rather than demote live data; the next roll-over (with a fresh
		// active segment) goes on where this one stopped.
		s.mu.Unlock()
		return false
	}
	s.mu.Unlock()

	if compact && len(live) > 0 {
		live = s.compact(live)
	}
	if d := s.demoter.Load(); len(live) > 0 && d != nil {
		(*d).Demote(live)
	} else if len(live) > 0 && s.opts.OnEvict != nil {
		s.opts.OnEvict(live)
	}
	if s.postpone.Swap(false) {
		// OnEvict could not let a block go safely now: the segment stays
		// in the log (blocks it already moved are superseded or deleted
		// by the caller meanwhile); the next roll-over tries again.
		s.st.postponed.Add(1)
		s.log.Debug("G3 segment reclaim postponed", "segment", seg.path, "why", why)
		return false
	}
	if s.testHook != nil {
		s.testHook("reclaim-evicted")
	}

	// The segment leaves the log on disk (renamed to a spare or removed)
	// before its keys leave the index: until then a crash would bring its
	// records back at the next Open, so a Delete meanwhile must still find
	// the key and write a tombstone rather than take it for missing.
	sp := s.leaveLog(seg)

	s.mu.Lock()
	dropped := 0
	for _, ik := range seg.keys {
		if e, ok := s.index[ik]; ok && e.seg == seg {
			if !e.tomb {
				s.used -= int64(e.plen)
				s.blocks--
				dropped++
			}
			delete(s.index, ik)
		}
	}
	s.segs = s.segs[1:]
	seg.keys = nil
	if sp != nil {
		s.spares = append(s.spares, sp)
	}
	s.mu.Unlock()
	if sp == nil {
		seg.release()
	}

	s.st.reclaims.Add(1)
	s.st.evicted.Add(int64(dropped))
	s.log.Debug("G3 segment reclaimed", "segment", seg.path, "why", why, "blocks_dropped", dropped)
	return true
}

// compactableLocked reports whether the segment about to be reclaimed is
// compacted (Options.CompactLive): the store's live data is at most
// CompactLive of what the low watermark holds, so the segments kept hold
// on average at most that fraction of live data and copying it forward
// frees more than it writes (with more live data, a log of fully live
// segments would copy a whole segment per roll-over and free nothing),
// and there is an active segment to copy into (there is none during the
// reclaim that comes before a roll-over installs one). Caller holds mu.
func (s *Store) compactableLocked() bool {
	o := s.opts
	return o.CompactLive > 0 && o.CapacityBytes > 0 && s.active != nil &&
		float64(s.used) <= o.CompactLive*o.LowWatermark*float64(o.CapacityBytes)
}

// compact copies the live blocks of the segment being reclaimed forward
// into the active segment (copyForward) and returns those it could not
// copy (no room left, a read error), for OnEvict.
func (s *Store) compact(live []tier.Key) []tier.Key {
	ctx, cancel := context.WithTimeout(context.Background(), compactTimeout)
	defer cancel()
	var rest []tier.Key
	for i, k := range live {
		n, err := s.copyForward(ctx, k)
		if errors.Is(err, tier.ErrNoSpace) || ctx.Err() != nil {
			return append(rest, live[i:]...) // the active segment is full
		}
		if errors.Is(err, tier.ErrNotFound) {
			continue // deleted meanwhile: nothing to keep
		}
		if err != nil {
			rest = append(rest, k)
			continue
		}
		s.st.compacted.Add(1)
		s.st.compactedBytes.Add(int64(n))
	}
	return rest
}

// compactTimeout bounds the copying of one segment's live blocks.
const compactTimeout = 30 * time.Second

// maxSpares is how many reclaimed segment files are kept for reuse when
// CapacityBytes is 0. With a capacity, spares are kept while segments and
// spares together fit in it. Reusing a file skips fallocate, unlink and
// (on ext4/xfs) the conversion of unwritten extents on first write.
const maxSpares = 2

// spareRoom reports whether one more spare may be kept; leaving, when not
// nil, is a segment still listed in segs that is about to become that
// spare. Caller holds mu.
func (s *Store) spareRoom(leaving *segment) bool {
	if s.closed {
		return false
	}
	if s.opts.CapacityBytes == 0 {
		return len(s.spares) < maxSpares
	}
	var b int64
	for _, seg := range s.segs {
		if seg != leaving {
			b += seg.size
		}
	}
	for _, sp := range s.spares {
		b += sp.seg.size
	}
	return b+s.opts.SegmentBytes <= s.opts.CapacityBytes
}

// leaveLog takes a reclaimed segment's file out of the log: renamed to
// "<id>.spare" and returned for reuse by a later roll-over, or deleted
// (nil) when there are enough spares. The caller drops the segment's index
// entries afterwards, then keeps the spare or releases the segment.
func (s *Store) leaveLog(seg *segment) *spare {
	sp := &spare{seg: seg, path: filepath.Join(s.opts.Dir, spareName(seg.id))}
	s.mu.Lock()
	keep := s.spareRoom(seg) && seg.size == s.opts.SegmentBytes // a new size retires old files
	s.mu.Unlock()
	s.dirDirty.Store(true)
	if keep {
		err := os.Rename(seg.path, sp.path)
		if err == nil {
			return sp
		}
		s.log.Error("G3 rename reclaimed segment", "segment", seg.path, "err", err)
	}
	if err := os.Remove(seg.path); err != nil {
		s.log.Error("G3 remove reclaimed segment", "segment", seg.path, "err", err)
	}
	return nil
}

// takeSpare turns a spare no reader still holds into the new segment id,
// with a fresh salt: records of its previous life carry the old salt, so
// scans and reads never take them for records of the new segment. It
// returns nil when there is no idle spare or reuse fails (the spare is then
// deleted).
func (s *Store) takeSpare(id uint64) *segment {
	s.mu.Lock()
	var sp *spare
	for i, x := range s.spares {
		// The index no longer points into a spare, so its reference count
		// can only fall; 1 means only the store holds it.
		if x.seg.refs.Load() == 1 {
			sp = x
			s.spares = slices.Delete(s.spares, i, i+1)
			break
		}
	}
	s.mu.Unlock()
	if sp == nil {
		return nil
	}
	seg, err := s.reuseSegment(sp, id)
	if err != nil {
		s.log.Error("G3 reuse spare segment", "spare", sp.path, "err", err)
		if err := os.Remove(sp.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.log.Error("G3 remove spare", "spare", sp.path, "err", err)
		}
		sp.seg.release()
		return nil
	}
	return seg
}

// dropSpare deletes one spare (idle or not: a reader finishes on its own
// reference) to give its space back. It reports whether there was one.
func (s *Store) dropSpare() bool {
	s.mu.Lock()
	if len(s.spares) == 0 {
		s.mu.Unlock()
		return false
	}
	sp := s.spares[0]
	s.spares = s.spares[1:]
	s.mu.Unlock()
	if err := os.Remove(sp.path); err != nil {
		s.log.Error("G3 remove spare", "spare", sp.path, "err", err)
	}
	sp.seg.release()
	return true
}
