package tiering

import (
	"fmt"
	"time"

	"github.com/ctxmem/ctxmemd/heat"
)

// placement bundles the heat package's pieces the core runs for G2: the
// eviction order and admission (heat.Policy by default: decayed reference
// count with a TinyLFU sketch; Config.Policy selects another heat.Placer) and the heat score (heat.Tracker) reported in xattrs and
// status. Changes of the eviction order (access, makeEvictable, remove,
// victim) are made under Store.g2mu, which makes Victim+Remove atomic
// across the evictor and the other paths; read-only questions
// (ShouldAdmit, PredictReuse, Score) are not, which is safe because
// heat.Policy and heat.Tracker lock themselves.
type placement struct {
	policy heat.Placer[bref]
	heat   *heat.Tracker[bref]
}

// g3ReuseMinCount is the number of recent references a block needs to be
// written to G3 once G3 is above its high watermark: one-hit blocks then go
// to G4 instead of flash.
const g3ReuseMinCount = 2

// blockIndex is the density and arbiter policies' depth feature: the
// block's index in its file, the position in the prefix chain when a file
// holds a request's KV blocks in order (0 for every block of one-block
// files). A read of block i+1 right after block i marks block i as
// followed (not a chain's tail).
func blockIndex(r bref) int { return int(r.idx) }

func newPlacement(cfg Config) (*placement, error) {
	// The sketch is sized for the number of G2 blocks of the smallest
	// namespace block size we expect in numbers (64 KiB); it only affects
	// the sketch's memory and sample period.
	capBlocks := int(max(cfg.G2Bytes/(64<<10), 1024))
	pcfg := heat.PolicyConfig{Capacity: capBlocks, ReuseMinCount: g3ReuseMinCount}
	var p heat.Placer[bref]
	var err error
	switch cfg.Policy {
	case "", "decay":
		p, err = heat.NewPolicy[bref](pcfg)
	case "adaptive":
		p, err = heat.NewAdaptivePolicy[bref](pcfg)
	case "density":
		p, err = heat.NewDensityPolicy(pcfg, blockIndex)
	case "arbiter":
		p, err = heat.NewArbiterPolicy(pcfg, blockIndex)
	default:
		err = fmt.Errorf("unknown policy %q (want decay, adaptive, density or arbiter)", cfg.Policy)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: heat policy: %v", ErrInvalid, err)
	}
	t, err := heat.NewTracker[bref](heat.TrackerConfig{HalfLife: cfg.HeatHalfLife, Cold: cfg.ColdThreshold,
		Hot: max(cfg.ColdThreshold, heat.DefaultHot)})
	if err != nil {
		return nil, fmt.Errorf("%w: heat tracker: %v", ErrInvalid, err)
	}
	return &placement{policy: p, heat: t}, nil
}

// access records one reference to r (a read or a write). When evictable is
// set (r is in G2, clean and unpinned) r is made resident in the eviction
// order.
func (pl *placement) access(r bref, evictable bool, now time.Time) {
	h := r.hash()
	pl.heat.Touch(r, now)
	if resident := pl.policy.Access(r, h, now); !resident && evictable {
		pl.policy.Insert(r, h, now)
	}
}

// makeEvictable puts r in the eviction order without counting a reference
// (a block just written back, or unpinned).
func (pl *placement) makeEvictable(r bref, now time.Time) {
	if !pl.policy.Contains(r) {
		pl.policy.Insert(r, r.hash(), now)
	}
}

func (pl *placement) remove(r bref) { pl.policy.Remove(r) }

func (pl *placement) forget(r bref) {
	pl.policy.Remove(r)
	pl.heat.Forget(r)
}

// victim returns and removes the next block to evict.
func (pl *placement) victim() (bref, bool) {
	v, ok := pl.policy.Victim()
	if ok {
		pl.policy.Remove(v)
	}
	return v, ok
}
