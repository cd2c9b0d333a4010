package tiering

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// bref names a block of the current generation of an object in memory.
type bref struct {
	id  ObjectID
	idx uint32
}

// hash returns a 64-bit hash of the block reference (splitmix64 finaliser
// over id and index) for the frequency sketch.
func (r bref) hash() uint64 {
	x := uint64(r.id)*0x9E3779B97F4A7C15 ^ uint64(r.idx)
	x ^= x >> 30
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 27
	x *= 0x94D049BB133111EB
	x ^= x >> 31
	return x
}

// g2block is a block's copy in DRAM. buf is a pool buffer; n is the number
// of valid bytes (bytes past n up to the block length read as zeros).
type g2block struct {
	buf []byte
	n   int
	// mf is set for a block held in its object's memory file
	// (passthrough.go): buf is a slice of the file's mapping at byte off
	// of the file, and freeing it punches a hole there instead of
	// returning buf to the pool.
	mf  *memFile
	off int64
	// prestaged is set while the copy was brought up by prestage and has
	// not been read yet (prestage.go).
	prestaged atomic.Bool
}

// fill copies data into the block at byte boff (the block must already
// cover boff+len(data)). Into a memory file it goes by pwrite(2) rather
// than through the mapping: the kernel then fills the file's pages in one
// call instead of taking a page fault per 4 KiB page (under the process's
// mmap lock, contended by every other fault and munmap) and zeroing each
// page before the copy; fresh 256 KiB of a memfd fill about twice as fast
// this way (BenchmarkMemFill). Errors: those of pwrite (ENOSPC/ENOMEM when
// shared memory runs out; the mapping would have raised SIGBUS instead).
func (g *g2block) fill(boff int, data []byte) error {
	if g.mf == nil {
		copy(g.buf[boff:], data)
		return nil
	}
	for off := 0; off < len(data); {
		n, err := unix.Pwrite(g.mf.fd, data[off:], g.off+int64(boff+off))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("write memory file: %w", err)
		}
		off += n
	}
	return nil
}

// blockState tracks one written block of an object. A block that was never
// written has no blockState and reads as zeros (a hole).
//
// Locking: g2 is read atomically under the object's read lock (readers may
// install a promoted copy with CompareAndSwap); every other field, and
// replacing or clearing g2, needs the object's write lock.
type blockState struct {
	g2 atomic.Pointer[g2block]
	// in is the set of tiers below G2 holding a copy of the block's bytes
	// (G3, G3.5: a copy in the shared pool from Share or Import, G4).
	in     tierSet
	dirty  bool
	queued bool // waiting in the write-back queue
	// version is the object's write sequence (object.wseq) at this block's
	// latest write: unique across every block state the object ever had,
	// so a put that started before a truncate dropped the block can never
	// be mistaken for a put of the block written after it.
	version uint64
	// cleanVer is the latest version stored below G2 (NBD FLUSH waits for it).
	cleanVer uint64
	// wb is the state of the block's dirty period and write-back, made
	// when the period starts (writeBlock, markDirtyLocked: never nil while
	// dirty is set) and dropped when writeBack stores the block clean and
	// it is not queued, so that a block at rest carries only the fields
	// above (issue 17). A nil wb reads as a zero wbState.
	wb *wbState
}

// wbState is the part of a blockState that matters only while the block
// is dirty or being written back (see blockState.wb). Guarded, like every
// blockState field but g2, by the object's write lock.
type wbState struct {
	dirtyN   int64     // bytes this block adds to Store.g2dirty while dirty
	retries  int       // consecutive failed write-backs
	failedAt time.Time // first of those failures
	// Coalescing (coalesce.go): a dirty block queued but held back while
	// it is being written waits in the delayed list until delayUntil
	// (unix ns; 0: not held back, in the write-back queue if queued);
	// dirtySince (unix ns) is its first write since it was last stored,
	// which bounds the holding back; delaySeq names its current entry in
	// the delayed list (older entries of the block are skipped). delaySeq
	// comes from the store-wide delayed.seq, so an entry never matches a
	// later wbState of the same block.
	delayUntil, dirtySince int64
	delaySeq               uint64
	// covered is how many bytes from the block's start were written
	// without a gap since it was last stored (dirtySince): a block is
	// complete, and stored at once, when covered reaches the block size.
	// A block that was already whole in G2 (an NBD export block, a file
	// block read up and rewritten in part) is not complete merely because
	// its buffer is full.
	covered int
	// inPlace is set when a write in this dirty period did not extend
	// covered (a rewrite in place, NBD's random writes): such a block is
	// held back by age (rewriteMaxAge), not until it is idle.
	inPlace bool
}

// tierSet is a set of the tiers below G2, by tier index (tiG3, tiG35,
// tiG4: the store's tier order, as in Store.tierAt, health and cost). The
// zero value is empty.
type tierSet uint8

// tiersOf returns the set of the tiers ti.
func tiersOf(ti ...int) tierSet {
	var s tierSet
	for _, t := range ti {
		s.add(t)
	}
	return s
}

func (s tierSet) has(ti int) bool { return s&(1<<ti) != 0 }
func (s tierSet) empty() bool     { return s == 0 }
func (s *tierSet) add(ti int)     { *s |= 1 << ti }
func (s *tierSet) drop(ti int)    { *s &^= 1 << ti }

// set adds ti to s if on, else drops it.
func (s *tierSet) set(ti int, on bool) {
	if on {
		s.add(ti)
	} else {
		s.drop(ti)
	}
}

// newBlockIn returns a block state held by tier a if inA and by tier b if
// inB (recovery).
func newBlockIn(a int, inA bool, b int, inB bool) *blockState {
	st := &blockState{}
	st.in.set(a, inA)
	st.in.set(b, inB)
	return st
}

// w returns b's write-back state, making it if b has none. o.mu held for
// writing.
func (b *blockState) w() *wbState {
	if b.wb == nil {
		b.wb = &wbState{}
	}
	return b.wb
}

// dirtyBytes is what b adds to Store.g2dirty (0 without a write-back
// state). o.mu held.
func (b *blockState) dirtyBytes() int64 {
	if b.wb == nil {
		return 0
	}
	return b.wb.dirtyN
}

// heldBack reports whether b waits in the delayed list (queued with a due
// time). o.mu held.
func (b *blockState) heldBack() bool { return b.queued && b.wb != nil && b.wb.delayUntil != 0 }

// object is the in-memory state of one object.
//
// Lock order: object.mu before Store.g2mu and Store.wbmu, which are taken
// alone or innermost; Store.mu is taken alone, or before object.mu (Close
// walks every object under it), never after (see doc.go, Locks). No lock is held while waiting for G2 space or for the
// dirty bound.
type object struct {
	mu      sync.RWMutex
	id      ObjectID
	ns      string
	kind    string     // front end's label (CreateOptions.Kind); no meaning here
	dur     Durability // fixed at creation; decides drops, retries and flush
	bs      int
	size    int64       // set through setSizeLocked (Usage follows it)
	use     *usageCount // its Usage row while in the object table (usage.go)
	gen     uint64
	pinned  bool
	created time.Time
	// lastWrite (unix ns, end of the latest WriteAt) and writers (WriteAt
	// calls in progress, waits included) keep an object that is being
	// written from G2-only eviction (evictObject).
	lastWrite atomic.Int64
	writers   atomic.Int32
	blocks    blockMap
	// wseq numbers the object's block writes (blockState.version); it only
	// grows, also across truncates and TRIMs that drop block states.
	wseq uint64
	// g3Seq is the Store.g3Puts count of the latest write-back of a block
	// of o into G3 (0: none since the start): a Flush syncs G3 only while
	// it is past Store.g3Synced.
	g3Seq uint64
	// busy counts, per block index, the copies of the block's key being
	// stored or deleted below G2 without the object lock (write-back,
	// eviction to G3, demote, sink, share, GC). A write-back starts only
	// when its index is not busy, so two different versions of one key are
	// never in flight at once; whoever ends the last busy span requeues the
	// block if it is dirty (endBusyLocked).
	busy map[uint32]int
	// stale records, per block index of the current generation, the tiers
	// (tierBit) that may still hold a copy of the key that is not the live
	// block's bytes: a dropped block's copies waiting for deletion, a put
	// that finished after its block was dropped, a failed delete. While
	// any is recorded the object is never recorded clean, so recovery (which
	// trusts every copy of a clean object's keys) cannot serve them.
	stale map[uint32]uint8
	dirty int // blocks with dirty set
	// sealed: the last writer closed the object (Expedite) and nothing
	// changed it since (WriteAt, Truncate, Discard, a passthrough open for
	// writing): its bytes are complete as far as the front end knows.
	sealed    bool
	metaDirty bool // the persisted record is absent or says "dirty"
	persisted bool // meta.db holds a record of this object
	deleted   bool
	awaitG4   bool // an export recovered without G4's listing (g4recover.go)
	// flushed is closed (and set to nil) whenever the object becomes clean
	// on disk; Flush waits on it. Made only when a Flush waits
	// (flushWaitLocked), so an object at rest carries no channel.
	flushed chan struct{}
	// mf is the object's memory file once it was opened for passthrough
	// (passthrough.go); nil otherwise.
	mf *memFile
}

// held reports whether o's G2 blocks must stay resident: pinned, or open
// by passthrough (freeing a block would hole the file under its readers).
func (o *object) held() bool { return o.pinned || (o.mf != nil && o.mf.opens > 0) }

// Tier bits of object.stale.
const (
	staleG3 uint8 = 1 << iota
	staleG4
)

func (o *object) isBusy(idx uint32) bool { return o.busy[idx] > 0 }

// beginBusy marks an I/O on block idx's key in flight. o.mu held for writing.
func (o *object) beginBusy(idx uint32) {
	if o.busy == nil {
		o.busy = make(map[uint32]int)
	}
	o.busy[idx]++
}

func (o *object) markStale(idx uint32, bit uint8) {
	if bit == 0 {
		return
	}
	if o.stale == nil {
		o.stale = make(map[uint32]uint8)
	}
	o.stale[idx] |= bit
}

// clearStale forgets bit for idx and reports whether no stale copy is left
// anywhere in the object.
func (o *object) clearStale(idx uint32, bit uint8) bool {
	if v, ok := o.stale[idx]; ok {
		if v &^= bit; v == 0 {
			delete(o.stale, idx)
			if len(o.stale) == 0 {
				o.stale = nil
			}
		} else {
			o.stale[idx] = v
		}
	}
	return len(o.stale) == 0
}

// clean reports whether the object may be recorded clean: no dirty block
// and no stale copy of a live key below G2 that recovery could take for
// the live block's, which is every stale copy but those staleExcused
// names.
func (o *object) clean() bool {
	if o.dirty != 0 {
		return false
	}
	for idx, v := range o.stale {
		if !o.staleExcused(idx, v) {
			return false
		}
	}
	return true
}

// staleExcused reports whether block idx of o, whose stale copies are v
// (tierBits), lets o be recorded clean all the same. Only in a
// cache-class object, and only:
//   - a block dropped (truncated, discarded) whose copies are not deleted
//     yet: the record does not list it, and recovery reads no copy of a
//     block the record does not list;
//   - a G4-wins block (g4Wins): the record lists it as such.
//
// Without this, a file shrunk or rewritten while G3 was down or hung could
// not be flushed until G3 answered again. A device-class object (an NBD
// export) is never excused: its recovery (recoverDevice) keeps every copy
// it finds. o.mu held.
func (o *object) staleExcused(idx uint32, v uint8) bool {
	if o.dur == DurabilityDevice {
		return false
	}
	return o.blocks.get(idx) == nil || o.g4Wins(idx, v)
}

// g4Wins reports whether block idx of o (cache class), whose stale copies
// are v, is a G4-wins block: held in G4 (clean, not in G3), its only stale
// copy an older one in G3 (written back to G4 while G3 was down or hung,
// the G3 copy's delete refused or not answered). The clean record lists
// it (objectRecord.G4Wins), and recovery takes its G4 copy. o.mu held.
func (o *object) g4Wins(idx uint32, v uint8) bool {
	if v != staleG3 || o.dur == DurabilityDevice {
		return false
	}
	b := o.blocks.get(idx)
	return b != nil && !b.dirty && b.in.has(tiG4) && !b.in.has(tiG3)
}

func (o *object) key(idx uint32) tier.Key {
	return tier.Key{Namespace: o.ns, Object: uint64(o.id), Index: idx, Gen: o.gen}
}

// blockLen returns the length in bytes of block idx at the current size.
func (o *object) blockLen(idx uint32) int {
	start := int64(idx) * int64(o.bs)
	if start >= o.size {
		return 0
	}
	return int(min(int64(o.bs), o.size-start))
}

func (o *object) info() ObjectInfo {
	return ObjectInfo{ID: o.id, Namespace: o.ns, Size: o.ptSize(), Gen: o.gen, BlockSize: o.bs,
		Pinned: o.pinned, Dirty: o.dirty > 0, Sealed: o.sealed, Created: o.created, Kind: o.kind, Durability: o.dur}
}

func (o *object) record(state string) *objectRecord {
	rec := &objectRecord{Namespace: o.ns, Kind: o.kind, Durability: o.dur.String(), BlockSize: o.bs, Size: o.size, Gen: o.gen,
		Pinned: o.pinned, Created: o.created, State: state}
	if state == stateClean {
		idx := make([]uint32, 0, o.blocks.len())
		for i := range o.blocks.all() {
			idx = append(idx, i)
		}
		rec.Written = toRuns(idx)
		var wins []uint32
		for i, v := range o.stale {
			if o.g4Wins(i, v) {
				wins = append(wins, i)
			}
		}
		rec.G4Wins = toRuns(wins)
	}
	return rec
}
