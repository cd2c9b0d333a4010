package tiering

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/health"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// Batched restores from G4 (issue 15, "fewer, larger objects"): a sunk
// file's blocks sit in G4 pack objects, several blocks per object. Read
// one block at a time they would cost one GET each; when a block to be
// brought up to G2 has its only copy in G4 and G4 reads runs
// (tier.RunReader), the core brings up with it the following blocks of
// the object that live in the same pack object and have no other copy
// either, with one GetBlocks (one ranged GET), so that a sequential read
// or a prestage of an 8 MiB file costs about one request instead of 32.
//
// The run is bounded by restoreRunBytes and by the G2 room the caller
// allows: a reader's batch stays under G2's high watermark (the one block
// it asked for is admitted as before, by admitG2); a prestage's fills G2
// up to its budget, as prestage does block by block. Every block of the
// run is verified against its CRC32C by the tier before it is installed;
// a block that fails is quarantined by the tier and ends the run: the
// blocks before it are installed, it and those after it are not (each is
// read on its own later, and a corrupt one is then a miss, never wrong
// bytes). Blocks brought up along with the one asked for are clean G2
// copies that keep their G4 copy, evictable as any promoted block, and
// count as promotions.

// restoreRunBytes bounds the bytes one batched G4 read brings up: 16 MiB,
// the default pack size (a run never spans two pack objects anyway).
const restoreRunBytes = 16 << 20

// runFromG4 reports whether block b of a live object should be brought up
// with a batched G4 read: its only copy below G2 is G4's and G4 reads
// runs.
func (s *Store) runFromG4(b *blockState) (tier.RunReader, bool) {
	if b == nil || !b.in.has(tiG4) || b.in.has(tiG3) || b.in.has(tiG35) || b.g2.Load() != nil {
		return nil, false
	}
	rr, ok := s.g4.(tier.RunReader)
	return rr, ok
}

// g4Run returns the run of blocks idx, idx+1, ... of o that one batched
// G4 read brings up (see above), at most limit blocks: 0 when block idx
// is not read as a run (not G4-only, G4 not a tier.RunReader), else at
// least 1. o.mu held.
func (s *Store) g4Run(o *object, idx uint32, limit int) (tier.RunReader, int) {
	rr, ok := s.runFromG4(o.blocks.get(idx))
	if !ok {
		return nil, 0
	}
	n := rr.ReadRun(o.key(idx), max(limit, 1))
	// Cut at the first block that is not G4-only (a hole, in G2 already,
	// or with a faster copy to read it from).
	run := min(n, 1)
	for ; run < n; run++ {
		if _, ok := s.runFromG4(o.blocks.get(idx + uint32(run))); !ok {
			break
		}
	}
	return rr, run
}

// runLimit is how many blocks of o a batched read may bring up with a
// block of blen bytes, given room bytes of G2 beside it.
func runLimit(o *object, blen int, room int64) int {
	return int(min(restoreRunBytes, max(room, 0)+int64(blen)) / int64(max(o.bs, 1)))
}

// readG4Run reads the run of blocks idx.. of o into bufs (one per block,
// each its block's length) with one GetBlocks through G4's health
// machine, and returns how many leading blocks it read, each verified.
// When it read none it returns why, as readLower would for block idx
// alone: tier.ErrNotFound or tier.ErrCorrupt (a loss), ctx's error, or an
// I/O error (G4 refused by its health machine, or unavailable), so the
// caller does not wait for G4 a second time. o.mu held.
func (s *Store) readG4Run(ctx context.Context, rr tier.RunReader, o *object, idx uint32, bufs [][]byte) (int, error) {
	h := s.health[tiG4]
	if err := h.Admit(health.Get); err != nil {
		return 0, fmt.Errorf("read %s: %w", o.key(idx), err)
	}
	keys := make([]tier.Key, len(bufs))
	for i := range keys {
		keys[i] = o.key(idx + uint32(i))
	}
	t0 := time.Now()
	ns, err := rr.GetBlocks(ctx, keys, bufs)
	h.Observe(health.Get, err)
	if err != nil {
		if errors.Is(err, tier.ErrCorrupt) {
			s.c.crcErrors.Add(1)
			s.log.Error("corrupt block quarantined", "tier", s.g4.Name(), "run", keys[0].String(), "blocks", len(keys), "err", err)
		} else if ctx.Err() == nil {
			s.log.Warn("tier read failed", "tier", s.g4.Name(), "run", keys[0].String(), "blocks", len(keys), "err", err)
		}
	}
	good := 0
	for good < len(ns) && ns[good] > 0 { // bytes past a short stored block stay zero
		good++
	}
	switch {
	case good > 0:
		s.noteRead(tiG4, time.Since(t0)/time.Duration(good))
		s.c.g4RunReads.Add(1)
		s.c.g4RunBlocks.Add(int64(good - 1))
		return good, nil
	case err == nil:
		return 0, fmt.Errorf("read %s: %w: G4 returned no block of the run", keys[0], tier.ErrUnavailable) // cannot happen (tier.RunReader)
	case errors.Is(err, tier.ErrNotFound) || errors.Is(err, tier.ErrCorrupt):
		return 0, err
	case ctx.Err() != nil:
		return 0, ctx.Err()
	}
	return 0, fmt.Errorf("read %s: %w", keys[0], err)
}

// promoteRunLocked brings block idx of o (state b) up to G2 like
// promoteLocked, and with it the following blocks of the run G4 reads
// with the same request (see above), as many as fit in room bytes of G2
// beside block idx. It returns false, with nothing done, when the block
// is not read as a run (not G4-only, G4 not a tier.RunReader, a run of
// one, a memory-file object: toMemFileLocked batches those); the caller
// then uses promoteLocked. When the batched read fails for block idx
// itself it returns true with readG4Run's error. When prestaged is set,
// every block installed is marked as prestage's. o.mu is held for
// reading or writing.
func (s *Store) promoteRunLocked(ctx context.Context, o *object, idx uint32, room int64, prestaged bool) (*g2block, int, bool, error) {
	if o.mf != nil {
		return nil, 0, false, nil
	}
	rr, run := s.g4Run(o, idx, runLimit(o, o.blockLen(idx), room))
	if run < 2 {
		return nil, 0, false, nil
	}
	bufs := make([][]byte, 0, run)
	gs := make([]*g2block, 0, run)
	defer func() {
		for _, g := range gs {
			if g != nil {
				s.releaseG2(g, o.pinned)
			}
		}
	}()
	for i := range run {
		j := idx + uint32(i)
		g, err := s.allocBlock(o, j, max(o.blockLen(j), 1))
		if err != nil {
			break
		}
		bufs, gs = append(bufs, g.buf[:o.blockLen(j)]), append(gs, g)
	}
	if len(bufs) < 2 {
		return nil, 0, false, nil
	}
	good, err := s.readG4Run(ctx, rr, o, idx, bufs)
	if good == 0 {
		return nil, 0, true, err
	}
	var first *g2block
	src := tiG4
	for i := range good {
		j := idx + uint32(i)
		g := gs[i]
		gs[i] = nil
		g.n = o.blockLen(j)
		b := o.blocks.get(j)
		if !b.g2.CompareAndSwap(nil, g) {
			s.releaseG2(g, o.pinned) // another reader's copy is installed
			if i == 0 {
				first, src = b.g2.Load(), tiG2
			}
			continue
		}
		s.c.promotions.Add(1)
		if i == 0 {
			first = g
			continue
		}
		if prestaged {
			s.notePrestaged(g)
		}
		s.touch(bref{o.id, j}, !b.dirty && !o.held())
	}
	return first, src, true, nil
}
