package sim

import (
	"fmt"
	"time"
)

// TierResult is the outcome of one policy with G2 over G3 (SimulateTiers).
// Every reference is served from G2 (G2Hits), else found in G3 (G3Hits),
// else a miss.
type TierResult struct {
	Policy   string        // the policy spec as given
	G2, G3   int           // capacities in blocks; G3 0 = no G3
	Refs     int64         // block references replayed
	G2Hits   int64         // references served from G2
	G3Hits   int64         // references missed in G2 and found in G3
	G3Writes int64         // G2 victims written to G3, in blocks
	Elapsed  time.Duration // wall time of the replay
}

// Misses returns the references found in no tier.
func (r TierResult) Misses() int64 { return r.Refs - r.G2Hits - r.G3Hits }

// G2HitRatio is the "served from G2" ratio: G2Hits / Refs (0 for an empty
// trace).
func (r TierResult) G2HitRatio() float64 { return ratio(r.G2Hits, r.Refs) }

// AnyTierHitRatio is the "found in any tier" ratio: (G2Hits + G3Hits) /
// Refs (0 for an empty trace).
func (r TierResult) AnyTierHitRatio() float64 { return ratio(r.G2Hits+r.G3Hits, r.Refs) }

func ratio(n, d int64) float64 {
	if d == 0 {
		return 0
	}
	return float64(n) / float64(d)
}

// writeFilter is a G2 cache that decides which of its victims are worth
// writing to G3 (heat.Policy: PredictReuse). Without it every victim is.
type writeFilter interface {
	keep(victim uint64) bool
}

// seer is a G3 cache that must learn of the references G2 serves (the
// offline policies: they know every block's next reference).
type seer interface {
	see(r ref)
}

// writer is a G3 cache that takes G2's victims its own way (the offline
// policies); the others take a victim as a miss of it: insert.
type writer interface {
	write(victim uint64, r ref) (admitted bool)
}

// SimulateTiers replays t through one policy (a spec as in Run) as G2 of
// g2 blocks over G3 of g3 blocks (0: no G3, which gives Simulate's hits),
// each tier running its own instance of the policy:
//
//   - a reference resident in G2 is a G2 hit;
//   - otherwise it is looked up in G3 (a G3 hit, or a miss) and G2 may
//     insert it (G3 is inclusive: a G3 hit stays in G3);
//   - the block that leaves G2 to make room is written to G3 unless G3
//     holds it already or G2's write filter says no (heat.Policy: its
//     PredictReuse with threshold reuse=N, 0 = every victim); G3 then
//     admits and evicts by its own policy.
//
// For "policy" this is SimulateTwoTier. For the offline policies both
// tiers know the future: "opt" applies Belady's rule in each tier, G3
// taking a victim only if it is referenced again before G3's farthest
// block; "lru-oracle" keeps a block in either tier only while it has a
// future reference. Both are per-tier bounds, not an optimum of the pair.
//
// It returns an error wrapping ErrPolicy for an unknown policy or option,
// g2 below 1 or g3 below 0.
func SimulateTiers(t *Trace, g2, g3 int, policy string) (TierResult, error) {
	res := TierResult{Policy: policy, G2: g2, G3: g3, Refs: int64(len(t.Blocks))}
	if g2 < 1 || g3 < 0 {
		return TierResult{}, fmt.Errorf("%w: G2 %d blocks must be >= 1 and G3 %d blocks >= 0", ErrPolicy, g2, g3)
	}
	start := time.Now()
	name, _, err := parseSpec(policy)
	if err != nil {
		return TierResult{}, err
	}
	var next []int32
	if name == "opt" || name == "lru-oracle" {
		next = nextUse(t.Blocks)
	}
	// A tier that holds as many blocks as the trace has references never
	// evicts nor refuses a block (nor has any policy a reason to), so a
	// larger one behaves the same: cap the sizes, and the memory of a
	// 64 TiB G3 of 4 KiB blocks.
	most := max(len(t.Blocks), 1)
	top, err := newTier(policy, min(g2, most), next, false)
	if err != nil {
		return TierResult{}, err
	}
	var low cache
	if g3 > 0 {
		if low, err = newTier(policy, min(g3, most), next, true); err != nil {
			return TierResult{}, err
		}
	}
	filter, _ := top.(writeFilter)
	see, _ := low.(seer)
	w, _ := low.(writer)
	for i, b := range t.Blocks {
		r := t.ref(i, b)
		if top.lookup(r) {
			res.G2Hits++
			if see != nil {
				see.see(r)
			}
			continue
		}
		if low != nil && low.lookup(r) {
			res.G3Hits++
		}
		v, evicted, _ := top.insert(r)
		if !evicted || low == nil || low.contains(v) || (filter != nil && !filter.keep(v)) {
			continue
		}
		var written bool
		if w != nil {
			written = w.write(v, r)
		} else {
			_, _, written = low.insert(ref{block: v, i: r.i, nanos: r.nanos})
		}
		if written {
			res.G3Writes++
		}
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

// CheckPolicy reports whether spec is a policy SimulateTiers and Simulate
// accept: nil, or an error wrapping ErrPolicy.
func CheckPolicy(spec string) error {
	_, err := SimulateTiers(&Trace{}, 1, 1, spec)
	return err
}

// newTier builds one tier of policy with capacity blocks; next is the
// trace's nextUse for the offline policies, and lower says the tier is G3.
func newTier(policy string, capacity int, next []int32, lower bool) (cache, error) {
	name, opts, err := parseSpec(policy)
	if err != nil {
		return nil, err
	}
	switch name {
	case "opt", "lru-oracle":
		if len(opts) > 0 {
			return nil, fmt.Errorf("%w: %q takes no options", ErrPolicy, policy)
		}
		var nextOf map[uint64]int32
		if lower {
			nextOf = map[uint64]int32{}
		}
		if name == "opt" {
			return &optTier{capacity: capacity, next: next, resident: make(map[uint64]int32, capacity), nextOf: nextOf}, nil
		}
		return &oracleTier{lru: newRefLRU(capacity), next: next, nextOf: nextOf}, nil
	}
	c, err := newCache(name, opts, capacity)
	if err != nil {
		return nil, fmt.Errorf("%w (%q)", err, policy)
	}
	return c, nil
}

// optTier is Belady's MIN as a tier. As G2 it inserts every miss and
// evicts the resident block referenced again farthest in the future (or
// never), as optHits does. As G3 it follows every reference (see, lookup)
// to know each block's next use (nextOf), and takes a G2 victim only if
// the victim is referenced again before its farthest resident block, which
// it then evicts.
type optTier struct {
	capacity int
	next     []int32
	resident map[uint64]int32 // block -> its next use
	h        maxHeap          // resident next uses, with stale entries
	nextOf   map[uint64]int32 // as G3: the next use of every block seen (absent: never)
}

func (c *optTier) set(b uint64, next int32) {
	c.resident[b] = next
	c.h.push(optEntry{next: next, block: b})
	if len(c.h) > 4*c.capacity+1024 { // drop stale entries
		c.h = c.h.compact(c.resident)
	}
}

// farthest returns the resident block whose next use is farthest, dropping
// stale heap entries. The tier must not be empty.
func (c *optTier) farthest() optEntry {
	for {
		top := c.h[0]
		if nu, ok := c.resident[top.block]; ok && nu == top.next {
			return top
		}
		c.h.pop()
	}
}

func (c *optTier) see(r ref) {
	n := c.next[r.i]
	if c.nextOf != nil {
		if n == never {
			delete(c.nextOf, r.block)
		} else {
			c.nextOf[r.block] = n
		}
	}
	if _, ok := c.resident[r.block]; ok {
		c.set(r.block, n)
	}
}

func (c *optTier) lookup(r ref) bool {
	_, ok := c.resident[r.block]
	c.see(r)
	return ok
}

func (c *optTier) insert(r ref) (victim uint64, evicted, admitted bool) {
	if len(c.resident) >= c.capacity {
		victim, evicted = c.farthest().block, true
		c.h.pop()
		delete(c.resident, victim)
	}
	c.set(r.block, c.next[r.i])
	return victim, evicted, true
}

func (c *optTier) write(v uint64, _ ref) bool {
	n, ok := c.nextOf[v]
	if !ok {
		return false // never referenced again
	}
	if len(c.resident) >= c.capacity {
		far := c.farthest()
		if far.next <= n {
			return false
		}
		c.h.pop()
		delete(c.resident, far.block)
	}
	c.set(v, n)
	return true
}

func (c *optTier) contains(b uint64) bool {
	_, ok := c.resident[b]
	return ok
}

// oracleTier is the LRU with perfect reuse prediction (oracleLRUHits) as a
// tier: it holds a block only while the block has a future reference, and
// evicts least recently used. As G3 it follows every reference (see,
// lookup) to drop blocks at their last reference and to know which G2
// victims are referenced again (nextOf).
type oracleTier struct {
	lru    *refLRU
	next   []int32
	nextOf map[uint64]int32 // as G3: the next use of every block seen (absent: never)
}

func (c *oracleTier) note(r ref) (last bool) {
	n := c.next[r.i]
	if c.nextOf != nil {
		if n == never {
			delete(c.nextOf, r.block)
		} else {
			c.nextOf[r.block] = n
		}
	}
	return n == never
}

func (c *oracleTier) drop(b uint64) {
	if e, ok := c.lru.where[b]; ok {
		c.lru.order.Remove(e)
		delete(c.lru.where, b)
	}
}

func (c *oracleTier) see(r ref) {
	if c.note(r) {
		c.drop(r.block)
	}
}

func (c *oracleTier) lookup(r ref) bool {
	last := c.note(r)
	e, ok := c.lru.where[r.block]
	switch {
	case ok && last:
		c.drop(r.block)
	case ok:
		c.lru.order.MoveToFront(e)
	}
	return ok
}

func (c *oracleTier) insert(r ref) (victim uint64, evicted, admitted bool) {
	if c.next[r.i] == never {
		return 0, false, false
	}
	return c.lru.insert(r)
}

func (c *oracleTier) write(v uint64, r ref) bool {
	if _, ok := c.nextOf[v]; !ok {
		return false
	}
	c.lru.insert(ref{block: v, i: r.i, nanos: r.nanos})
	return true
}

func (c *oracleTier) contains(b uint64) bool { return c.lru.contains(b) }
