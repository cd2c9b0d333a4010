package metrics

import (
	"math"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ctxmem/ctxmemd/mrc"
)

// Curve is one online miss-ratio curve in a Snapshot (package mrc,
// admin.CurveStatus): Namespace "" is the whole mount.
type Curve struct {
	Namespace string
	// Refs are the KV lookups the curve counts; MaxHitRatio is 1 − cold
	// misses; MeanDistance the mean reuse distance (blocks) of the others.
	Refs         int64
	MaxHitRatio  float64
	MeanDistance float64
	// Points are (capacity in blocks, hit ratio).
	Points []mrc.Point
}

var (
	reuseDistance = newDesc("reuse_distance_blocks", "LRU reuse distance of the mount's KV lookups in blocks (SHARDS-sampled, "+
		"docs/curves.md): bucket le=C counts the lookups an LRU cache of C blocks would hit; +Inf includes first "+
		"references (cold misses).")
	nsReuseDistance = newDesc("namespace_reuse_distance_blocks", "LRU reuse distance of the namespace's KV lookups in blocks, "+
		"as ctxmem_reuse_distance_blocks.", "namespace")
)

// curveBuckets are the histogram's upper bounds: powers of 2 blocks, 1 to 2^30.
var curveBuckets = func() []float64 {
	var out []float64
	for b := 1.0; b <= 1<<30; b *= 2 {
		out = append(out, b)
	}
	return out
}()

// collectCurves sends the reuse-distance histograms.
func collectCurves(ch chan<- prometheus.Metric, cs []Curve) {
	for _, c := range cs {
		bk := make(map[float64]uint64, len(curveBuckets))
		for _, b := range curveBuckets {
			bk[b] = uint64(math.Round(mrc.PointsHitRatio(c.Points, b) * float64(c.Refs)))
		}
		sum := c.MeanDistance * c.MaxHitRatio * float64(c.Refs)
		if c.Namespace == "" {
			ch <- prometheus.MustNewConstHistogram(reuseDistance, uint64(c.Refs), sum, bk)
		} else {
			ch <- prometheus.MustNewConstHistogram(nsReuseDistance, uint64(c.Refs), sum, bk, c.Namespace)
		}
	}
}
