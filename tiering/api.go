package tiering

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// ObjectID identifies an object (a file of a namespace or an NBD export)
// within one data directory. IDs are never reused.
type ObjectID uint64

// Tier names as used in status, metrics and xattrs.
const (
	TierG2  = "G2"
	TierG3  = "G3"
	TierG35 = "G3.5"
	TierG4  = "G4"
	// TierHole marks a block that was never written (reads as zeros).
	TierHole = "hole"
)

// ObjectInfo describes one object.
type ObjectInfo struct {
	ID        ObjectID
	Namespace string
	Size      int64 // bytes
	Gen       uint64
	BlockSize int // bytes
	Pinned    bool
	Dirty     bool // has blocks not yet written back below G2
	// Sealed: its last writer closed it (Expedite) and nothing changed it
	// since, so its bytes are complete (what eager sharing waits for).
	Sealed  bool
	Created time.Time
	// Kind is the front end's free-form label set at creation ("file",
	// "nbd"); the store gives it no meaning.
	Kind string
	// Durability is the class chosen at creation (CreateOptions).
	Durability Durability
}

// Blocks returns the number of blocks the object spans.
func (o ObjectInfo) Blocks() int64 {
	if o.BlockSize == 0 {
		return 0
	}
	return (o.Size + int64(o.BlockSize) - 1) / int64(o.BlockSize)
}

// TierUsage is one tier's occupancy as reported by status and metrics.
type TierUsage struct {
	Name          string  `json:"name"`
	UsedBytes     int64   `json:"used_bytes"`
	CapacityBytes int64   `json:"capacity_bytes"` // 0 = unbounded
	Blocks        int64   `json:"blocks"`
	HighWatermark float64 `json:"high_watermark,omitempty"` // fraction of capacity
	LowWatermark  float64 `json:"low_watermark,omitempty"`
	// Degraded is set while the tier's backend does not answer (its
	// latest call failed, or its health is down or bypassed); it clears by
	// itself on the next success.
	Degraded bool `json:"degraded"`
	// Health is the tier's health state (package health: "up",
	// "degraded", "down", "bypassed") and HealthReason why it is not up.
	Health       string `json:"health,omitempty"`
	HealthReason string `json:"health_reason,omitempty"`
	// HealthChanges counts the changes into each health state since
	// start, by state name, and Refused the calls the core did not make
	// because the tier was down, bypassed, or full within its backoff.
	HealthChanges map[string]int64 `json:"health_changes,omitempty"`
	Refused       int64            `json:"refused,omitempty"`
	// Full is set while the tier answers "no space" to write-back (it is
	// then skipped for a second at a time); it clears on the next put it
	// takes.
	Full bool `json:"full"`
	// Recovering is set (with Degraded) while the store waits for the
	// tier's first listing: it started while the tier did not answer, and
	// blocks only the tier holds read as I/O errors until it does.
	Recovering bool `json:"recovering,omitempty"`
	// Requests counts the backend requests of a tier that is billed per
	// request (G4 on an object store: tier.RequestCounter) since start,
	// by type; nil for other tiers.
	Requests *tier.Requests `json:"requests,omitempty"`
}

// Errors returned by the Store (test with errors.Is). Tier errors
// (tier.ErrCorrupt, tier.ErrNoSpace, ...) pass through wrapped.
var (
	// ErrNotExist: no such object (never created, deleted, or lost).
	ErrNotExist = errors.New("object does not exist")
	// ErrLost: a block of the object is gone from every tier; the object
	// has been removed.
	ErrLost = errors.New("object lost: a block is gone from every tier")
	// ErrBlockedIO (from CloseContext, wrapping tier.ErrUnavailable):
	// background work was still blocked in a tier's I/O past the deadline
	// (a hung device), so Close stopped without it, as after a crash;
	// closing that tier would wait for the same I/O.
	ErrBlockedIO = fmt.Errorf("background work blocked in tier I/O: %w", tier.ErrUnavailable)
	// ErrInvalid: bad argument (negative offset, bad block size, ...).
	ErrInvalid = errors.New("invalid argument")
	// ErrClosed: the store is closed.
	ErrClosed = errors.New("store closed")
)

// Errno maps an error from the Store to the errno a POSIX front end returns:
// nil → 0, ErrNotExist/ErrLost → ENOENT (ErrLost → EIO when reading),
// ErrInvalid → EINVAL, tier.ErrNoSpace → ENOSPC, tier.ErrTooLarge → EFBIG,
// tier.ErrUnavailable and deadlines → EIO, cancellation → EINTR, anything
// else (corruption, dead backend) → EIO.
func Errno(err error) syscall.Errno {
	var en syscall.Errno
	switch {
	case err == nil:
		return 0
	case errors.Is(err, tier.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		// A tier that does not answer (its own deadline passed): an I/O
		// error, whatever network errno lies underneath.
		return syscall.EIO
	case errors.As(err, &en):
		return en
	case errors.Is(err, ErrLost):
		return syscall.EIO
	case errors.Is(err, ErrNotExist):
		return syscall.ENOENT
	case errors.Is(err, ErrInvalid):
		return syscall.EINVAL
	case errors.Is(err, tier.ErrNoSpace):
		return syscall.ENOSPC
	case errors.Is(err, tier.ErrTooLarge):
		return syscall.EFBIG
	case errors.Is(err, context.Canceled):
		return syscall.EINTR
	default:
		return syscall.EIO
	}
}

// Stats are the store's counters since start. Hits are counted per request
// (one ReadAt call: a hit when every block it touched was found in some tier
// or was a hole), per block and per byte, and split by the tier that served
// the block.
type Stats struct {
	ReadRequests    int64            `json:"read_requests"`
	ReadRequestHits int64            `json:"read_request_hits"`
	BlockReads      int64            `json:"block_reads"`
	BlockHits       map[string]int64 `json:"block_hits"` // by tier name
	BlockMisses     int64            `json:"block_misses"`
	ByteReads       int64            `json:"byte_reads"`
	ByteHits        map[string]int64 `json:"byte_hits"` // by tier name
	DirtyBytes      int64            `json:"dirty_bytes"`
	DirtyLimitBytes int64            `json:"dirty_limit_bytes"`
	WriterWaits     int64            `json:"writer_waits"` // writes that waited for the dirty bound
	Evictions       map[string]int64 `json:"evictions"`    // blocks leaving a tier, by tier
	Demotions       map[string]int64 `json:"demotions"`    // blocks written to a tier by demotion/write-back, by target tier
	Promotions      int64            `json:"promotions"`   // blocks copied up to G2 on read or prestage
	// Batched restores from G4 packs (restore.go): reads of a run of
	// blocks with one request, and the blocks they brought up beside the
	// one asked for (counted in Promotions too).
	G4RunReads  int64 `json:"g4_run_reads"`
	G4RunBlocks int64 `json:"g4_run_blocks"`
	// Prestage accounting (prestage.go): blocks prestage copied up to
	// G2 (and their bytes), of them read before leaving G2 (useful), and
	// freed unread (wasted, and their bytes).
	Prestaged           int64 `json:"prestaged_blocks"`
	PrestagedBytes      int64 `json:"prestaged_bytes"`
	PrestageUseful      int64 `json:"prestage_useful_blocks"`
	PrestageWasted      int64 `json:"prestage_wasted_blocks"`
	PrestageWastedBytes int64 `json:"prestage_wasted_bytes"`
	AdmissionsDenied    int64 `json:"admissions_refused"`
	// Relocations counts export blocks G3 kept through a segment reclaim
	// (tier.Relocator) because no other copy could be ordered safely.
	Relocations int64 `json:"g3_relocations"`
	// ReclaimsPostponed counts G3 reclaims given up because an export
	// block in the segment had no safe place at the time.
	ReclaimsPostponed int64 `json:"g3_reclaims_postponed"`
	// PassthroughOpens counts opens served by passthrough from a memory
	// file (OpenPassthrough); PassthroughObjects is how many objects hold
	// one now and PassthroughOpen how many of them are open that way.
	PassthroughOpens   int64            `json:"passthrough_opens"`
	PassthroughObjects int64            `json:"passthrough_objects"`
	PassthroughOpen    int64            `json:"passthrough_open"`
	Dropped            map[string]int64 `json:"dropped"` // blocks dropped, by reason
	// GCPending is the number of block copies in lower tiers that no
	// live block uses and that are queued for deletion (garbage not yet
	// deleted); GCDeleted counts deletions done and GCFailed failed
	// attempts, each retried with backoff (gc.go).
	GCPending int64 `json:"gc_pending"`
	// G3PutBytes, G3CompactedBlocks and G3CompactedBytes are G3's
	// compaction counters (tier.Compactor; zero when G3 has none): write
	// amplification is (put + compacted bytes) / put bytes.
	G3PutBytes        int64 `json:"g3_put_bytes"`
	G3CompactedBlocks int64 `json:"g3_compacted_blocks"`
	G3CompactedBytes  int64 `json:"g3_compacted_bytes"`
	GCDeleted         int64 `json:"gc_deleted"`
	GCFailed          int64 `json:"gc_failed"`
	CRCErrors         int64 `json:"crc_errors"`
	// LocalReadsAbandoned counts reads of G3 or G3.5 that did not return
	// within Config.LocalReadTimeout (a hung device): each failed its
	// caller with EIO.
	LocalReadsAbandoned int64 `json:"local_reads_abandoned"`
	// LocalWritesAbandoned counts puts, deletes and syncs of G3 or G3.5
	// that did not return within Config.LocalWriteTimeout (a hung
	// device): each failed with tier.ErrUnavailable.
	LocalWritesAbandoned int64 `json:"local_writes_abandoned"`
	ObjectsLost          int64 `json:"objects_lost"`
	Objects              int64 `json:"objects"`
	// Degraded says why the store cannot keep its promises (its data
	// directory was deleted under it); empty when healthy.
	Degraded string `json:"degraded,omitempty"`
}
