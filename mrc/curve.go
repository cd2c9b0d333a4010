package mrc

import "math"

// Point is one point of a curve: an LRU cache of Blocks blocks (Bytes
// bytes, when a block size is known) would hit HitRatio (0–1) of the
// references.
type Point struct {
	Blocks   float64 `json:"blocks"`
	Bytes    float64 `json:"bytes,omitempty"`
	HitRatio float64 `json:"hit_ratio"`
}

// Curve is a Tracker's state at one time: the estimated histogram of
// reuse distances, ready for hit ratios at any capacity.
type Curve struct {
	// Refs are all the references observed (sampled or not).
	Refs int64 `json:"refs"`
	// Rate is the current sampling rate R (0–1].
	Rate float64 `json:"sampling_rate"`
	// Keys is the number of keys tracked now; MaxKeys the bound (0: none).
	Keys    int `json:"tracked_keys"`
	MaxKeys int `json:"max_keys"`
	// MemoryBytes estimates the Tracker's memory.
	MemoryBytes int64 `json:"memory_bytes"`
	// hist[b] estimates the references of bucket b, cold the cold
	// misses, in sampled units at the current rate, SHARDS_adj applied;
	// total is their sum.
	hist       []float64
	cold       float64
	total      float64
	meanDist   float64 // mean finite scaled distance (blocks)
	lastBucket int
}

// Snapshot returns the current curve.
func (t *Tracker) Snapshot() Curve {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := Curve{Refs: t.refs.Load(), Rate: t.rate, Keys: len(t.keys), MemoryBytes: t.bytesLocked(),
		hist: make([]float64, t.maxBucket+1), lastBucket: t.maxBucket}
	if t.maxKeys > 0 {
		c.MaxKeys = t.maxKeys
	}
	var seen float64
	for b := range c.hist {
		c.hist[b] = max(t.hist[b]*t.scale, 0)
		seen += c.hist[b]
	}
	if seen > 0 {
		c.meanDist = t.sumDist * t.scale / seen
	}
	c.cold = max(t.cold*t.scale, 0)
	seen += c.cold
	// SHARDS_adj: expected sampled references = Refs × R.
	if exp := float64(c.Refs) * t.rate; seen > 0 && exp > 0 {
		c.hist[0] += exp - seen
	}
	for _, v := range c.hist {
		c.total += v
	}
	c.total += c.cold
	return c
}

// HitRatio is the estimated hit ratio of an LRU cache of capacity blocks:
// the share of references at scaled distance < capacity, interpolated
// linearly inside a bucket (0 with no references).
func (c Curve) HitRatio(capacity float64) float64 {
	if c.total <= 0 || capacity <= 0 {
		return 0
	}
	var below float64
	for b, v := range c.hist {
		lo, hi := bucketLow(b), bucketLow(b+1)
		switch {
		case hi <= capacity:
			below += v
		case lo < capacity:
			below += v * (capacity - lo) / (hi - lo)
		}
	}
	return math.Min(below/c.total, 1)
}

// MaxHitRatio is the hit ratio of an infinite cache: 1 − cold misses.
func (c Curve) MaxHitRatio() float64 {
	if c.total <= 0 {
		return 0
	}
	return 1 - c.cold/c.total
}

// Edges returns the capacities (blocks) at which Points reports the
// curve: perOctave per doubling (a divisor of BucketsPerOctave), from 1
// to the first edge past the largest distance seen.
func (c Curve) Edges(perOctave int) []float64 {
	if perOctave <= 0 || perOctave > BucketsPerOctave {
		perOctave = BucketsPerOctave
	}
	step := BucketsPerOctave / perOctave
	var out []float64
	for b := 1; ; b += step {
		out = append(out, bucketLow(b))
		if b > c.lastBucket+1 {
			return out
		}
	}
}

// Points returns the curve at Edges(perOctave), with bytes = blocks ×
// blockBytes when blockBytes > 0.
func (c Curve) Points(perOctave int, blockBytes float64) []Point {
	es := c.Edges(perOctave)
	out := make([]Point, len(es))
	for i, e := range es {
		out[i] = Point{Blocks: e, HitRatio: c.HitRatio(e)}
		if blockBytes > 0 {
			out[i].Bytes = e * blockBytes
		}
	}
	return out
}

// Buckets returns cumulative reference counts (estimated, in references)
// at scaled distance < each capacity in caps, the total (cold misses
// included) and the sum of finite scaled distances (blocks): a
// Prometheus histogram's buckets, count and sum.
func (c Curve) Buckets(caps []float64) (below []float64, count, sum float64) {
	below = make([]float64, len(caps))
	if c.total <= 0 {
		return below, 0, 0
	}
	n := float64(c.Refs)
	for i, cp := range caps {
		below[i] = c.HitRatio(cp) * n
	}
	return below, n, c.meanDist * n * c.MaxHitRatio()
}

// MeanDistance is the mean scaled reuse distance (blocks) of the
// references that are not cold misses.
func (c Curve) MeanDistance() float64 { return c.meanDist }

// PointsHitRatio interpolates the hit ratio at capacity blocks linearly
// between points (sorted by Blocks): 0 before the first point, the last
// point's ratio beyond the last.
func PointsHitRatio(p []Point, blocks float64) float64 {
	if len(p) == 0 || blocks < p[0].Blocks {
		return 0
	}
	for i := 1; i < len(p); i++ {
		if blocks < p[i].Blocks {
			f := (blocks - p[i-1].Blocks) / (p[i].Blocks - p[i-1].Blocks)
			return p[i-1].HitRatio + f*(p[i].HitRatio-p[i-1].HitRatio)
		}
	}
	return p[len(p)-1].HitRatio
}
