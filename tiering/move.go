package tiering

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// ErrPinned is returned (wrapped) by Sink and Demote for a pinned object:
// its blocks stay in G2 until it is unpinned.
var ErrPinned = errors.New("object is pinned")

// MoveResult counts what Sink or Demote did, in blocks.
type MoveResult struct {
	// Moved is the number of blocks written to the target tier.
	Moved int
	// Released is the number of block copies dropped from the tiers above
	// the target.
	Released int
}

// Sink moves every block of the object to G4 (the scheduler's "sink"
// command for cold private objects): dirty blocks are written back first
// (Flush), each block without a G4 copy is copied there (from G2 when it
// is resident, else read from G3), then its G2 and G3 copies are dropped.
// A block rewritten while it is being sunk keeps its new bytes in G2 and
// its normal write-back; the object stays readable throughout.
// Errors: ErrNotExist, ErrPinned, ErrInvalid when the store has no G4,
// tier errors from G4 (the blocks not yet sunk keep their copies), ctx
// errors.
func (s *Store) Sink(ctx context.Context, id ObjectID) (MoveResult, error) {
	var res MoveResult
	if s.g4 == nil {
		return res, fmt.Errorf("%w: sink: no G4 tier configured", ErrInvalid)
	}
	idxs, err := s.movable(ctx, id)
	if err != nil {
		return res, err
	}
	o := s.get(id)
	if o == nil {
		return res, ErrNotExist
	}
	buf, err := s.pool.get(tier.MaxBlockSize)
	if err != nil {
		return res, err
	}
	defer s.pool.put(buf)
	for _, idx := range idxs {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		moved, released, err := s.sinkBlock(ctx, o, idx, buf)
		if moved {
			res.Moved++
		}
		res.Released += released
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

// movable flushes the object and returns its block indexes in order.
func (s *Store) movable(ctx context.Context, id ObjectID) ([]uint32, error) {
	o, err := s.rlockLive(id)
	if err != nil {
		return nil, err
	}
	pinned := o.held() // pinned, or open by passthrough
	o.mu.RUnlock()
	if pinned {
		return nil, fmt.Errorf("object %d: %w", id, ErrPinned)
	}
	if err := s.Flush(ctx, id); err != nil {
		return nil, err
	}
	o, err = s.rlockLive(id)
	if err != nil {
		return nil, err
	}
	idxs := make([]uint32, 0, len(o.blocks))
	for idx := range o.blocks {
		idxs = append(idxs, idx)
	}
	o.mu.RUnlock()
	sort.Slice(idxs, func(i, j int) bool { return idxs[i] < idxs[j] })
	return idxs, nil
}

// sinkBlock gives block idx a G4 copy and drops its G3 and G2 copies.
// The G4 put runs without the object lock (the busy span keeps write-back
// of a newer version from racing it, as in demoteOne).
func (s *Store) sinkBlock(ctx context.Context, o *object, idx uint32, buf []byte) (moved bool, released int, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	b := o.blocks[idx]
	if o.deleted {
		return false, 0, ErrNotExist
	}
	if b == nil || b.dirty || o.isBusy(idx) || o.held() {
		return false, 0, nil // rewritten meanwhile: its write-back places it
	}
	k := o.key(idx)
	if !b.inG4 {
		n := o.blockLen(idx)
		data := buf[:n]
		if g := b.g2.Load(); g != nil {
			copyBlock(data, g, 0)
		} else if _, err := s.readLower(ctx, o, idx, b, data, 0); err != nil {
			return false, 0, fmt.Errorf("sink %s: read: %w", k, err)
		}
		ver := b.version
		o.beginBusy(idx)
		o.mu.Unlock()
		err := s.putTo(ctx, tiG4, k, data, true)
		o.mu.Lock()
		defer s.endBusyLocked(o, idx, true) // runs before the deferred unlock
		s.maybeStoredLocked(o, idx, k, err)
		live := !o.deleted && o.gen == k.Gen && o.blocks[idx] == b && b.version == ver
		if !live {
			if err == nil {
				s.discardCopyLocked(o, idx, s.g4, k)
			}
			return false, 0, nil // rewritten or dropped: its write-back places it
		}
		if err != nil {
			return false, 0, fmt.Errorf("sink %s: %w", k, err)
		}
		b.inG4 = true
		o.clearStale(idx, staleG4)
		moved = true
		s.c.demotions[tiG4].Add(1)
	}
	if b.inG3 {
		// Until it is deleted the G3 copy would outlive a rewrite of the
		// key to G4: recorded stale, so the object is not recorded clean
		// with it.
		b.inG3 = false
		o.markStale(idx, staleG3)
		s.gc(s.g3, k)
		s.c.evictions[tiG3].Add(1)
		released++
	}
	if g := b.g2.Load(); g != nil {
		b.g2.Store(nil)
		s.freeG2(bref{o.id, idx}, g, false, false)
		s.c.evictions[tiG2].Add(1)
		released++
	}
	return moved, released, nil
}

// Demote moves the object's blocks out of G2 (the scheduler's "demote"
// command, used to relieve G2 before its high watermark forces local
// eviction): dirty blocks are written back first, then each G2 copy is
// dropped the way the evictor drops a victim (written to G3 first when
// admission predicts reuse and the block has only a G4 copy).
// Errors: ErrNotExist, ErrPinned, ErrInvalid in a G2-only store, tier and
// ctx errors from the flush.
func (s *Store) Demote(ctx context.Context, id ObjectID) (MoveResult, error) {
	var res MoveResult
	if s.volatile {
		return res, fmt.Errorf("%w: demote: no tier below G2", ErrInvalid)
	}
	idxs, err := s.movable(ctx, id)
	if err != nil {
		return res, err
	}
	for _, idx := range idxs {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		r := bref{id, idx}
		o := s.get(id)
		if o == nil {
			return res, ErrNotExist
		}
		o.mu.RLock()
		b := o.blocks[idx]
		resident := b != nil && b.g2.Load() != nil
		o.mu.RUnlock()
		if !resident {
			continue
		}
		s.g2mu.Lock()
		s.place.remove(r)
		s.g2mu.Unlock()
		s.evictOne(r)
		o.mu.RLock()
		if b.g2.Load() == nil {
			res.Released++
		} else if !b.dirty && !o.held() && !o.deleted {
			// Still resident (the G3 copy failed): give it back to the
			// eviction order so the block does not become unevictable.
			s.g2mu.Lock()
			s.place.makeEvictable(r, s.now())
			s.g2mu.Unlock()
		}
		o.mu.RUnlock()
	}
	return res, nil
}

// Residency is where an object's blocks are, in blocks per tier (a block
// counts in every tier holding a copy).
type Residency struct {
	Blocks          int // written blocks
	G2, G3, G35, G4 int
	Pinned          bool
	Kind            string     // the object's label (CreateOptions.Kind)
	Durability      Durability // the object's class
	Namespace       string
	Size            int64 // bytes
}

// Residency returns where the object's blocks are. It takes the object's
// read lock and allocates nothing. Errors: ErrNotExist.
func (s *Store) Residency(id ObjectID) (Residency, error) {
	o, err := s.rlockLive(id)
	if err != nil {
		return Residency{}, err
	}
	defer o.mu.RUnlock()
	r := Residency{Blocks: len(o.blocks), Pinned: o.pinned, Kind: o.kind, Durability: o.dur, Namespace: o.ns, Size: o.size}
	for _, b := range o.blocks {
		if b.g2.Load() != nil {
			r.G2++
		}
		if b.inG3 {
			r.G3++
		}
		if b.inG35 {
			r.G35++
		}
		if b.inG4 {
			r.G4++
		}
	}
	return r, nil
}
