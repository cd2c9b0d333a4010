package tiering

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/ctxmem/ctxmemd/tiering/health"
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
// When G4 packs (tier.Packer) and the object is not of the device class,
// the blocks go in batches of up to the tier's pack size, one PutPack
// each (one object per run instead of one per block); device-class
// objects (NBD exports, rewritten in place) keep one object per block, so
// a small write never rewrites a big object. A block rewritten while it is
// being sunk keeps its new bytes in G2 and its normal write-back; the
// object stays readable throughout.
// Errors: ErrNotExist, ErrPinned, ErrInvalid when the store has no G4,
// tier errors from G4 (the blocks not yet sunk keep their copies), ctx
// errors.
func (s *Store) Sink(ctx context.Context, id ObjectID) (MoveResult, error) {
	res, err := s.sink(ctx, id)
	s.noteMoved(id, res)
	return res, err
}

func (s *Store) sink(ctx context.Context, id ObjectID) (MoveResult, error) {
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
	if pk, ok := s.g4.(tier.Packer); ok && o.dur != DurabilityDevice {
		if batch := pk.PackBlocks(o.ns, o.bs); batch > 1 {
			return s.sinkPacked(ctx, o, idxs, pk, batch)
		}
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
	idxs := make([]uint32, 0, o.blocks.len())
	for idx := range o.blocks.all() {
		idxs = append(idxs, idx)
	}
	o.mu.RUnlock()
	sort.Slice(idxs, func(i, j int) bool { return idxs[i] < idxs[j] })
	return idxs, nil
}

// sinkPacked is Sink through G4's PutPack: batches of batch blocks (what
// fits in one pack object) share one staging buffer for the call, made
// when a block needs it (a Sink of a file already in G4 only drops upper
// copies, and allocates nothing).
func (s *Store) sinkPacked(ctx context.Context, o *object, idxs []uint32, pk tier.Packer, batch int) (MoveResult, error) {
	var res MoveResult
	buf := lazyBuf{n: min(batch, len(idxs)) * o.bs}
	for len(idxs) > 0 {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		n := min(batch, len(idxs))
		r, err := s.sinkBatch(ctx, o, idxs[:n], pk, &buf)
		res.Moved += r.Moved
		res.Released += r.Released
		if err != nil {
			return res, err
		}
		idxs = idxs[n:]
	}
	return res, nil
}

// sinkItem is one block of a sink whose G4 put runs without o.mu, in a
// busy span: the block state, version and key it was read at, its bytes.
type sinkItem struct {
	idx  uint32
	b    *blockState
	ver  uint64
	k    tier.Key
	data []byte
}

// lazyBuf is a staging buffer of n bytes made at its first use.
type lazyBuf struct {
	b []byte
	n int
}

// get returns the buffer from byte off on, made if need be.
func (l *lazyBuf) get(off int) []byte {
	if l.b == nil {
		l.b = make([]byte, l.n)
	}
	return l.b[off:]
}

// sinkBatch sinks the blocks idxs of o with one PutPack (the busy-span
// protocol of sinkBlock, for every block of the batch at once); buf holds
// the batch's bytes.
func (s *Store) sinkBatch(ctx context.Context, o *object, idxs []uint32, pk tier.Packer, buf *lazyBuf) (MoveResult, error) {
	var res MoveResult
	o.mu.Lock()
	var items []sinkItem
	var prepErr error
	off := 0
	for _, idx := range idxs {
		var dst []byte
		if b := o.blocks.get(idx); b != nil && !b.in.has(tiG4) {
			dst = buf.get(off) // the block's bytes are to be put
		}
		it, ok, err := s.sinkPrepLocked(ctx, o, idx, dst)
		if err != nil {
			prepErr = err // put what is prepared, then report it
			break
		}
		switch {
		case !ok:
		case it.data == nil: // already in G4
			res.Released += s.releaseUpperLocked(o, it.idx, it.b, it.k)
		default:
			items = append(items, it)
			off += len(it.data)
		}
	}
	o.mu.Unlock()
	if len(items) == 0 {
		return res, prepErr
	}
	keys := make([]tier.Key, len(items))
	blocks := make([][]byte, len(items))
	for i, it := range items {
		keys[i], blocks[i] = it.k, it.data
	}
	n := 0
	err := s.sinkPut(ctx, o, int64(off), func() error {
		m, err := s.putPackTo(ctx, pk, keys[n:], blocks[n:])
		n += m
		return err
	})
	o.mu.Lock()
	defer o.mu.Unlock()
	var first error
	for i, it := range items {
		var perr error
		if i >= n {
			perr = err
			if perr == nil {
				perr = fmt.Errorf("%w: G4 stored %d of %d blocks", tier.ErrUnavailable, n, len(items)) // cannot happen (tier.Packer)
			}
		}
		moved, released, derr := s.sinkDoneLocked(o, it, perr)
		if moved {
			res.Moved++
		}
		res.Released += released
		if first == nil {
			first = derr
		}
	}
	if first == nil {
		first = prepErr
	}
	return res, first
}

// putPackTo is putTo for a PutPack to G4 (through its health machine).
func (s *Store) putPackTo(ctx context.Context, pk tier.Packer, keys []tier.Key, blocks [][]byte) (int, error) {
	h := s.health[tiG4]
	if err := h.Admit(health.PutLast); err != nil {
		return 0, err
	}
	n, err := pk.PutPack(ctx, keys, blocks)
	h.Observe(health.Put, err)
	return n, err
}

// sinkBlock gives block idx a G4 copy and drops its G3 and G2 copies.
// The G4 put runs without the object lock (the busy span keeps write-back
// of a newer version from racing it, as in demoteOne).
func (s *Store) sinkBlock(ctx context.Context, o *object, idx uint32, buf []byte) (moved bool, released int, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	it, ok, err := s.sinkPrepLocked(ctx, o, idx, buf)
	if err != nil || !ok {
		return false, 0, err
	}
	if it.data == nil { // already in G4
		return false, s.releaseUpperLocked(o, idx, it.b, it.k), nil
	}
	o.mu.Unlock()
	err = s.sinkPut(ctx, o, int64(len(it.data)), func() error { return s.putTo(ctx, tiG4, it.k, it.data, true) })
	o.mu.Lock()
	return s.sinkDoneLocked(o, it, err)
}

// sinkRoomTries bounds how often sinkPut has G4 make room for one put
// (other puts may take the room it made before the put is retried).
const sinkRoomTries = 3

// sinkPut runs put, a sink's G4 put of n bytes, with no store lock held.
// When G4 refuses it for want of space (also while its health machine
// backs off a full G4) and G4 can make room (tier.RoomMaker: its size
// eviction of its oldest cache-class blocks, run on this goroutine, which
// is why no object lock may be held: G4's Retainer takes them), it makes
// room and puts again, at most sinkRoomTries times. A G4 that cannot make
// room (all it holds is retained or new) fails the sink with its error,
// which says so, instead of "tier full" alone.
func (s *Store) sinkPut(ctx context.Context, o *object, n int64, put func() error) error {
	// The object's blocks sunk already stay: a file larger than G4 fails
	// to sink whole instead of evicting its own first blocks (its only
	// copies now).
	keep := func(k tier.Key) bool { return k.Namespace == o.ns && k.Object == uint64(o.id) }
	err := put()
	rm, ok := s.g4.(tier.RoomMaker)
	for try := 0; ok && errors.Is(err, tier.ErrNoSpace) && try < sinkRoomTries; try++ {
		if rerr := rm.MakeRoom(ctx, n, keep); rerr != nil {
			return rerr
		}
		s.health[tiG4].RoomMade()
		err = put()
	}
	return err
}

// sinkPrepLocked decides what sinking block idx takes, o.mu held for
// writing: ok false if there is nothing to do (a hole, or a block dirty,
// busy or held: its write-back places it); it.data nil if the block has a
// G4 copy already (only its upper copies are to drop); otherwise its bytes
// read into buf and a busy span begun, to be ended by sinkDoneLocked.
// Errors: ErrNotExist, a read error.
func (s *Store) sinkPrepLocked(ctx context.Context, o *object, idx uint32, buf []byte) (it sinkItem, ok bool, err error) {
	b := o.blocks.get(idx)
	if o.deleted {
		return it, false, ErrNotExist
	}
	if b == nil || b.dirty || o.isBusy(idx) || o.held() {
		return it, false, nil // rewritten meanwhile: its write-back places it
	}
	it = sinkItem{idx: idx, b: b, k: o.key(idx)}
	if b.in.has(tiG4) {
		return it, true, nil
	}
	data := buf[:o.blockLen(idx)]
	if g := b.g2.Load(); g != nil {
		copyBlock(data, g, 0)
	} else if _, err := s.readLower(ctx, o, idx, b, data, 0); err != nil {
		return it, false, fmt.Errorf("sink %s: read: %w", it.k, err)
	}
	it.ver, it.data = b.version, data
	o.beginBusy(idx)
	return it, true, nil
}

// sinkDoneLocked applies the G4 put of it (err its result), o.mu held
// for writing: if the block is still the one read, it is recorded in G4
// and its upper copies dropped; a copy stored for a block rewritten or
// dropped meanwhile is discarded. It ends the busy span.
func (s *Store) sinkDoneLocked(o *object, it sinkItem, err error) (moved bool, released int, rerr error) {
	defer s.endBusyLocked(o, it.idx, true)
	b := it.b
	s.maybeStoredLocked(o, it.idx, it.k, err)
	live := !o.deleted && o.gen == it.k.Gen && o.blocks.get(it.idx) == b && b.version == it.ver
	if !live {
		if err == nil {
			s.discardCopyLocked(o, it.idx, s.g4, it.k)
		}
		return false, 0, nil // rewritten or dropped: its write-back places it
	}
	if err != nil {
		return false, 0, fmt.Errorf("sink %s: %w", it.k, err)
	}
	b.in.add(tiG4)
	o.clearStale(it.idx, staleG4)
	s.c.demotions[tiG4].Add(1)
	return true, s.releaseUpperLocked(o, it.idx, b, it.k), nil
}

// releaseUpperLocked drops the G3 and G2 copies of block idx, which has a
// G4 copy, and returns how many it dropped; o.mu held for writing.
func (s *Store) releaseUpperLocked(o *object, idx uint32, b *blockState, k tier.Key) (released int) {
	if b.in.has(tiG3) {
		// Until it is deleted the G3 copy would outlive a rewrite of the
		// key to G4: recorded stale, so the object is not recorded clean
		// with it.
		b.in.drop(tiG3)
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
	return released
}

// Demote moves the object's blocks out of G2 (the scheduler's "demote"
// command, used to relieve G2 before its high watermark forces local
// eviction): dirty blocks are written back first, then each G2 copy is
// dropped the way the evictor drops a victim (written to G3 first when
// admission predicts reuse and the block has only a G4 copy).
// Errors: ErrNotExist, ErrPinned, ErrInvalid in a G2-only store, tier and
// ctx errors from the flush.
func (s *Store) Demote(ctx context.Context, id ObjectID) (MoveResult, error) {
	res, err := s.demote(ctx, id)
	s.noteMoved(id, res)
	return res, err
}

func (s *Store) demote(ctx context.Context, id ObjectID) (MoveResult, error) {
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
		b := o.blocks.get(idx)
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
	r := Residency{Blocks: o.blocks.len(), Pinned: o.pinned, Kind: o.kind, Durability: o.dur, Namespace: o.ns, Size: o.size}
	for _, b := range o.blocks.all() {
		if b.g2.Load() != nil {
			r.G2++
		}
		if b.in.has(tiG3) {
			r.G3++
		}
		if b.in.has(tiG35) {
			r.G35++
		}
		if b.in.has(tiG4) {
			r.G4++
		}
	}
	return r, nil
}

// noteMoved emits EventMoved when a move changed where id's blocks are.
func (s *Store) noteMoved(id ObjectID, res MoveResult) {
	if res.Moved == 0 && res.Released == 0 {
		return
	}
	if o := s.get(id); o != nil {
		s.emit(EventMoved, o)
	}
}
