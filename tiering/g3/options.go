package g3

import (
	"fmt"
	"log/slog"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// Defaults for Options fields left zero.
const (
	// DefaultSegmentBytes is the default segment file size (32 MiB).
	DefaultSegmentBytes = 32 << 20
	// MinSegmentBytes and MaxSegmentBytes bound Options.SegmentBytes. The
	// recommended range for NVMe is 16–64 MiB; smaller segments are for
	// tests (a segment smaller than 4 MiB + 12 KiB lowers the largest block
	// the store takes, see Store.MaxBlock).
	MinSegmentBytes = 64 << 10
	MaxSegmentBytes = 1 << 30
	// DefaultHighWatermark and DefaultLowWatermark are fractions of
	// CapacityBytes.
	DefaultHighWatermark = 0.90
	DefaultLowWatermark  = 0.75
	// DefaultCompactLive is the default Options.CompactLive.
	DefaultCompactLive = 0.5
)

// Options configures a Store. Zero values take the documented defaults.
type Options struct {
	// Dir holds the segment files (created if missing). Required.
	Dir string
	// SegmentBytes is the size in bytes of every segment file, a multiple
	// of 4096 in [MinSegmentBytes, MaxSegmentBytes] (default 32 MiB).
	// Segments written by an earlier run with another size keep their size.
	SegmentBytes int64
	// CapacityBytes bounds the bytes of segment files on disk (headers and
	// garbage included, so live payload is always below it); 0 means
	// unbounded (only the filesystem's free space limits the store). When
	// non-zero it must hold at least two segments at the high watermark and
	// one at the low watermark.
	CapacityBytes int64
	// HighWatermark and LowWatermark are fractions of CapacityBytes
	// (defaults 0.90 and 0.75, 0 < Low < High <= 1): when a new segment
	// would take the store above High, the oldest segments are reclaimed
	// until it is at or below Low.
	HighWatermark, LowWatermark float64
	// CompactLive makes reclaim a cleaner rather than a plain FIFO
	// (log-structured cleaning, Rosenblum & Ousterhout, SOSP '91): while
	// the store's live payload is at most CompactLive × LowWatermark ×
	// CapacityBytes, the live blocks of a segment reclaimed at the
	// watermark are copied forward into the active segment (same sequence
	// numbers, so newer puts and deletes still win) instead of being
	// handed to OnEvict, so space that is dead is freed without demoting
	// live data; with more live data they go to OnEvict (cold data leaves
	// for G4). The segments kept then hold on average at most CompactLive
	// live data, so each lap of the log copies at most that fraction of
	// what it writes: write amplification about 1/(1-CompactLive) at
	// worst, 2 at the default 0.5. Blocks that do not fit in the active
	// segment wait for the next roll-over. Segments are still reclaimed
	// oldest first, so a tombstone never outlives the records it hides. 0
	// means DefaultCompactLive (0.5); negative disables compaction; at
	// most 1.
	CompactLive float64
	// NoDirect forces buffered I/O even where O_DIRECT works.
	NoDirect bool
	// OnEvict, if set, is called with the live blocks of a segment just
	// before the segment is reclaimed (keys in no order, never empty).
	// During the call every listed block still reads through Get, so the
	// callee can copy them to another tier (demote to G4) or mark them
	// lost; when it returns the blocks are gone from this store (a block
	// overwritten or deleted meanwhile keeps its newer state). It runs on
	// the goroutine of the Put or Delete that needed space, with no store
	// lock held except the one that serialises segment roll-over: it may
	// call Get, Stat, Range, Usage, Relocate (which keeps a listed block in
	// the store) and PostponeReclaim (which keeps the whole segment for
	// now), but must not call Put or Delete on this store (they would wait
	// for the roll-over that waits for OnEvict).
	OnEvict func(keys []tier.Key)
	// Logger receives the store's logs (default slog.Default()).
	Logger *slog.Logger
}

// withDefaults returns o with defaults filled in, or an error naming the
// bad field.
func (o Options) withDefaults() (Options, error) {
	if o.Dir == "" {
		return o, fmt.Errorf("g3: Options.Dir is empty")
	}
	if o.SegmentBytes == 0 {
		o.SegmentBytes = DefaultSegmentBytes
	}
	if o.SegmentBytes < MinSegmentBytes || o.SegmentBytes > MaxSegmentBytes || o.SegmentBytes%pageSize != 0 {
		return o, fmt.Errorf("g3: SegmentBytes %d: want a multiple of %d in [%d, %d]", o.SegmentBytes, pageSize, MinSegmentBytes, MaxSegmentBytes)
	}
	if o.HighWatermark == 0 {
		o.HighWatermark = DefaultHighWatermark
	}
	if o.LowWatermark == 0 {
		o.LowWatermark = DefaultLowWatermark
	}
	if !(0 < o.LowWatermark && o.LowWatermark < o.HighWatermark && o.HighWatermark <= 1) {
		return o, fmt.Errorf("g3: watermarks low %v high %v: want 0 < low < high <= 1", o.LowWatermark, o.HighWatermark)
	}
	if o.CompactLive == 0 {
		o.CompactLive = DefaultCompactLive
	}
	if o.CompactLive > 1 {
		return o, fmt.Errorf("g3: CompactLive %v: want at most 1", o.CompactLive)
	}
	if o.CapacityBytes < 0 {
		return o, fmt.Errorf("g3: CapacityBytes %d < 0", o.CapacityBytes)
	}
	if o.CapacityBytes > 0 {
		high, low := o.segLimits()
		if high < 2 || low < 1 {
			return o, fmt.Errorf("g3: CapacityBytes %d holds %d segments of %d bytes at the high watermark and %d at the low; want at least 2 and 1",
				o.CapacityBytes, high, o.SegmentBytes, low)
		}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, nil
}

// segLimits returns how many segment files fit under the high and low
// watermarks (0, 0 when unbounded).
func (o Options) segLimits() (high, low int) {
	if o.CapacityBytes == 0 {
		return 0, 0
	}
	high = int(o.HighWatermark * float64(o.CapacityBytes) / float64(o.SegmentBytes))
	low = int(o.LowWatermark * float64(o.CapacityBytes) / float64(o.SegmentBytes))
	return high, low
}
