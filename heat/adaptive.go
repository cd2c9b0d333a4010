package heat

import (
	"sync"
	"time"
)

// Adaptive-policy defaults.
const (
	// DefaultShadowRate is the fraction 1/DefaultShadowRate of the key
	// space (by hash) that an AdaptivePolicy replays through its two
	// shadow caches.
	DefaultShadowRate = 8
	// minShadowCap is the smallest shadow capacity, in blocks: below it
	// the shadows sample a larger fraction of the keys (down to all).
	minShadowCap = 512
	// scoreWindow is the shadows' scoring window in multiples of the
	// sampled references per shadow capacity: hits are weighted by
	// exp(-age/(scoreWindow·shadow capacity)).
	scoreWindow = 8
	// switchMargin is the relative lead a shadow needs over the other
	// before the live order switches to it (hysteresis).
	switchMargin = 0.02
)

// AdaptivePolicy is a Policy whose eviction order follows whichever of two
// experts has been hitting more lately: OrderDecay (LRFU with the
// Policy's half-life and sketch) or plain LRU. It measures them with
// miniature simulations (C. A. Waldspurger, T. Saemundsson, I. Ahmad,
// N. Park, "Cache Modeling and Optimization using Miniature Simulations",
// USENIX ATC 2017): the references to keys whose hash falls in a fixed
// 1/R sample are replayed through two shadow caches of Capacity/R keys,
// one per expert, and each shadow's hits are counted with exponential
// forgetting. The live resident set is ordered by both experts at once
// (two heaps); Victim takes the minimum of the leader's. Because the
// shadows are exact simulations of each expert on a spatial sample, the
// live policy tracks the better of LRFU and LRU on the current workload
// instead of committing to one (the TinyLFU/LRFU default falls below LRU
// on recency-driven traces).
//
// Costs: Access, Insert and Remove are O(log n) (two heaps, plus a shadow
// update for 1 in R references); memory per resident key is that of a
// Policy plus one more heap slot and map entry, plus the shadows (2/R of
// the live state, and their own sketch).
//
// An AdaptivePolicy is safe for concurrent use (one mutex).
type AdaptivePolicy[K comparable] struct {
	mu   sync.Mutex
	live *Policy[K]          // decay order and sketch for the live keys
	lru  *rankHeap[K, int64] // the live keys by last access
	cfg  PolicyConfig

	shDecay, shLRU *Policy[uint64] // the shadows (keys = hashes)
	// duel follows decay (first) or LRU (second, duel.second).
	duel duel
}

// NewAdaptivePolicy returns an empty AdaptivePolicy. cfg is as for
// NewPolicy; cfg.Order is ignored (the experts are OrderDecay and LRU).
func NewAdaptivePolicy[K comparable](cfg PolicyConfig) (*AdaptivePolicy[K], error) {
	cfg.Order = OrderDecay
	live, err := NewPolicy[K](cfg)
	if err != nil {
		return nil, err
	}
	cfg = live.Config()
	rate, shCap := shadowSize(cfg.Capacity)
	scfg := cfg
	scfg.Capacity = shCap
	shDecay, err := NewPolicy[uint64](scfg)
	if err != nil {
		return nil, err
	}
	scfg.Order, scfg.NoAdmission = OrderLRU, true
	shLRU, err := NewPolicy[uint64](scfg)
	if err != nil {
		return nil, err
	}
	return &AdaptivePolicy[K]{live: live, lru: newRankHeap[K, int64](), cfg: cfg, shDecay: shDecay, shLRU: shLRU,
		duel: newDuel(rate, shCap, false)}, nil
}

// shadowSize returns the sampling rate R (a key is sampled when its mixed
// hash is 0 modulo R) and the capacity of a shadow cache for a live cache
// of capacity blocks: R = DefaultShadowRate, halved while the shadow would
// hold fewer than minShadowCap blocks.
func shadowSize(capacity int) (rate uint64, shCap int) {
	rate = uint64(DefaultShadowRate)
	for rate > 1 && capacity/int(rate) < minShadowCap {
		rate /= 2
	}
	return rate, max(capacity/int(rate), 1)
}

// Config returns the effective configuration (defaults filled in).
func (p *AdaptivePolicy[K]) Config() PolicyConfig { return p.cfg }

// Leader returns the eviction order currently followed: OrderDecay or
// OrderLRU.
func (p *AdaptivePolicy[K]) Leader() Order {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.duel.second {
		return OrderLRU
	}
	return OrderDecay
}

// shadow replays one reference of the sampled key h through a shadow
// cache of p.duel.shCap keys, and reports a hit.
func (p *AdaptivePolicy[K]) shadow(s *Policy[uint64], h uint64, now time.Time) bool {
	return replayRef(s, h, h, p.duel.shCap, now)
}

// replayRef makes one reference to k (hash h) as the simulator and the
// core drive a Placer holding at most capacity keys: Access, and on a miss
// ShouldAdmit, Victim and Remove when full, then Insert. It reports a hit.
func replayRef[K comparable](p Placer[K], k K, h uint64, capacity int, now time.Time) bool {
	if p.Access(k, h, now) {
		return true
	}
	if p.Len() >= capacity {
		if !p.ShouldAdmit(h, now) {
			return false
		}
		if v, ok := p.Victim(); ok {
			p.Remove(v)
		}
	}
	p.Insert(k, h, now)
	return false
}

// Access is Policy.Access: it records one reference to k (hash h) and
// reports whether k is resident.
func (p *AdaptivePolicy[K]) Access(k K, h uint64, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.duel.sampled(h) {
		p.duel.score(p.shadow(p.shDecay, h, now), p.shadow(p.shLRU, h, now))
	}
	hit := p.live.Access(k, h, now)
	if hit {
		p.lru.set(k, now.UnixNano(), 0, h)
	}
	return hit
}

// ShouldAdmit is Policy.ShouldAdmit while the decay order leads; while LRU
// leads every miss is admitted.
func (p *AdaptivePolicy[K]) ShouldAdmit(h uint64, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.duel.second || p.live.ShouldAdmit(h, now)
}

// Insert is Policy.Insert.
func (p *AdaptivePolicy[K]) Insert(k K, h uint64, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.lru.has(k) {
		p.live.Insert(k, h, now)
		p.lru.set(k, now.UnixNano(), 0, h)
	}
}

// Victim returns the resident key the leading order evicts next.
func (p *AdaptivePolicy[K]) Victim() (k K, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.duel.second {
		it, ok := p.lru.min()
		return it.key, ok
	}
	return p.live.Victim()
}

// Remove is Policy.Remove.
func (p *AdaptivePolicy[K]) Remove(k K) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lru.remove(k)
	return p.live.Remove(k)
}

// Contains reports whether k is resident.
func (p *AdaptivePolicy[K]) Contains(k K) bool { return p.live.Contains(k) }

// Len returns the number of resident keys.
func (p *AdaptivePolicy[K]) Len() int { return p.live.Len() }

// Estimate is Policy.Estimate.
func (p *AdaptivePolicy[K]) Estimate(h uint64) int { return p.live.Estimate(h) }

// PredictReuse is Policy.PredictReuse.
func (p *AdaptivePolicy[K]) PredictReuse(h uint64) bool { return p.live.PredictReuse(h) }
