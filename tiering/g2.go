package tiering

import (
	"context"
	"fmt"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// allocG2 returns a zeroed G2 buffer of at least n bytes and accounts for
// it. It never waits: callers that must respect the budget wait first with
// waitRoom (writers) or ask admitG2 (promotions).
func (s *Store) allocG2(n int, pinned bool) (*g2block, error) {
	buf, err := s.pool.get(n)
	if err != nil {
		return nil, err
	}
	used := s.g2used.Add(int64(len(buf)))
	s.g2blocks.Add(1)
	if pinned {
		s.g2pinned.Add(int64(len(buf)))
	}
	if float64(used) > s.limits().High*float64(s.limits().Bytes) {
		s.needEvict.broadcast()
	}
	return &g2block{buf: buf}, nil
}

// freeG2 releases g (already detached from its block). r is removed from
// the eviction order. The caller holds the object's write lock and has
// cleared or will clear the block's dirty state itself.
func (s *Store) freeG2(r bref, g *g2block, dirty, pinned bool) {
	s.g2mu.Lock()
	s.place.remove(r)
	s.g2mu.Unlock()
	s.releaseG2(g, pinned)
}

// releaseG2 gives back a G2 buffer's memory and accounting. Unlike freeG2
// it leaves the eviction order alone: it is for a buffer that was never
// installed in its block (a promotion that failed, or lost the race to
// another reader's, whose block may be in the order by now and must stay
// evictable).
func (s *Store) releaseG2(g *g2block, pinned bool) {
	s.wastedPrestaged(g)
	s.g2used.Add(-int64(len(g.buf)))
	s.g2blocks.Add(-1)
	if pinned {
		s.g2pinned.Add(-int64(len(g.buf)))
	}
	if g.mf != nil {
		g.mf.punch(g.off, int64(cap(g.buf)))
	} else {
		s.pool.put(g.buf)
	}
	s.space.broadcast()
}

// moveG2 makes ng block b's G2 copy in place of g, with g's bytes, and
// moves b's dirty accounting to its size. The caller frees or unaccounts
// g. o.mu held for writing.
func (s *Store) moveG2(b *blockState, g, ng *g2block) {
	copy(ng.buf, g.buf[:g.n])
	ng.n = g.n
	ng.prestaged.Store(g.prestaged.Swap(false))
	b.g2.Store(ng)
	if b.dirty {
		delta := int64(len(ng.buf) - len(g.buf))
		b.w().dirtyN += delta
		s.g2dirty.Add(delta)
	}
}

// allocBlock returns a zeroed G2 buffer for block idx of o that will hold
// at least n bytes: a slice of o's memory file when it has one, else a
// pool buffer (allocG2). o.mu held.
func (s *Store) allocBlock(o *object, idx uint32, n int) (*g2block, error) {
	if o.mf != nil {
		return s.memBlock(o, idx, n)
	}
	return s.allocG2(n, o.pinned)
}

// waitRoom blocks a writer (holding no lock) until G2 has room for need
// more bytes and dirty bytes are under their bound, or ctx ends. It never
// waits without bound: with dirty bytes at their bound and no write-back
// progress for Config.WriteTimeout it fails (stallError: ErrNoSpace or
// ErrUnavailable); in a G2-only store it fails with ErrNoSpace once the
// evictor has had a second and found nothing to free.
func (s *Store) waitRoom(ctx context.Context, need int64) error {
	ok := func() bool { // blocks held back by a hung device's late puts do not count (lateCalls)
		owed := s.g2dirty.Load() - s.late.bytes.Load()
		return owed+need <= s.limits().Dirty || owed <= 0
	}
	room := func() bool {
		u := s.g2used.Load()
		return u+need <= s.limits().Bytes || u == 0
	}
	if ok() && room() {
		return nil
	}
	s.c.writerWaits.Add(1)
	if !ok() {
		s.expediteAll()
	}
	for w := s.roomWanted.Load(); need > w && !s.roomWanted.CompareAndSwap(w, need); w = s.roomWanted.Load() {
	}
	defer s.roomWanted.CompareAndSwap(need, 0)
	s.needEvict.broadcast()
	s.wbReady.broadcast()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	start := time.Now()
	lastDone, lastProgress := s.wbDone.Load(), start
	for {
		ch := s.space.c()
		if ok() && room() {
			return nil
		}
		if s.closed.Load() {
			return ErrClosed
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			if s.volatile && !room() {
				return fmt.Errorf("G2 full (%d of %d bytes) and nothing evictable, no tier below G2: %w",
					s.g2used.Load(), s.limits().Bytes, tier.ErrNoSpace)
			}
			// Nothing evictable (everything pinned or dirty and the lower
			// tiers stuck): let the write overshoot rather than deadlock;
			// the dirty bound still holds writers back.
			if ok() {
				return nil
			}
			if d := s.wbDone.Load(); d != lastDone {
				lastDone, lastProgress = d, time.Now()
			} else if time.Since(lastProgress) >= s.cfg.WriteTimeout {
				return s.stallError("write")
			} else if s.writeBackRefused() {
				return s.downError("write")
			}
			if time.Since(start) >= s.waitBound() {
				return s.starveError("write")
			}
			s.needEvict.broadcast()
			s.wbReady.broadcast()
		}
	}
}

// admitG2 decides whether a block read from a lower tier is promoted into
// G2: always while G2 is under its high watermark; above it only when the
// frequency sketch rates the block above the current eviction victim
// (TinyLFU admission).
func (s *Store) admitG2(r bref, n int) bool {
	if float64(s.g2used.Load()+int64(n)) <= s.limits().High*float64(s.limits().Bytes) {
		return true
	}
	if s.g2used.Load()+int64(n) > s.limits().Bytes {
		return false
	}
	return s.place.policy.ShouldAdmit(r.hash(), s.clk.Now())
}

// touch records an access for heat and admission (and, for blocks in G2
// that are evictable, the eviction order).
func (s *Store) touch(r bref, inPolicy bool) {
	s.g2mu.Lock()
	s.place.access(r, inPolicy, s.clk.Now())
	s.g2mu.Unlock()
}
