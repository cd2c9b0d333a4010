package heat

import (
	"sync"
	"time"
)

// ArbiterPolicy evicts by whichever of two experts has been hitting more
// lately on the current workload: the OrderDecay Policy (LRFU with TinyLFU
// admission) or the DensityPolicy (learned hit density per class, after
// LHD). Both experts order every resident block; Victim and ShouldAdmit
// are the leader's. The leader is chosen as AdaptivePolicy chooses between
// decay and LRU: with miniature simulations (C. A. Waldspurger,
// T. Saemundsson, I. Ahmad, N. Park, "Cache Modeling and Optimization
// using Miniature Simulations", USENIX ATC 2017), one shadow cache of
// Capacity/R blocks per expert replaying the references to a fixed 1/R
// sample of the keys (by hash), whose hits are counted with exponential
// forgetting; the live order switches when the other shadow leads by more
// than switchMargin. The choice between experts by their recent hits is
// that of adaptive caching with expert advice (G. Vietri, L. V. Rodriguez,
// W. A. Martinez, S. Lyons, J. Liu, R. Rangaswami, M. Zhao, G. Narasimhan,
// "Driving Cache Replacement with ML-based LeCaR", HotStorage 2018),
// scored here on exact shadow simulations rather than on ghost hits.
//
// With a depth function the live decay expert also ranks a block just
// inserted arbiterTailPenalty half-lives lower until the next block of its
// chain follows it (the density expert has that as a class feature). The
// shadows see only sampled keys, rarely two neighbours of a chain, so they
// compare the experts without that feature.
//
// On the Mooncake trace it gets the better expert's figure at every size
// (or a little more); on the synthetic shapes of heat/sim it stays within
// 0.001 of max(LRU, ARC) as density does (docs/tiering.md).
//
// Costs: those of a Policy and a DensityPolicy together (one sketch,
// shared), plus a shadow replay through both for 1 reference in R: about
// 5 µs of CPU per decision at 100,000 blocks on a loaded machine
// (BenchmarkArbiterDecision) and 353 bytes per block with uint64 keys
// (BenchmarkStatePerBlock).
//
// An ArbiterPolicy is safe for concurrent use (one mutex).
type ArbiterPolicy[K comparable] struct {
	mu    sync.Mutex
	cfg   PolicyConfig
	depth func(K) int
	// The decay expert also answers Contains, Len, Estimate and
	// PredictReuse (both experts hold the same residents).
	*decayExpert[K]
	dens *DensityPolicy[K]

	shDecay *Policy[uint64]
	shDens  *DensityPolicy[uint64]
	cur     int // depth of the sampled reference being replayed
	// duel follows decay (first) or density (second, duel.second).
	duel duel

	lastKey          K
	lastDepth        int
	hasLast, lastNew bool
}

// arbiterTailPenalty is how much lower (in half-lives) the decay expert
// ranks a block just inserted until the next block of its chain follows
// it: a chain's last block is seldom reused (see DensityPolicy). Measured
// on the bundled trace at 5,000 / 10,000 / 20,000 blocks: 0 → 0.1712 /
// 0.2335 / 0.3003, 0.5 → 0.1711 / 0.2347 / 0.3022, 1 → 0.1711 / 0.2345 /
// 0.3032, 4 → 0.1711 / 0.2344 / 0.3033.
const arbiterTailPenalty = 1

// decayExpert names ArbiterPolicy's embedded Policy without exporting it.
type decayExpert[K comparable] = Policy[K]

// NewArbiterPolicy returns an empty ArbiterPolicy. cfg is as for
// NewPolicy (cfg.Order is ignored: the experts are OrderDecay and
// density); depth is as for NewDensityPolicy.
func NewArbiterPolicy[K comparable](cfg PolicyConfig, depth func(K) int) (*ArbiterPolicy[K], error) {
	cfg.Order = OrderDecay
	decay, err := NewPolicy[K](cfg)
	if err != nil {
		return nil, err
	}
	cfg = decay.Config()
	dens, err := NewDensityPolicy(cfg, depth)
	if err != nil {
		return nil, err
	}
	// The experts' sketches would be the same (same size, same
	// increments): density reads the decay expert's, which every Access
	// (under p.mu) updates first. That saves a sketch update per reference
	// and the sketch's memory.
	dens.sk, dens.sharedSketch = decay.sk, true
	rate, shCap := shadowSize(cfg.Capacity)
	scfg := cfg
	scfg.Capacity = shCap
	p := &ArbiterPolicy[K]{cfg: cfg, depth: depth, decayExpert: decay, dens: dens, duel: newDuel(rate, shCap, true)}
	if p.shDecay, err = NewPolicy[uint64](scfg); err != nil {
		return nil, err
	}
	var shDepth func(uint64) int
	if depth != nil {
		shDepth = func(uint64) int { return p.cur }
	}
	if p.shDens, err = NewDensityPolicy(scfg, shDepth); err != nil {
		return nil, err
	}
	return p, nil
}

// Config returns the effective configuration (defaults filled in).
func (p *ArbiterPolicy[K]) Config() PolicyConfig { return p.cfg }

// Leader returns the expert currently followed: "decay" or "density".
func (p *ArbiterPolicy[K]) Leader() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.duel.second {
		return "density"
	}
	return "decay"
}

func (p *ArbiterPolicy[K]) leader() Placer[K] {
	if p.duel.second {
		return p.dens
	}
	return p.decayExpert
}

// Access is Policy.Access: it records one reference to k (hash h) and
// reports whether k is resident.
func (p *ArbiterPolicy[K]) Access(k K, h uint64, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.duel.sampled(h) {
		if p.depth != nil {
			p.cur = p.depth(k)
		}
		d := replayRef(p.shDecay, h, h, p.duel.shCap, now)
		l := replayRef(p.shDens, h, h, p.duel.shCap, now)
		p.duel.score(d, l)
	}
	hit := p.decayExpert.Access(k, h, now)
	p.dens.Access(k, h, now)
	if p.depth != nil {
		d := p.depth(k)
		if p.hasLast && d == p.lastDepth+1 && p.lastNew {
			p.decayExpert.shiftRank(p.lastKey, arbiterTailPenalty)
		}
		p.lastKey, p.lastDepth, p.hasLast, p.lastNew = k, d, true, false
	}
	return hit
}

// ShouldAdmit is the leader's ShouldAdmit.
func (p *ArbiterPolicy[K]) ShouldAdmit(h uint64, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.leader().ShouldAdmit(h, now)
}

// Insert is Policy.Insert (both experts).
func (p *ArbiterPolicy[K]) Insert(k K, h uint64, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.decayExpert.Contains(k) {
		p.decayExpert.Insert(k, h, now)
		if p.depth != nil && p.hasLast && p.lastKey == k {
			p.decayExpert.shiftRank(k, -arbiterTailPenalty)
			p.lastNew = true
		}
	}
	p.dens.Insert(k, h, now)
}

// Victim returns the resident block the leader evicts next.
func (p *ArbiterPolicy[K]) Victim() (K, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.leader().Victim()
}

// Remove is Policy.Remove (both experts).
func (p *ArbiterPolicy[K]) Remove(k K) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dens.Remove(k)
	return p.decayExpert.Remove(k)
}
