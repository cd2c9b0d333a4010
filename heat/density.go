package heat

import (
	"math/bits"
	"sync"
	"time"
)

// DensityPolicy parameters (measured with heat/sim on the Mooncake trace
// and the synthetic shapes; see docs/tiering.md).
const (
	// densitySamples is the number of resident blocks drawn at random to
	// pick a victim (the one of lowest hit density). 16 and 128 measured
	// within 0.002 of 64 on the bundled trace.
	densitySamples = 64
	// densityRun is the number of neighbouring entries read per random
	// draw (see pick).
	densityRun = 16
	// ageSub is the number of age buckets per power of two.
	ageSub = 8
	// nAge is the number of age buckets: ages (in references) below 2^40
	// have their own, older ones share the last.
	nAge = ageSub * 38
	// nRefClass and nDepthClass are class dimensions: log2 buckets of a
	// block's known references (0, 1, 2–3, 4–7, 8–15, 16+) and of its
	// depth (0, 1, 2–3, …, 32+). The third is whether the block has been
	// followed by the next block of its chain (2 values): on the bundled
	// trace a chain's last block, seen once, came back 0.5–1.3% of the
	// time, the other blocks seen once 22–37% (it is the partial block of
	// a prefix, which the next turn extends under a new hash).
	nRefClass   = 6
	nDepthClass = 7
	nClass      = nRefClass * nDepthClass * 2 // × followed
	// densityForget is the weight the event counts keep at each
	// reconfiguration, so older periods fade (0.5 lost up to 0.013 on the
	// bundled trace, 0.99 changed it by under 0.001).
	densityForget = 0.9
	// minDensityPeriod is the least number of references between two
	// reconfigurations; the period is max(residents, minDensityPeriod).
	minDensityPeriod = 1024
)

// ageBucket maps an age in references to its log-linear bucket: exact
// below ageSub, then ageSub buckets per power of two.
func ageBucket(a uint64) int {
	if a < ageSub {
		return int(a)
	}
	e := bits.Len64(a) - 4 // a>>e in [8, 16)
	return min(e*ageSub+int(a>>e), nAge-1)
}

// ageWidth is the number of ages in bucket b.
func ageWidth(b int) float64 {
	if b < 2*ageSub {
		return 1
	}
	return float64(uint64(1) << (b/ageSub - 1))
}

type densityEntry[K comparable] struct {
	key   K
	last  uint64 // clock of the last reference
	refs  uint8  // known references (sketch estimate at insert + hits), saturating
	depth uint8  // depth class
	// followed is 1 once the next block of its chain (depth+1) has
	// been referenced right after it: a chain's tail is rarely reused.
	followed uint8
}

type densityClass struct {
	hits, evicts [nAge]float32
	density      [nAge]float32
}

// DensityPolicy evicts the resident block with the lowest expected hits per
// unit of cache time ("hit density", after LHD: N. Beckmann, H. Chen,
// A. Cidon, "LHD: Improving Cache Hit Rate by Maximizing Hit Density",
// NSDI 2018). Blocks are grouped in classes by known references (the
// TinyLFU sketch's estimate when inserted, plus hits), depth in their
// prefix chain and whether the chain's next block was referenced right
// after them (a chain's last block is seldom reused); per class and age
// (references since the block's last use) it counts hits and evictions, and from them computes the hit density of
// a block of that class at that age. The victim is the lowest-density
// block among densitySamples residents drawn at random. Removed blocks
// stay a while as ghosts, whose comeback counts as a hit at its age, so
// the statistics see reuse the cache itself cut short; and a class is
// never rated below the class with fewer references. It needs no
// half-life: time is counted in references.
//
// On the synthetic shapes of heat/sim it never falls more than 0.001 below
// the better of LRU and ARC; on the Mooncake trace it beats both but not
// the OrderDecay Policy at every size (docs/tiering.md).
//
// Costs: Access, Insert and Remove are O(1) (map and slice updates),
// Victim draws densitySamples residents; every max(residents, 1024)
// references the densities are recomputed (O(classes × ages), about
// 25,500 cells). Memory per resident block is about 210 bytes for uint64
// keys, ghosts and sketch included (BenchmarkStatePerBlock).
//
// A DensityPolicy is safe for concurrent use (one mutex).
type DensityPolicy[K comparable] struct {
	mu    sync.Mutex
	cfg   PolicyConfig
	depth func(K) int
	sk    *Sketch
	// sharedSketch is set when sk belongs to an ArbiterPolicy's decay
	// expert, which counts every reference in it before this one sees it.
	sharedSketch bool
	ents         []densityEntry[K] // the residents, in no order
	index        map[K]int         // resident key → its index in ents
	clock        uint64            // references so far (Access calls)
	rng          uint64            // sampling state (SplitMix64)
	next         uint64            // clock of the next reconfiguration
	cls          [nClass]densityClass
	lastKey      K   // the block of the last Access (with a depth function)
	lastDepth    int // and its depth: the next Access at lastDepth+1 follows it
	hasLast      bool
	victim       K // the last Victim, returned again while it stays resident
	hasVic       bool

	// ghosts remember removed blocks for a while: their events (a hit
	// when one comes back, an eviction when it is forgotten) are counted
	// then, so the statistics see reuse beyond the cache's own horizon.
	ghosts   map[K]ghost
	ring     []K    // ghost keys by sequence number modulo len(ring)
	ringHead uint64 // next sequence number to write
	ringTail uint64 // oldest sequence number not yet expired
}

type ghost struct {
	last  uint64
	seq   uint64
	class uint8
}

// NewDensityPolicy returns an empty DensityPolicy. cfg is as for NewPolicy
// (Order, HalfLife and NoAdmission are ignored: it admits every miss);
// depth, if not nil, returns a block's depth in its prefix chain (0 = the
// first block), a class feature. It returns an error wrapping ErrConfig
// when cfg is invalid.
func NewDensityPolicy[K comparable](cfg PolicyConfig, depth func(K) int) (*DensityPolicy[K], error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	p := &DensityPolicy[K]{cfg: cfg, depth: depth, sk: NewSketch(cfg.Capacity, cfg.SampleFactor*cfg.Capacity),
		index: make(map[K]int), rng: 0x9e3779b97f4a7c15, next: minDensityPeriod}
	p.ghosts = make(map[K]ghost)
	p.ring = make([]K, cfg.Capacity)
	return p, nil
}

// Config returns the effective configuration (defaults filled in).
func (p *DensityPolicy[K]) Config() PolicyConfig { return p.cfg }

func (e *densityEntry[K]) class() int {
	return (int(e.followed)*nRefClass+int(min(bits.Len8(e.refs), nRefClass-1)))*nDepthClass + int(e.depth)
}

func (p *DensityPolicy[K]) density(e *densityEntry[K]) float32 {
	return p.cls[e.class()].density[ageBucket(p.clock-e.last)]
}

// reconfigure recomputes every class's densities from its event counts
// and ages the counts. A class's density at an age is then raised to that
// of the class with fewer references (same depth) where it is lower: a
// block known to be referenced more is not expected to be worth less, and
// a class whose blocks were all evicted before they could come back would
// otherwise look worthless and never be kept long enough to learn.
func (p *DensityPolicy[K]) reconfigure() {
	for c := range p.cls {
		cl := &p.cls[c]
		var hits, events, life float64
		for b := nAge - 1; b >= 0; b-- {
			hits += float64(cl.hits[b])
			events += float64(cl.hits[b] + cl.evicts[b])
			life += events * ageWidth(b)
			if life > 0 {
				cl.density[b] = float32(hits / life)
			} else {
				cl.density[b] = 0
			}
			cl.hits[b] *= densityForget
			cl.evicts[b] *= densityForget
		}
	}
	for c := nDepthClass; c < nClass; c++ {
		if (c/nDepthClass)%nRefClass == 0 {
			continue // the fewest references: no lower class
		}
		lower, cl := &p.cls[c-nDepthClass].density, &p.cls[c].density
		for b := range cl {
			cl[b] = max(cl[b], lower[b])
		}
	}
}

// Access is Policy.Access.
func (p *DensityPolicy[K]) Access(k K, h uint64, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.sharedSketch {
		p.sk.Increment(h)
	}
	p.clock++
	if p.clock >= p.next {
		p.reconfigure()
		p.next = p.clock + uint64(max(len(p.ents), minDensityPeriod))
	}
	if p.depth != nil {
		d := p.depth(k)
		if p.hasLast && d == p.lastDepth+1 {
			if j, ok := p.index[p.lastKey]; ok {
				p.ents[j].followed = 1
			}
		}
		p.lastKey, p.lastDepth, p.hasLast = k, d, true
	}
	i, ok := p.index[k]
	if !ok {
		if g, ok := p.ghosts[k]; ok {
			p.cls[g.class].hits[ageBucket(p.clock-g.last)]++
			delete(p.ghosts, k)
		}
		return false
	}
	e := &p.ents[i]
	p.cls[e.class()].hits[ageBucket(p.clock-e.last)]++
	e.last = p.clock
	if e.refs < 255 {
		e.refs++
	}
	return true
}

func (p *DensityPolicy[K]) rand() uint64 {
	p.rng += 0x9e3779b97f4a7c15
	return Mix64(p.rng)
}

// pick samples residents and returns the index of the lowest-density one.
// The sample is densitySamples/densityRun runs of densityRun neighbours in
// ents from random starts (ents is in no order): reading runs instead of
// scattered entries cut the CPU time of a decision at 100,000 blocks from
// 5.3 µs to 2.0–3.9 µs (a loaded machine) and moved the bundled figures
// by under 0.001. Called with p.mu held and
// at least one resident.
func (p *DensityPolicy[K]) pick() int {
	n := uint64(len(p.ents))
	best, bestD, bestAge, bestRefs := -1, float32(0), uint64(0), uint8(0)
	var start uint64
	for j := range uint64(min(densitySamples, len(p.ents))) {
		if j%densityRun == 0 {
			start = p.rand() % n
		}
		i := int((start + j%densityRun) % n)
		e := &p.ents[i]
		d, age := p.density(e), p.clock-e.last
		if best < 0 || d < bestD || (d == bestD && (e.refs < bestRefs || e.refs == bestRefs && age > bestAge)) {
			best, bestD, bestAge, bestRefs = i, d, age, e.refs
		}
	}
	return best
}

// choose sets p.victim to a fresh sample's choice unless the cached one is
// still resident. Called with p.mu held.
func (p *DensityPolicy[K]) choose() (*densityEntry[K], bool) {
	if len(p.ents) == 0 {
		return nil, false
	}
	if p.hasVic {
		if i, ok := p.index[p.victim]; ok {
			return &p.ents[i], true
		}
	}
	e := &p.ents[p.pick()]
	p.victim, p.hasVic = e.key, true
	return e, true
}

func (p *DensityPolicy[K]) initialRefs(h uint64) uint8 {
	return uint8(p.sk.Estimate(h))
}

// ShouldAdmit is always true: the density order evicts the blocks of
// unpromising classes young by itself (a TinyLFU-style test against the
// victim's density measured 0.002–0.004 worse on the bundled trace).
func (p *DensityPolicy[K]) ShouldAdmit(h uint64, now time.Time) bool { return true }

// Insert is Policy.Insert.
func (p *DensityPolicy[K]) Insert(k K, h uint64, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.index[k]; ok {
		return
	}
	var d uint8
	if p.depth != nil {
		d = uint8(min(bits.Len(uint(max(p.depth(k), 0))), nDepthClass-1))
	}
	delete(p.ghosts, k)
	p.index[k] = len(p.ents)
	p.ents = append(p.ents, densityEntry[K]{key: k, last: p.clock, refs: p.initialRefs(h), depth: d})
}

// Victim returns the resident block to evict next.
func (p *DensityPolicy[K]) Victim() (k K, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.choose()
	if !ok {
		return k, false
	}
	return e.key, true
}

// Remove is Policy.Remove; it counts the end of k's stay as an eviction at
// its current age.
func (p *DensityPolicy[K]) Remove(k K) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	i, ok := p.index[k]
	if !ok {
		return false
	}
	e := &p.ents[i]
	p.addGhost(k, e)
	last := len(p.ents) - 1
	if i != last {
		p.ents[i] = p.ents[last]
		p.index[p.ents[i].key] = i
	}
	p.ents = p.ents[:last]
	delete(p.index, k)
	if p.hasVic && p.victim == k {
		p.hasVic = false
	}
	return true
}

// addGhost remembers the removed block e. The ghosts are at most as many
// as the residents (and Capacity): beyond that the oldest is forgotten and
// its eviction counted, so the horizon they add is one cache's worth
// whatever Capacity says (measured best: two, four and eight times as many
// lost up to 0.004, 0.008 and 0.013 on the bundled trace).
func (p *DensityPolicy[K]) addGhost(k K, e *densityEntry[K]) {
	if p.ringHead-p.ringTail == uint64(len(p.ring)) {
		p.expireGhost()
	}
	p.ring[p.ringHead%uint64(len(p.ring))] = k
	p.ghosts[k] = ghost{last: e.last, seq: p.ringHead, class: uint8(e.class())}
	p.ringHead++
	for len(p.ghosts) > len(p.ents) && p.ringTail < p.ringHead {
		p.expireGhost()
	}
}

// expireGhost forgets the oldest ghost slot, counting an eviction if its
// block is still a ghost from that removal.
func (p *DensityPolicy[K]) expireGhost() {
	k := p.ring[p.ringTail%uint64(len(p.ring))]
	if g, ok := p.ghosts[k]; ok && g.seq == p.ringTail {
		p.cls[g.class].evicts[ageBucket(p.clock-g.last)]++
		delete(p.ghosts, k)
	}
	p.ringTail++
}

// Contains reports whether k is resident.
func (p *DensityPolicy[K]) Contains(k K) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.index[k]
	return ok
}

// Len returns the number of resident blocks.
func (p *DensityPolicy[K]) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ents)
}

// PredictReuse is Policy.PredictReuse.
func (p *DensityPolicy[K]) PredictReuse(h uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sk.Estimate(h) >= p.cfg.ReuseMinCount
}
