package tiering

import (
	"math"
	"sync/atomic"
	"time"
)

// Restore cost (issue 14, "restores that respect a deadline"): per lower
// tier, an exponentially weighted moving average of how long one block
// read takes, fed by every read from G3, G3.5 and G4, so that a front end
// can tell before an open whether bringing a file up would take longer
// than the engine can wait (RestoreEstimate).

// costAlpha is the weight of a new sample in the moving average (1/8, as
// TCP's smoothed RTT, RFC 6298 §2).
const costAlpha = 0.125

// defaultReadCost is the per-block read time assumed for a tier before its
// first sample: a local NVMe read, a fabric round trip, an object-store GET.
var defaultReadCost = [nTiers]time.Duration{tiG3: 500 * time.Microsecond, tiG35: 2 * time.Millisecond, tiG4: 50 * time.Millisecond}

// tierCost is one tier's moving average, as float64 nanoseconds in bits
// (0: no sample yet).
type tierCost struct {
	bits    atomic.Uint64
	samples atomic.Int64
}

func (c *tierCost) note(d time.Duration) {
	c.samples.Add(1)
	for {
		old := c.bits.Load()
		v := float64(d)
		if old != 0 {
			prev := math.Float64frombits(old)
			v = prev + costAlpha*(v-prev)
		}
		if c.bits.CompareAndSwap(old, math.Float64bits(max(v, 1))) {
			return
		}
	}
}

// get returns the average, or def without samples.
func (c *tierCost) get(def time.Duration) time.Duration {
	if b := c.bits.Load(); b != 0 {
		return time.Duration(math.Float64frombits(b))
	}
	return def
}

// noteRead records that one block read from tier ti took d.
func (s *Store) noteRead(ti int, d time.Duration) { s.cost[ti].note(d) }

// ReadCost returns, per lower tier name ("G3", "G3.5", "G4"), the current
// estimate of one block read (the moving average, or the default before
// the first read) and how many reads it is based on.
func (s *Store) ReadCost() map[string]TierCost {
	out := make(map[string]TierCost, nTiers-1)
	for ti := tiG3; ti < nTiers; ti++ {
		if ti == tiG3 && s.g3 == nil || ti == tiG35 && s.g35 == nil || ti == tiG4 && s.g4 == nil {
			continue
		}
		out[tierNames[ti]] = TierCost{BlockRead: s.cost[ti].get(defaultReadCost[ti]), Samples: s.cost[ti].samples.Load()}
	}
	return out
}

// TierCost is a lower tier's restore cost estimate (Store.ReadCost).
type TierCost struct {
	// BlockRead is the expected time of one block read.
	BlockRead time.Duration `json:"block_read_ns"`
	// Samples is how many reads the estimate rests on (0: the default).
	Samples int64 `json:"samples"`
}

// RestoreEstimate predicts how long reading the whole object would take
// now: the sum, over its blocks not in G2, of the estimated read time of
// the fastest tier holding each (holes and G2 blocks cost nothing; reads
// are taken as sequential, as FUSE sends a file's reads in order). slowest
// names the slowest tier needed ("G2" when none). Errors: ErrNotExist.
func (s *Store) RestoreEstimate(id ObjectID) (d time.Duration, slowest string, err error) {
	o, err := s.rlockLive(id)
	if err != nil {
		return 0, "", err
	}
	defer o.mu.RUnlock()
	worst := tiG2
	for _, b := range o.blocks.all() {
		if b == nil || b.g2.Load() != nil {
			continue
		}
		ti := -1
		switch {
		case b.in.has(tiG3):
			ti = tiG3
		case b.in.has(tiG35):
			ti = tiG35
		case b.in.has(tiG4):
			ti = tiG4
		}
		if ti < 0 {
			continue
		}
		d += s.cost[ti].get(defaultReadCost[ti])
		worst = max(worst, ti)
	}
	return d, tierNames[worst], nil
}
