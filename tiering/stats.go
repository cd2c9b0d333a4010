package tiering

import "sync/atomic"

// tier indexes for per-tier counters.
const (
	tiG2 = iota
	tiG3
	tiG35
	tiG4
	nTiers
)

var tierNames = [nTiers]string{TierG2, TierG3, TierG35, TierG4}

// Drop reasons counted in Stats.Dropped. (Admission never drops a block:
// it only keeps a block out of G3 when G4 takes it.)
const (
	dropNoSpace     = "no_space"    // no lower tier could take a dirty block
	dropUnavailable = "unavailable" // lower tiers failed
	// evicted from a G2-only store (no lower tier), whole objects
	dropEvictedName = "evicted_no_lower_tier"
	nDrop           = 3
)

// dropEvicted indexes counters.dropped for dropEvictedName.
const dropEvicted = 2

var dropNames = [nDrop]string{dropNoSpace, dropUnavailable, dropEvictedName}

type counters struct {
	readRequests, readRequestHits atomic.Int64
	blockReads, blockMisses       atomic.Int64
	byteReads                     atomic.Int64
	blockHits, byteHits           [nTiers]atomic.Int64
	writerWaits                   atomic.Int64
	evictions, demotions          [nTiers]atomic.Int64
	promotions                    atomic.Int64
	// Batched G4 restores (restore.go): reads, and the blocks they
	// brought up beside the one asked for.
	g4RunReads, g4RunBlocks atomic.Int64
	// Prestage accounting (prestage.go).
	prestaged, prestagedBytes      atomic.Int64
	prestageUseful, prestageWasted atomic.Int64
	prestageWastedBytes            atomic.Int64
	admissionsDenied               atomic.Int64
	relocations                    atomic.Int64
	reclaimsPostponed              atomic.Int64
	gcDeleted, gcFailed            atomic.Int64
	ptOpens                        atomic.Int64
	ptObjects, ptOpenObjects       atomic.Int64 // objects with a memory file, and those open through it (Stats)
	readsAbandoned                 atomic.Int64 // local tier reads past LocalReadTimeout (getBounded)
	writesAbandoned                atomic.Int64 // local tier puts, deletes and syncs past LocalWriteTimeout (bounded)
	dropped                        [nDrop]atomic.Int64
	crcErrors                      atomic.Int64
	objectsLost                    atomic.Int64
}

func tierMap(a *[nTiers]atomic.Int64) map[string]int64 {
	m := make(map[string]int64, nTiers)
	for i := range a {
		m[tierNames[i]] = a[i].Load()
	}
	return m
}
