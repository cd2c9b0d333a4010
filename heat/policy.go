package heat

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// Order selects how a Policy ranks its resident keys for eviction.
type Order uint8

// Eviction orders.
const (
	// OrderDecay (the default) evicts the key with the lowest exponentially
	// decayed reference count: every reference adds 1 and the count halves
	// every HalfLife (the CRF of LRFU: D. Lee, J. Choi, J.-H. Kim, S. H.
	// Noh, S. L. Min, Y. Cho, C. S. Kim, "LRFU: A spectrum of policies that
	// subsumes the least recently used and least frequently used
	// policies", IEEE Trans. Computers 50(12), 2001). A key inserted after
	// a miss starts from the Sketch's estimate of its recent references,
	// so keys that come back soon after an eviction resume with their
	// history. This measured best on the Mooncake trace (heat/sim).
	OrderDecay Order = iota
	// OrderLRU2 evicts by second-most-recent access (see LRU2).
	OrderLRU2
	// OrderLRU evicts the least recently accessed key.
	OrderLRU
)

// String returns "decay", "lru2" or "lru".
func (o Order) String() string {
	switch o {
	case OrderDecay:
		return "decay"
	case OrderLRU2:
		return "lru2"
	case OrderLRU:
		return "lru"
	}
	return fmt.Sprintf("Order(%d)", uint8(o))
}

// Policy defaults.
const (
	// DefaultPolicyHalfLife is the OrderDecay half-life: 5 minutes, the
	// design's typical KV block lifetime ("most blocks live under 5
	// minutes"). heat/sim shows hit ratios within ±0.01 of this for
	// half-lives of 4–7 minutes on the Mooncake trace.
	DefaultPolicyHalfLife = 5 * time.Minute
	// DefaultPolicySampleFactor is the Policy sketch's W/C. The sketch is
	// the only memory of keys that are not resident, so it must outlive
	// many cache turnovers; twice TinyLFU's usual 10 (heat/sim on the
	// Mooncake trace at 5,000 blocks: W/C 10 → 0.160, 20 → 0.171, 40 →
	// 0.171 hit ratio; no change at 10,000 and 20,000 blocks).
	DefaultPolicySampleFactor = 20
	// DefaultReuseMinCount is the PredictReuse threshold: a block with any
	// reference still remembered by the sketch (within roughly the last
	// W..2W references) is predicted to be reused. Measured with
	// sim.SimulateTwoTier on the Mooncake trace, G2 = 5,000 and G3 =
	// 20,000 blocks (two Policies): keeping
	// every G2 victim in G3 adds 0.087 hit ratio for 0.29 G3 writes per
	// reference; threshold 1 adds 0.086 for 0.28; 2 adds 0.023 for 0.076;
	// 3 adds 0.006 for 0.017. Hits per write are about the same (0.3), so
	// raise it only to save NVMe write bandwidth or endurance.
	DefaultReuseMinCount = 1
)

// PolicyConfig configures a Policy. Zero fields take the defaults.
type PolicyConfig struct {
	// Capacity is the expected number of resident blocks (>= 1). It only
	// sizes the frequency sketch (about 8 bytes per block, plus a
	// doorkeeper of 4·W bits); the caller decides when to evict.
	Capacity int
	// Order is the eviction order (default OrderDecay).
	Order Order
	// HalfLife is OrderDecay's half-life (default DefaultPolicyHalfLife).
	HalfLife time.Duration
	// SampleFactor sets the sketch's sample size W = SampleFactor ·
	// Capacity increments between halvings (default
	// DefaultPolicySampleFactor).
	SampleFactor int
	// NoAdmission makes ShouldAdmit always true (every miss is kept).
	NoAdmission bool
	// ReuseMinCount is PredictReuse's threshold (default
	// DefaultReuseMinCount), in recent references.
	ReuseMinCount int
}

func (c *PolicyConfig) fill() error {
	if c.HalfLife == 0 {
		c.HalfLife = DefaultPolicyHalfLife
	}
	if c.SampleFactor == 0 {
		c.SampleFactor = DefaultPolicySampleFactor
	}
	if c.ReuseMinCount == 0 {
		c.ReuseMinCount = DefaultReuseMinCount
	}
	switch {
	case c.Capacity < 1:
		return fmt.Errorf("%w: capacity %d blocks must be >= 1", ErrConfig, c.Capacity)
	case c.Order > OrderLRU:
		return fmt.Errorf("%w: unknown order %d", ErrConfig, c.Order)
	case c.HalfLife < 0:
		return fmt.Errorf("%w: half-life %v must be positive", ErrConfig, c.HalfLife)
	case c.SampleFactor < 0:
		return fmt.Errorf("%w: sample factor %d must be positive", ErrConfig, c.SampleFactor)
	case c.ReuseMinCount < 0:
		return fmt.Errorf("%w: reuse min count %d must be positive", ErrConfig, c.ReuseMinCount)
	}
	return nil
}

// Placer is the placement protocol the tiering core drives (see the
// package documentation) and that Policy, AdaptivePolicy and
// DensityPolicy implement.
type Placer[K comparable] interface {
	Access(k K, h uint64, now time.Time) bool
	ShouldAdmit(h uint64, now time.Time) bool
	Insert(k K, h uint64, now time.Time)
	Victim() (K, bool)
	Remove(k K) bool
	Contains(k K) bool
	Len() int
	PredictReuse(h uint64) bool
}

// Policy ranks the blocks resident in one tier for eviction and decides
// admission. It combines an eviction order (OrderDecay by default, or
// LRU-2, or LRU) with a TinyLFU Sketch that remembers reference counts of
// all keys, resident or not. It never evicts by itself: the caller (which
// owns byte budgets and watermarks) asks Victim and calls Remove. The
// protocol is in the package documentation.
//
// Costs: Access, Insert and Remove are O(log n) in the resident count,
// Victim and ShouldAdmit O(1); memory per resident key is about twice the
// key's size plus 50 bytes (a heap slot and an index-map entry), plus the
// sketch (about 8 bytes per Capacity block and 4·W doorkeeper bits).
//
// A Policy is safe for concurrent use (one mutex).
type Policy[K comparable] struct {
	cfg PolicyConfig

	mu    sync.Mutex
	sk    *Sketch
	decay *rankHeap[K, float64] // OrderDecay: rank = log2(count) + t/halfLife
	lru2  *LRU2[K]              // OrderLRU2
	lru   *rankHeap[K, int64]   // OrderLRU: rank = last access (UnixNano)
	epoch int64                 // OrderDecay time origin (UnixNano of the first call)
	begun bool
}

// NewPolicy returns an empty Policy. It returns an error wrapping
// ErrConfig when cfg is invalid.
func NewPolicy[K comparable](cfg PolicyConfig) (*Policy[K], error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	p := &Policy[K]{cfg: cfg, sk: NewSketch(cfg.Capacity, cfg.SampleFactor*cfg.Capacity)}
	switch cfg.Order {
	case OrderDecay:
		p.decay = newRankHeap[K, float64]()
	case OrderLRU2:
		p.lru2 = NewLRU2[K]()
	case OrderLRU:
		p.lru = newRankHeap[K, int64]()
	}
	return p, nil
}

// Config returns the effective configuration (defaults filled in).
func (p *Policy[K]) Config() PolicyConfig { return p.cfg }

// clock converts now to OrderDecay's time unit (half-lives since the
// epoch). Called with p.mu held.
func (p *Policy[K]) clock(now int64) float64 {
	if !p.begun {
		p.epoch, p.begun = now, true
	}
	return float64(now-p.epoch) / float64(p.cfg.HalfLife)
}

// addRef returns the rank after one more reference at time t (in
// half-lives) of a key whose rank is r = log2(count at time 0 units):
// log2(2^(r-t) + 1) + t, computed without overflow.
func addRef(r, t float64) float64 {
	x := r - t // log2 of the decayed count now
	if x >= 0 {
		return r + math.Log1p(math.Exp2(-x))/math.Ln2
	}
	return t + math.Log1p(math.Exp2(x))/math.Ln2
}

// Access records one reference to k at now (a read, or the write of a new
// block) with k's hash h, and reports whether k is resident (a hit). It
// counts the reference in the sketch whether or not k is resident; it never
// inserts k. Call it exactly once per reference.
func (p *Policy[K]) Access(k K, h uint64, now time.Time) bool {
	n := now.UnixNano()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sk.Increment(h)
	switch {
	case p.decay != nil:
		it, ok := p.decay.get(k)
		if ok {
			p.decay.set(k, addRef(it.rank, p.clock(n)), 0, h)
		}
		return ok
	case p.lru2 != nil:
		if !p.lru2.Contains(k) {
			return false
		}
		p.lru2.touchNano(k, n, h)
		return true
	default:
		if !p.lru.has(k) {
			return false
		}
		p.lru.set(k, n, 0, h)
		return true
	}
}

// initialRank returns the OrderDecay rank of a key with hash h inserted at
// time t: its sketch estimate (at least 1) as a count at t.
func (p *Policy[K]) initialRank(h uint64, t float64) float64 {
	return math.Log2(float64(max(p.sk.Estimate(h), 1))) + t
}

// ShouldAdmit reports whether a block with hash h, just missed at now, is
// worth keeping at the cost of evicting the current Victim. Call it only
// when keeping the block requires an eviction (with free room, just
// Insert). It is true when the Policy is empty or NoAdmission is set.
//
// OrderDecay compares the candidate's estimated recent references with the
// victim's current decayed count; OrderLRU2 and OrderLRU use TinyLFU's test
// (Sketch.Admit) against the victim.
func (p *Policy[K]) ShouldAdmit(h uint64, now time.Time) bool {
	n := now.UnixNano()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cfg.NoAdmission {
		return true
	}
	switch {
	case p.decay != nil:
		v, ok := p.decay.min()
		return !ok || p.initialRank(h, p.clock(n)) > v.rank
	case p.lru2 != nil:
		v, ok := p.lru2.h.min()
		return !ok || p.sk.Admit(h, v.hash)
	default:
		v, ok := p.lru.min()
		return !ok || p.sk.Admit(h, v.hash)
	}
}

// Insert makes k (hash h) resident as of now. It does not count a
// reference (Access did); inserting a resident key does nothing.
func (p *Policy[K]) Insert(k K, h uint64, now time.Time) {
	n := now.UnixNano()
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.decay != nil:
		if !p.decay.has(k) {
			p.decay.set(k, p.initialRank(h, p.clock(n)), 0, h)
		}
	case p.lru2 != nil:
		if !p.lru2.Contains(k) {
			p.lru2.touchNano(k, n, h)
		}
	default:
		if !p.lru.has(k) {
			p.lru.set(k, n, 0, h)
		}
	}
}

// Victim returns the resident key to evict next, without removing it; ok
// is false when nothing is resident. The caller evicts it and calls Remove.
func (p *Policy[K]) Victim() (k K, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.decay != nil:
		it, ok := p.decay.min()
		return it.key, ok
	case p.lru2 != nil:
		return p.lru2.Victim()
	default:
		it, ok := p.lru.min()
		return it.key, ok
	}
}

// Remove makes k non-resident (evicted, demoted, deleted); its reference
// history stays in the sketch. It reports whether k was resident.
func (p *Policy[K]) Remove(k K) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.decay != nil:
		return p.decay.remove(k)
	case p.lru2 != nil:
		return p.lru2.Remove(k)
	default:
		return p.lru.remove(k)
	}
}

// Contains reports whether k is resident.
func (p *Policy[K]) Contains(k K) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.decay != nil:
		return p.decay.has(k)
	case p.lru2 != nil:
		return p.lru2.Contains(k)
	default:
		return p.lru.has(k)
	}
}

// Len returns the number of resident keys.
func (p *Policy[K]) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.decay != nil:
		return p.decay.len()
	case p.lru2 != nil:
		return p.lru2.Len()
	default:
		return p.lru.len()
	}
}

// Estimate returns the sketch's estimate of recent references to the
// block with hash h, in [0, 16] (see Sketch.Estimate).
func (p *Policy[K]) Estimate(h uint64) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sk.Estimate(h)
}

// PredictReuse reports whether the block with hash h is predicted to be
// referenced again: its estimated recent references are at least
// ReuseMinCount. The core uses it to decide whether a block leaving G2 is
// worth writing to G3.
func (p *Policy[K]) PredictReuse(h uint64) bool {
	return p.Estimate(h) >= p.cfg.ReuseMinCount
}

// shiftRank adds delta (in half-lives) to the OrderDecay rank of the
// resident key k: a negative delta makes it be evicted as if its count
// were 2^delta times smaller. It does nothing for other orders or a key
// not resident.
func (p *Policy[K]) shiftRank(k K, delta float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.decay == nil {
		return
	}
	if it, ok := p.decay.get(k); ok {
		p.decay.set(k, it.rank+delta, it.aux, it.hash)
	}
}
