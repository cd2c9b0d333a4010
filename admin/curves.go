package admin

import "github.com/ctxmem/ctxmemd/mrc"

// Curves are the online miss-ratio curves in Status (package mrc,
// docs/curves.md): the whole mount's and one per namespace.
type Curves struct {
	Total      CurveStatus   `json:"total"`
	Namespaces []CurveStatus `json:"namespaces"`
}

// CurveStatus is one curve: the hit ratio an LRU cache of each capacity
// would have had on the KV lookups since mount, estimated by SHARDS.
type CurveStatus struct {
	// Namespace is "" for the total.
	Namespace string `json:"namespace,omitempty"`
	// Refs are the KV lookups (hits and misses) the curve is built from.
	Refs int64 `json:"refs"`
	// SamplingRate is the current SHARDS rate R (1: exact); TrackedKeys
	// the keys sampled now, MaxKeys their bound; MemoryBytes estimates
	// the tracker's memory.
	SamplingRate float64 `json:"sampling_rate"`
	TrackedKeys  int     `json:"tracked_keys"`
	MaxKeys      int     `json:"max_keys"`
	MemoryBytes  int64   `json:"memory_bytes"`
	// BlockBytes converts blocks to bytes in Points: the namespace's mean
	// file size (its block size when it holds none).
	BlockBytes float64 `json:"block_bytes"`
	// MaxHitRatio is the hit ratio of an unbounded cache (1 - cold
	// misses); MeanDistanceBlocks the mean reuse distance of the others.
	MaxHitRatio        float64 `json:"max_hit_ratio"`
	MeanDistanceBlocks float64 `json:"mean_distance_blocks"`
	// Points are (capacity in blocks and bytes, hit ratio), 4 per
	// doubling of capacity from 1 block past the largest distance seen.
	Points []mrc.Point `json:"points"`
}

// CurveFrom fills a CurveStatus from an mrc.Curve.
func CurveFrom(ns string, c mrc.Curve, blockBytes float64) CurveStatus {
	return CurveStatus{Namespace: ns, Refs: c.Refs, SamplingRate: c.Rate, TrackedKeys: c.Keys, MaxKeys: c.MaxKeys,
		MemoryBytes: c.MemoryBytes, BlockBytes: blockBytes, MaxHitRatio: c.MaxHitRatio(),
		MeanDistanceBlocks: c.MeanDistance(), Points: c.Points(4, blockBytes)}
}

// HitRatio is the curve's hit ratio at capacity blocks, interpolated
// linearly between Points (mrc.PointsHitRatio).
func (c CurveStatus) HitRatio(blocks float64) float64 { return mrc.PointsHitRatio(c.Points, blocks) }
