package heat

import (
	"fmt"
	"sync/atomic"
)

// Level is a storage level that can serve a block, for per-level hit
// counters (DESIGN "The storage hierarchy").
type Level uint8

// Levels, fastest first.
const (
	LevelG2  Level = iota // host DRAM
	LevelG3               // local NVMe
	LevelG35              // NVMe-oF pool (CMX)
	LevelG4               // object storage
	// NumLevels is the number of levels.
	NumLevels
)

// String returns the level's name as used in status and metrics: "G2",
// "G3", "G3.5", "G4".
func (l Level) String() string {
	switch l {
	case LevelG2:
		return "G2"
	case LevelG3:
		return "G3"
	case LevelG35:
		return "G3.5"
	case LevelG4:
		return "G4"
	}
	return fmt.Sprintf("Level(%d)", uint8(l))
}

// Hits counts hits and misses by request, block and byte, and block hits
// and bytes per level. Every method is a few atomic adds (lock-free, safe
// for concurrent use); the zero value is ready to use. A Hits must not be
// copied after first use.
//
// A block hit is a block served from any level (the caller says which); a
// block miss is a block found in no level (recomputed or written by the
// engine). A request is a full hit when all its blocks hit, a partial hit
// when some do, and a miss when none do.
type Hits struct {
	requests, fullHits, partialHits atomic.Int64
	blockHits, blockMisses          atomic.Int64
	byteHits, byteMisses            atomic.Int64
	levelBlocks                     [NumLevels]atomic.Int64
	levelBytes                      [NumLevels]atomic.Int64
}

// Hit counts one block of n bytes served from level l. An out-of-range
// level is counted in the totals only.
func (h *Hits) Hit(l Level, n int64) {
	h.blockHits.Add(1)
	h.byteHits.Add(n)
	if l < NumLevels {
		h.levelBlocks[l].Add(1)
		h.levelBytes[l].Add(n)
	}
}

// Miss counts one block of n bytes found in no level.
func (h *Hits) Miss(n int64) {
	h.blockMisses.Add(1)
	h.byteMisses.Add(n)
}

// Request counts one request that referenced blocks blocks, of which hit
// were hits (0 <= hit <= blocks). Block and byte counts are recorded
// separately by Hit and Miss.
func (h *Hits) Request(blocks, hit int) {
	h.requests.Add(1)
	switch {
	case blocks > 0 && hit >= blocks:
		h.fullHits.Add(1)
	case hit > 0:
		h.partialHits.Add(1)
	}
}

// Snapshot is a point-in-time copy of Hits' counters. Counters are read
// one by one, so a snapshot taken under load may be off by in-flight
// operations.
type Snapshot struct {
	Requests        int64 // requests counted
	FullHitRequests int64 // requests whose every block hit
	PartialRequests int64 // requests with some but not all blocks hit
	BlockHits       int64 // blocks served from some level
	BlockMisses     int64 // blocks found in no level
	ByteHits        int64 // bytes served from some level
	ByteMisses      int64 // bytes of missed blocks
	// LevelBlocks and LevelBytes break BlockHits and ByteHits down by
	// level, indexed by Level.
	LevelBlocks [NumLevels]int64
	LevelBytes  [NumLevels]int64
}

// Snapshot returns the current counters.
func (h *Hits) Snapshot() Snapshot {
	s := Snapshot{
		Requests:        h.requests.Load(),
		FullHitRequests: h.fullHits.Load(),
		PartialRequests: h.partialHits.Load(),
		BlockHits:       h.blockHits.Load(),
		BlockMisses:     h.blockMisses.Load(),
		ByteHits:        h.byteHits.Load(),
		ByteMisses:      h.byteMisses.Load(),
	}
	for l := range NumLevels {
		s.LevelBlocks[l] = h.levelBlocks[l].Load()
		s.LevelBytes[l] = h.levelBytes[l].Load()
	}
	return s
}

// Sub returns s minus an earlier snapshot prev (counts over an interval).
func (s Snapshot) Sub(prev Snapshot) Snapshot {
	d := Snapshot{
		Requests:        s.Requests - prev.Requests,
		FullHitRequests: s.FullHitRequests - prev.FullHitRequests,
		PartialRequests: s.PartialRequests - prev.PartialRequests,
		BlockHits:       s.BlockHits - prev.BlockHits,
		BlockMisses:     s.BlockMisses - prev.BlockMisses,
		ByteHits:        s.ByteHits - prev.ByteHits,
		ByteMisses:      s.ByteMisses - prev.ByteMisses,
	}
	for l := range NumLevels {
		d.LevelBlocks[l] = s.LevelBlocks[l] - prev.LevelBlocks[l]
		d.LevelBytes[l] = s.LevelBytes[l] - prev.LevelBytes[l]
	}
	return d
}

func ratio(a, b int64) float64 {
	if a+b == 0 {
		return 0
	}
	return float64(a) / float64(a+b)
}

// BlockHitRatio returns BlockHits / (BlockHits + BlockMisses), or 0.
func (s Snapshot) BlockHitRatio() float64 { return ratio(s.BlockHits, s.BlockMisses) }

// ByteHitRatio returns ByteHits / (ByteHits + ByteMisses), or 0.
func (s Snapshot) ByteHitRatio() float64 { return ratio(s.ByteHits, s.ByteMisses) }

// RequestHitRatio returns the fraction of requests that fully hit, or 0.
func (s Snapshot) RequestHitRatio() float64 {
	return ratio(s.FullHitRequests, s.Requests-s.FullHitRequests)
}
