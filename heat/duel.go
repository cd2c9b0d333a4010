package heat

// duel is the choice between two experts that AdaptivePolicy (decay or
// LRU) and ArbiterPolicy (decay or density) make: 1 reference in rate
// (by hash) is replayed through a shadow cache of shCap keys per expert
// (SHARDS-style spatial sampling, Waldspurger et al., "Cache Modeling and
// Optimization using Miniature Simulations", USENIX ATC 2017); each
// expert's score is its shadow hits, decayed by forget per sampled
// reference (a window of about scoreWindow shadow capacities), and the
// followed expert changes when the other's score leads by more than
// switchMargin (regret-driven choice as in LeCaR, Vietri et al.,
// HotStorage 2018). Not safe for concurrent use: its owner's lock guards
// it.
type duel struct {
	rate   uint64 // a key is sampled when Mix64(h^salt)%rate == 0
	shCap  int    // keys per shadow cache
	forget float64
	scores [2]float64 // decayed shadow hits: first, second expert
	second bool       // the second expert is followed
}

// newDuel returns a duel for shadows of shCap keys sampled 1 in rate (as
// shadowSize gives them), following the second expert at first when
// second is set.
func newDuel(rate uint64, shCap int, second bool) duel {
	return duel{rate: rate, shCap: shCap, forget: 1 - 1/float64(scoreWindow*shCap), second: second}
}

// sampled reports whether the reference of hash h is replayed through
// the shadows.
func (d *duel) sampled(h uint64) bool {
	return d.rate == 1 || Mix64(h^0x5851f42d4c957f2d)%d.rate == 0
}

// score records one sampled reference: whether the first and the second
// expert's shadow hit it.
func (d *duel) score(first, second bool) {
	d.scores[0] *= d.forget
	d.scores[1] *= d.forget
	if first {
		d.scores[0]++
	}
	if second {
		d.scores[1]++
	}
	switch {
	case d.second && d.scores[0] > d.scores[1]*(1+switchMargin):
		d.second = false
	case !d.second && d.scores[1] > d.scores[0]*(1+switchMargin):
		d.second = true
	}
}
