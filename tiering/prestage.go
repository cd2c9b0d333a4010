package tiering

// Prestage accounting: how much of what prestage brought up to G2 was read
// before it left (issue 14, "value, not only hit ratio").
//
// A G2 copy that Prestage copied up from a lower tier is marked
// (g2block.prestaged). The first read of it (a ReadAt that reaches it, or
// a passthrough open, which reads through the kernel) makes it useful; a
// copy freed unread (evicted, deleted, truncated away) is wasted, with its
// bytes. A block a reader brings up while prestage runs counts for the
// reader. Coverage is useful / (useful + promotions on demand): the share
// of reads from lower tiers that prestage turned into G2 hits.

// notePrestaged marks g, just installed by prestage.
func (s *Store) notePrestaged(g *g2block) {
	if g.prestaged.Swap(true) {
		return
	}
	s.c.prestaged.Add(1)
	s.c.prestagedBytes.Add(int64(g.n))
}

// usedPrestaged counts g as useful at its first read.
func (s *Store) usedPrestaged(g *g2block) {
	if g.prestaged.Load() && g.prestaged.CompareAndSwap(true, false) {
		s.c.prestageUseful.Add(1)
	}
}

// wastedPrestaged counts g as wasted when it leaves G2 unread.
func (s *Store) wastedPrestaged(g *g2block) {
	if g.prestaged.Load() && g.prestaged.CompareAndSwap(true, false) {
		s.c.prestageWasted.Add(1)
		s.c.prestageWastedBytes.Add(int64(g.n))
	}
}
