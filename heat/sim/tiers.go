package sim

import (
	"fmt"
	"time"

	"github.com/ctxmem/ctxmemd/heat"
)

// TwoTierResult is the outcome of SimulateTwoTier.
type TwoTierResult struct {
	G2, G3        int   // capacities in blocks
	ReuseMinCount int   // G2 PredictReuse threshold; 0 = keep every victim
	Refs          int64 // block references replayed
	G2Hits        int64 // references served from G2
	G3Hits        int64 // references missed in G2 and served from G3
	G3Writes      int64 // G2 victims written to G3
}

// SimulateTwoTier replays t through two default heat.Policy instances, G2
// (g2 blocks) above G3 (g3 blocks), following the protocol in the heat
// package documentation: a G2 miss is looked up in G3 (a G3 hit stays in
// G3: G3 is inclusive); a block evicted from G2 that G3 lacks is written to
// G3 when G2's PredictReuse says so (every victim when reuseMinCount is 0)
// and, if G3 is full, G3's ShouldAdmit agrees. It shows what the G3 write
// filter costs in hits. It returns an error wrapping ErrPolicy for a
// capacity below 1 or a negative reuseMinCount.
func SimulateTwoTier(t *Trace, g2, g3, reuseMinCount int) (TwoTierResult, error) {
	res := TwoTierResult{G2: g2, G3: g3, ReuseMinCount: reuseMinCount, Refs: int64(len(t.Blocks))}
	if g2 < 1 || g3 < 1 || reuseMinCount < 0 {
		return res, fmt.Errorf("%w: two-tier capacities %d, %d blocks and reuse threshold %d", ErrPolicy, g2, g3, reuseMinCount)
	}
	cfg := heat.PolicyConfig{Capacity: g2, ReuseMinCount: max(reuseMinCount, 1)}
	p2, err := heat.NewPolicy[uint64](cfg)
	if err != nil {
		return res, err
	}
	p3, err := heat.NewPolicy[uint64](heat.PolicyConfig{Capacity: g3})
	if err != nil {
		return res, err
	}
	for i, b := range t.Blocks {
		now := time.Unix(0, t.Millis[i]*int64(time.Millisecond)+int64(i))
		h := heat.Mix64(b)
		if p2.Access(b, h, now) {
			res.G2Hits++
			continue
		}
		if p3.Access(b, h, now) {
			res.G3Hits++
		}
		if p2.Len() >= g2 {
			if !p2.ShouldAdmit(h, now) {
				continue
			}
			v, _ := p2.Victim()
			p2.Remove(v)
			vh := heat.Mix64(v)
			if !p3.Contains(v) && (reuseMinCount == 0 || p2.PredictReuse(vh)) {
				write := true
				if p3.Len() >= g3 {
					if write = p3.ShouldAdmit(vh, now); write {
						w, _ := p3.Victim()
						p3.Remove(w)
					}
				}
				if write {
					p3.Insert(v, vh, now)
					res.G3Writes++
				}
			}
		}
		p2.Insert(b, h, now)
	}
	return res, nil
}
