// Package tier defines the contract shared by every storage tier below G2:
// the block key, the Tier interface that G3 (local NVMe segments) and G4
// (object storage) implement, and the sentinel errors they return.
//
// A tier stores whole blocks. A block is at most one namespace block size
// (4 KiB–4 MiB); the last block of an object may be shorter. Every tier keeps a
// CRC32C (Castagnoli, RFC 3720 appendix B.4) of each block's bytes and checks
// it on every read, range reads included: a mismatch is reported as
// ErrCorrupt and the block is quarantined (it reads as ErrNotFound from then
// on); a tier never returns bytes it has not verified.
package tier

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"time"
)

// Key names one block of one generation of one object.
//
// Object is the object's id, stable across renames and unique within a host's
// data directory; Index is the block number (byte offset / block size);
// Gen is the object generation, bumped whenever an object is rewritten from
// scratch (O_TRUNC, truncate to 0), so tiers never overwrite a block of an
// older generation in place.
type Key struct {
	Namespace string
	Object    uint64
	Index     uint32
	Gen       uint64
}

// String renders the key as "ns/object/index@gen" (for logs and errors).
func (k Key) String() string {
	return fmt.Sprintf("%s/%d/%d@%d", k.Namespace, k.Object, k.Index, k.Gen)
}

// Usage is a tier's occupancy.
type Usage struct {
	UsedBytes     int64 // bytes of live block payload (not counting headers or garbage)
	CapacityBytes int64 // configured capacity; 0 means unbounded
	Blocks        int64 // live blocks
}

// Tier is a block store below G2. Implementations are safe for concurrent
// use.
type Tier interface {
	// Name returns the tier's name as used in status and metrics: "G3", "G4".
	Name() string
	// Put stores data (1 byte–4 MiB) as the block k, replacing any earlier
	// copy of exactly k. It returns ErrNoSpace when the tier is full and
	// cannot reclaim space, ErrTooLarge when data exceeds the tier's block
	// limit, and an I/O error wrapped otherwise. Put returns only once the
	// block reads back from this tier (survives a kill -9 of the process).
	Put(ctx context.Context, k Key, data []byte) error
	// Get reads len(p) bytes of block k starting at byte off of the block
	// into p and returns the count read (short only at the end of the
	// block). It returns ErrNotFound when the tier has no copy of k and
	// ErrCorrupt when the stored bytes fail their CRC32C (the block is then
	// quarantined). Implementations verify the checksum of every byte they
	// return.
	Get(ctx context.Context, k Key, p []byte, off int64) (int, error)
	// Stat returns the length in bytes of block k, or ErrNotFound. A tier
	// that has to ask its backend gives up when ctx is done.
	Stat(ctx context.Context, k Key) (int64, error)
	// Delete forgets block k; deleting a missing key is not an error.
	Delete(ctx context.Context, k Key) error
	// Range calls fn for every block the tier holds (in no order) until fn
	// returns false. It is how the core rebuilds its index at start. A
	// tier that lists its backend gives up when ctx is done (returning an
	// error that wraps ctx.Err()).
	Range(ctx context.Context, fn func(k Key, length int64) bool) error
	// Usage reports current occupancy.
	Usage() Usage
	// Close releases the tier's resources; the tier's contents persist.
	Close() error
}

// Sentinel errors. Tiers wrap them with context; test with errors.Is.
var (
	// ErrNotFound: the tier holds no copy of the block.
	ErrNotFound = errors.New("block not found")
	// ErrCorrupt: the stored bytes failed their checksum or header checks.
	ErrCorrupt = errors.New("block corrupt")
	// ErrNoSpace: the tier is at capacity and cannot take the block.
	ErrNoSpace = errors.New("tier full")
	// ErrTooLarge: the block exceeds the tier's maximum block size.
	ErrTooLarge = errors.New("block too large")
	// ErrClosed: the tier was closed.
	ErrClosed = errors.New("tier closed")
	// ErrUnavailable: the tier's backend does not answer (dead disk, object
	// store down); the caller may retry later.
	ErrUnavailable = errors.New("tier unavailable")
)

// MaxBlockSize is the largest block any tier must accept, in bytes (4 MiB).
const MaxBlockSize = 4 << 20

// MinBlockSize is the smallest namespace block size, in bytes (4 KiB).
const MinBlockSize = 4 << 10

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum returns the CRC32C (Castagnoli) of p.
func Checksum(p []byte) uint32 { return crc32.Checksum(p, castagnoli) }

// UpdateChecksum extends crc with p (CRC32C).
func UpdateChecksum(crc uint32, p []byte) uint32 { return crc32.Update(crc, castagnoli, p) }

// HealthReporter is implemented by tiers whose backend can be unreachable
// (G4 on S3). Healthy reports whether the latest backend call succeeded;
// status and metrics show such a tier as degraded until one does again.
type HealthReporter interface {
	Healthy() bool
}

// Demoter is the port through which a tier that reclaims space on its own
// (G3 reusing its oldest segment) hands the core the live blocks it is
// about to drop, so the core copies them down (to G4) or records them
// lost. Demote runs on the goroutine of the put that needed space, while
// every listed block still reads from the tier; it may call the tier's
// Get, Stat, Usage and Relocator methods (from several goroutines at
// once: the core demotes keys in parallel), never its Put or Delete (see
// g3.Options.OnEvict).
type Demoter interface {
	Demote(keys []Key)
}

// Reclaimer is implemented by tiers that reclaim space on their own and so
// need a Demoter. The core attaches itself (SetDemoter) when it opens,
// before it writes to the tier: no block is reclaimed unseen by the core.
type Reclaimer interface {
	SetDemoter(d Demoter)
}

// Retainer is the port through which a tier that drops blocks on its own
// (G4 expiring them after a TTL or evicting by size) asks the core which
// blocks must stay: Retain reports true for blocks of objects that are
// never dropped (the device durability class: NBD exports). It is called
// with no lock of the tier held.
type Retainer interface {
	Retain(k Key) bool
}

// Retaining is implemented by tiers that drop blocks on their own and so
// need a Retainer; the core attaches itself (SetRetainer) when it opens.
type Retaining interface {
	SetRetainer(r Retainer)
}

// RoomMaker is implemented by bounded tiers that delete blocks on their
// own to stay within their capacity (G4's size eviction). MakeRoom is for
// a caller whose put was refused with ErrNoSpace and that would rather
// wait for room than fail: it deletes what the tier may drop (never what
// its Retainer keeps, nor a block keep reports true for: keep may be nil)
// until n more bytes fit and returns nil, or returns an error wrapping
// ErrNoSpace when they cannot be made to fit. It runs on the caller's
// goroutine and asks the Retainer, so the caller must hold no lock the
// Retainer takes (in the core: no object lock).
type RoomMaker interface {
	MakeRoom(ctx context.Context, n int64, keep func(Key) bool) error
}

// Limits are a tier's capacity and reclaim watermarks.
type Limits struct {
	// CapacityBytes bounds the bytes the tier keeps on its device; 0
	// means unbounded.
	CapacityBytes int64
	// HighWatermark and LowWatermark are fractions of CapacityBytes
	// (0 < Low < High <= 1): above High the tier reclaims down to Low;
	// zero takes the tier's default.
	HighWatermark, LowWatermark float64
}

// Resizer is implemented by tiers whose capacity and watermarks change
// while they run (G3). SetLimits may reclaim at once, on the caller's
// goroutine, handing live blocks to the tier's Demoter.
type Resizer interface {
	Limits() Limits
	SetLimits(ctx context.Context, l Limits) error
}

// Prober is implemented by tiers that can check their device or backend
// without a block to read (G3.5 reads its pool's superblock page). The
// core probes a tier when its bypass is lifted, so the tier is used again
// only once it answers. Errors: whatever the device answered.
type Prober interface {
	Probe(ctx context.Context) error
}

// Relocator is implemented by log-structured tiers that reclaim space a
// segment at a time and call back with the live blocks first (G3's
// OnEvict). Relocate, called from inside that callback for one of the keys
// it was given, keeps the block in the tier through the reclaim, unchanged
// and ordered as before against any newer put or delete of the key.
// Errors: ErrNoSpace when there is no room to keep it, ErrNotFound, I/O
// and checksum errors.
type Relocator interface {
	Relocate(ctx context.Context, k Key) error
	// PostponeReclaim gives up the reclaim in progress once the callback
	// returns: the segment stays and is tried again later.
	PostponeReclaim()
}

// Expirer is implemented by tiers whose blocks expire after a TTL (G4).
// ExpireBefore deletes every block stored before t and returns how many.
type Expirer interface {
	ExpireBefore(ctx context.Context, t time.Time) (int, error)
}

// Compactor is implemented by log-structured tiers that copy live blocks
// forward when they reclaim space (G3). Compaction reports the payload
// bytes written by Put, and the blocks and payload bytes copied forward,
// since open: write amplification is (put + compacted) / put.
type Compactor interface {
	Compaction() (putBytes, compactedBlocks, compactedBytes int64)
}

// Packer is implemented by tiers that can store a run of blocks of one
// object generation as one backend object (G4: one PUT instead of one per
// block). PutPack stores blocks[i] as block keys[i], replacing any earlier
// copy of exactly that key, with Put's guarantees for each key stored:
// it reads back (Get verifies it against its own CRC32C, range reads
// included) and survives a kill -9. keys and blocks have the same length;
// the tier may split them into several objects, or store some keys one
// per object, as it sees fit. It returns how many keys it stored, always
// a prefix: keys[:n] are stored; on an error each later key reads as its
// earlier copy or as not found (the earlier copy may be dropped), and, as
// with Put, bytes may have reached the backend when the error wraps
// ErrUnavailable. Errors: those of Put, and one wrapping the tier's
// invalid-argument error for mismatched slices.
// PackBlocks returns how many blocks of blockSize bytes of namespace ns
// fit in one object (0 when the tier does not pack now), so a caller can
// hand PutPack runs that fill objects.
type Packer interface {
	PutPack(ctx context.Context, keys []Key, blocks [][]byte) (int, error)
	PackBlocks(ns string, blockSize int) int
}

// Requests counts the backend requests a tier made, by type, since it was
// opened (G4: object-store requests, what a cloud provider bills).
type Requests struct {
	Put    int64 `json:"put"`
	Get    int64 `json:"get"`
	Head   int64 `json:"head"`
	List   int64 `json:"list"`
	Delete int64 `json:"delete"`
}

// RequestCounter is implemented by tiers whose backend charges per
// request (G4); status and metrics show the counts.
type RequestCounter interface {
	Requests() Requests
}

// RunReader is implemented by tiers that read a run of consecutive blocks
// of one object generation with one backend request (G4: the members of
// one pack object, one ranged GET), so a restore of a file does not cost
// one request per block. ReadRun returns how many of the blocks k, k+1,
// ... (same namespace, object and generation, consecutive indexes), at
// most limit, one GetBlocks reads with one request: at least 1 when the
// tier holds k, 0 when it does not know k. GetBlocks reads keys[i] into
// bufs[i] (each at least as long as the block) and returns each block's
// length, every byte verified against the block's CRC32C; it stops at the
// first error, returned with the lengths of the keys read before it (the
// rest are 0): a block that fails its checksum is quarantined, as by Get,
// and the error wraps ErrCorrupt.
type RunReader interface {
	ReadRun(k Key, limit int) int
	GetBlocks(ctx context.Context, keys []Key, bufs [][]byte) ([]int, error)
}
