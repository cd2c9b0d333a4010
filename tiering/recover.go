package tiering

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// recover rebuilds the object table from meta.db and the tiers' indexes
// (see meta.go for the rules) and queues garbage (block copies that belong
// to no live object generation) for deletion.
func (s *Store) recover(ctx context.Context) error {
	s.g3Puts.Store(1) // recovered objects with a block in G3 have g3Seq 1: synced once after the start
	present := make(copies)
	if err := present.addRange(ctx, s.g3, tiG3); err != nil {
		return fmt.Errorf("scan G3: %w", err)
	}
	// G4 is listed into its own map first: a listing that fails part way
	// must not leave half of G4 in present.
	var rec4 *g4Recovery
	if s.g4 != nil {
		var in4 listing
		var err error
		if l, ok := s.g4.(interface{ Listed() bool }); ok && !l.Listed() {
			// The tier's own listing at open just failed (opened
			// unlisted): do not wait for the store a second time.
			err = fmt.Errorf("G4 opened unlisted: %w", tier.ErrUnavailable)
		} else {
			in4, err = listTier(ctx, s.g4)
		}
		switch {
		case err == nil:
			present.addListing(in4, tiG4)
		case errors.Is(err, tier.ErrUnavailable):
			// Start without G4's listing: nothing is concluded about
			// blocks only G4 may hold (see g4recover.go).
			rec4 = &g4Recovery{blocks: make(map[tier.Key]*blockState)}
			s.log.Warn("G4 does not answer: starting without its listing; blocks only in G4 read as I/O errors until it answers (retrying in the background)", "err", err)
		default:
			return fmt.Errorf("scan G4: %w", err)
		}
	}
	byObject := make(map[uint64][]tier.Key)
	for k := range present {
		byObject[k.Object] = append(byObject[k.Object], k)
	}
	used := make(map[tier.Key]bool)
	g4won := make(map[tier.Key]bool) // used keys whose G3 copy is older than G4's (objectRecord.G4Wins)
	var lost []ObjectID
	maxID, err := s.meta.load(func(id ObjectID, rec *objectRecord) {
		dur := recordDurability(rec)
		if rec.State == stateDirty && dur == DurabilityDevice && rec.BlockSize >= tier.MinBlockSize {
			s.recoverDevice(id, rec, byObject[uint64(id)], func(k tier.Key) (bool, bool) { l := present[k]; return l.g3, l.g4 }, used)
			if rec4 != nil {
				o := s.objects[id]
				o.awaitG4 = true
				rec4.exports = append(rec4.exports, o)
			}
			return
		}
		if rec.State != stateClean || rec.BlockSize < tier.MinBlockSize {
			lost = append(lost, id)
			return
		}
		o := &object{id: id, ns: rec.Namespace, kind: rec.Kind, dur: dur, bs: rec.BlockSize, size: rec.Size,
			gen: rec.Gen, pinned: rec.Pinned, created: rec.Created, persisted: true}
		if o.created.IsZero() {
			o.created = s.clk.Now()
		}
		var wins map[uint32]bool // rec.G4Wins
		for _, run := range rec.G4Wins {
			if wins == nil {
				wins = make(map[uint32]bool)
			}
			for idx := run[0]; ; idx++ {
				wins[idx] = true
				if idx == run[1] {
					break
				}
			}
		}
		for _, run := range rec.Written {
			for idx := run[0]; ; idx++ {
				k := o.key(idx)
				l := present[k]
				if l == nil && rec4 != nil {
					l = &copyLoc{g4: true} // maybe in G4: verified once G4 answers
				}
				if l == nil || int64(idx)*int64(o.bs) >= o.size {
					lost = append(lost, id)
					return
				}
				in3, in4 := l.g3, l.g4
				if wins[idx] {
					// G4 wins: the record says this G3 copy is older than
					// G4's (written back to G4 while G3 was down); it is
					// garbage, recorded stale until GC deletes it.
					if !in4 && rec4 == nil {
						lost = append(lost, id)
						return
					}
					in4 = true // listed in G4, or maybe there: verified once G4 answers (reconcileG4)
					if in3 {
						in3 = false
						o.markStale(idx, staleG3)
						g4won[k] = true
					}
				} else if l.g3 && l.g4 {
					// G3 wins: the G4 copy may be stale (written back to G3
					// while G4 was down, the delete of the G4 copy failed)
					// and trusting it would let a later G3 eviction skip
					// the upload and serve the old bytes. The G4 copy is
					// garbage (unused below), recorded stale until GC
					// deletes it (a later TRIM or truncate must not let it
					// come back).
					in4 = false
					o.markStale(idx, staleG4)
				}
				o.blocks.set(idx, newBlockIn(tiG3, in3, tiG4, in4))
				if in3 {
					o.g3Seq = 1 // the first sync after the start covers what an earlier process left unsynced
				}
				if rec4 != nil {
					rec4.blocks[k] = o.blocks.get(idx)
				}
				if idx == run[1] {
					break
				}
			}
		}
		for idx, b := range o.blocks.all() {
			if b.in.has(tiG3) || b.in.has(tiG4) {
				used[o.key(idx)] = true
			}
		}
		s.countInLocked(o) // recovery: nothing else runs yet
		s.objects[id] = o
	})
	if err != nil {
		return fmt.Errorf("load metadata: %w", err)
	}
	for _, id := range lost {
		if o := s.objects[id]; o != nil {
			s.countOutLocked(o)
		}
		delete(s.objects, id)
		if err := s.meta.del(id); err != nil {
			return fmt.Errorf("drop lost object %d: %w", id, err)
		}
	}
	var garbage int
	for k, l := range present {
		if used[k] {
			continue
		}
		garbage++
		s.queueCopies(k, l)
	}
	for k, l := range present {
		switch {
		case g4won[k]:
			s.gc(s.g3, k) // G4 won (above): the G3 copy is the old one
		case used[k] && l.g3 && l.g4:
			s.gc(s.g4, k) // G3 won (above); copyState keeps it if that changes
		}
	}
	s.nextID, s.idLimit = maxID+1, maxID+1
	s.c.objectsLost.Add(int64(len(lost)))
	if rec4 != nil {
		s.g4rec = rec4
	}
	s.log.Info("tiering store recovered", "objects", len(s.objects), "lost", len(lost), "garbage_blocks", garbage, "g4_listed", rec4 == nil, "passthrough_max_files", s.cfg.PassthroughMaxFiles)
	return nil
}

// recoverDevice rebuilds an object of class DurabilityDevice (an NBD
// export) recorded dirty (the daemon died with writes not yet written
// back). A block device cannot lose a whole device for that: every block
// of the object's generation found in G3 or G4 is kept, as a disk keeps
// whatever reached it. Writes acknowledged by Flush (NBD FLUSH or FUA)
// were in G3/G4 before the acknowledgement, so they are all here; a block
// written after the last flush may read as its older version. Where both
// tiers hold a block, G3 (written later, see writeBack) wins and the G4
// copy is deleted.
func (s *Store) recoverDevice(id ObjectID, rec *objectRecord, keys []tier.Key, where func(tier.Key) (bool, bool), used map[tier.Key]bool) {
	o := &object{id: id, ns: rec.Namespace, kind: rec.Kind, dur: DurabilityDevice, bs: rec.BlockSize, size: rec.Size,
		gen: rec.Gen, pinned: rec.Pinned, created: rec.Created, persisted: true, metaDirty: true}
	for _, k := range keys {
		if k.Namespace != o.ns || k.Gen != o.gen || int64(k.Index)*int64(o.bs) >= o.size {
			continue
		}
		in3, in4 := where(k)
		if in3 && in4 {
			// Recorded stale: until GC deletes it, a later TRIM of this
			// block must not let a FLUSH return while the old G4 copy
			// could come back at the next recovery.
			o.markStale(k.Index, staleG4)
			s.gc(s.g4, k)
			in4 = false
		}
		o.blocks.set(k.Index, newBlockIn(tiG3, in3, tiG4, in4))
		if in3 {
			o.g3Seq = 1 // as in recover
		}
		used[k] = true
	}
	s.countInLocked(o)
	s.objects[id] = o
	s.cleanQueue = append(s.cleanQueue, cleanItem{o, time.Time{}})
	s.log.Info("device-class object recovered after an unclean stop", "object", id, "kind", o.kind, "blocks", o.blocks.len())
}
