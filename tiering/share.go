package tiering

import (
	"context"
	"fmt"
	"sort"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// Share copies every block of the object into the shared pool tier (G3.5)
// so other hosts can read it (the scheduler's "share" command): dirty
// blocks are written back first (Flush), then each block without a pool
// copy is put there from G2 or read from G3/G4. The host keeps its own
// copies: sharing adds a copy, it does not move one, so reclaiming the
// pool never costs the holder its data. A block rewritten meanwhile is not
// marked shared (its pool copy is withdrawn by the write). It returns the
// number of blocks put. Errors: ErrNotExist, ErrInvalid without a G3.5
// tier, tier errors (tier.ErrUnavailable while the pool is in bypass),
// ctx errors.
func (s *Store) Share(ctx context.Context, id ObjectID) (int, error) {
	if s.g35 == nil {
		return 0, fmt.Errorf("%w: share: no G3.5 tier configured", ErrInvalid)
	}
	if err := s.Flush(ctx, id); err != nil {
		return 0, err
	}
	o, err := s.rlockLive(id)
	if err != nil {
		return 0, err
	}
	idxs := make([]uint32, 0, o.blocks.len())
	for idx := range o.blocks.all() {
		idxs = append(idxs, idx)
	}
	o.mu.RUnlock()
	sort.Slice(idxs, func(i, j int) bool { return idxs[i] < idxs[j] })
	buf, err := s.pool.get(tier.MaxBlockSize)
	if err != nil {
		return 0, err
	}
	defer s.pool.put(buf)
	n := 0
	for _, idx := range idxs {
		put, err := s.shareBlock(ctx, o, idx, buf)
		if put {
			n++
		}
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func (s *Store) shareBlock(ctx context.Context, o *object, idx uint32, buf []byte) (bool, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	b := o.blocks.get(idx)
	if o.deleted {
		return false, ErrNotExist
	}
	if b == nil || b.in.has(tiG35) || b.dirty || o.isBusy(idx) {
		return false, nil
	}
	k := o.key(idx)
	data := buf[:o.blockLen(idx)]
	if g := b.g2.Load(); g != nil {
		copyBlock(data, g, 0)
	} else if _, err := s.readLower(ctx, o, idx, b, data, 0); err != nil {
		return false, fmt.Errorf("share %s: read: %w", k, err)
	}
	ver := b.version
	o.beginBusy(idx)
	o.mu.Unlock()
	err := s.putTo(ctx, tiG35, k, data, true)
	o.mu.Lock()
	s.endBusyLocked(o, idx, true)
	live := !o.deleted && o.gen == k.Gen && o.blocks.get(idx) == b && b.version == ver && !b.dirty
	if err != nil {
		return false, fmt.Errorf("share %s: %w", k, err)
	}
	if !live {
		s.gc(s.g35, k) // rewritten or deleted meanwhile: withdraw the copy
		return false, nil
	}
	b.in.add(tiG35)
	s.c.demotions[tiG35].Add(1)
	return true, nil
}

// Import creates an object whose size bytes live only in the shared pool
// (a file another host shared): blocks 0..⌈size/blockSize⌉-1 are marked as
// held by G3.5 and read from it on demand (then promoted like any other
// block). register is called with the new object's id and generation
// before the object becomes visible, so the G3.5 tier can map the
// object's block keys to the pool records (it must not call back into the
// Store); its error aborts the import. Imported objects are of class
// DurabilityCache (kind is their label) and are never recorded
// in the metadata database: after a restart they are gone (the engine
// recomputes, or imports again). Errors: ErrInvalid (no G3.5 tier, bad
// block size or size), ErrClosed, register's error.
func (s *Store) Import(ns string, blockSize int, kind string, size int64, register func(id ObjectID, gen uint64) error) (ObjectID, error) {
	if s.g35 == nil {
		return 0, fmt.Errorf("%w: import: no G3.5 tier configured", ErrInvalid)
	}
	if s.closed.Load() {
		return 0, ErrClosed
	}
	if blockSize < tier.MinBlockSize || blockSize > tier.MaxBlockSize || blockSize&(blockSize-1) != 0 {
		return 0, fmt.Errorf("%w: block size %d", ErrInvalid, blockSize)
	}
	if size < 0 || size > maxObjectSize {
		return 0, fmt.Errorf("%w: size %d", ErrInvalid, size)
	}
	id, err := s.allocID()
	if err != nil {
		return 0, err
	}
	o := &object{id: id, ns: ns, kind: kind, bs: blockSize, gen: 1, created: s.clk.Now(), size: size}
	// metaDirty stays false: nothing of an import is this host's to keep
	// (a local write to it marks it, like any change).
	n := (size + int64(blockSize) - 1) / int64(blockSize)
	for i := int64(0); i < n; i++ {
		o.blocks.set(uint32(i), &blockState{in: tiersOf(tiG35)})
	}
	// From register until the object is visible its pool keys belong to
	// no known object: CollectGarbage must not take them for garbage.
	s.importing.Add(1)
	defer s.importing.Add(-1)
	if err := register(id, o.gen); err != nil {
		return 0, err
	}
	s.countInLocked(o) // not shared yet
	s.mu.Lock()
	s.objects[id] = o
	s.mu.Unlock()
	s.touched(id)
	s.emit(EventCreated, o)
	return id, nil
}

// SharedBlocks returns the indexes of the object's blocks that have a
// copy in the shared pool, in order. Errors: ErrNotExist.
func (s *Store) SharedBlocks(id ObjectID) ([]uint32, error) {
	o, err := s.rlockLive(id)
	if err != nil {
		return nil, err
	}
	defer o.mu.RUnlock()
	var out []uint32
	for idx, b := range o.blocks.all() {
		if b.in.has(tiG35) {
			out = append(out, idx)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}

// Unshare forgets the pool copies of the given blocks of the object (their
// extent is being reclaimed); blocks with no other copy are lost, and so
// is the object. Unknown objects are ignored.
func (s *Store) Unshare(id ObjectID, gen uint64, idxs []uint32) {
	o := s.get(id)
	if o == nil {
		return
	}
	o.mu.Lock()
	if o.deleted || o.gen != gen {
		o.mu.Unlock()
		return
	}
	lost := false
	for _, idx := range idxs {
		b := o.blocks.get(idx)
		if b == nil || !b.in.has(tiG35) {
			continue
		}
		b.in.drop(tiG35)
		if !b.in.has(tiG3) && !b.in.has(tiG4) && b.g2.Load() == nil {
			lost = true
		}
	}
	o.mu.Unlock()
	if lost {
		s.lose(id, fmt.Errorf("pool extent reclaimed: %w", tier.ErrNotFound))
	}
}

// LocalCopies reports whether every written block of the object has a
// copy outside the shared pool (G2, G3 or G4): such an object can drop
// its pool copies and be shared again without loss. Errors: ErrNotExist.
func (s *Store) LocalCopies(id ObjectID) (bool, error) {
	o, err := s.rlockLive(id)
	if err != nil {
		return false, err
	}
	defer o.mu.RUnlock()
	for _, b := range o.blocks.all() {
		if b.g2.Load() == nil && !b.in.has(tiG3) && !b.in.has(tiG4) {
			return false, nil
		}
	}
	return true, nil
}
