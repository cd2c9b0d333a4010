package g4

import (
	"cmp"
	"container/heap"
	"slices"
	"sync"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// index is the tier's in-memory map of blocks it believes the store holds,
// so that Stat and Usage cost no backend call. It is filled by listing the
// store (at open and on every Range) and kept current by Put, Delete,
// expiry, quarantine and Get misses.
//
// Listing races with mutations: a block put or deleted while a listing is
// in flight may or may not appear in it. So while any listing runs, keys
// that are mutated are recorded in touched, and merge trusts the index, not
// the listing, for those keys.
type index struct {
	mu       sync.Mutex
	blocks   map[tier.Key]indexEntry
	used     int64 // bytes of payload over blocks
	reserved int64 // bytes of Puts in flight (capacity accounting)
	seq      uint64
	listing  int                   // listings in flight
	touched  map[tier.Key]struct{} // keys mutated while listing > 0
}

type indexEntry struct {
	length int64  // payload bytes
	seq    uint64 // index.seq when the entry was set
	mod    int64  // when the object was stored, Unix ns (listing's ModTime, or the clock at Put): eviction order
}

// listedBlock is what a listing says of one block.
type listedBlock struct {
	length int64 // payload bytes
	mod    int64 // ObjectAttrs.ModTime, Unix ns
}

func newIndex() *index {
	return &index{blocks: map[tier.Key]indexEntry{}, touched: map[tier.Key]struct{}{}}
}

// touch records a mutation of k; the caller holds mu.
func (x *index) touch(k tier.Key) {
	if x.listing > 0 {
		x.touched[k] = struct{}{}
	}
}

// reserve books n bytes for a Put of k if the capacity allows it (cap 0 =
// unbounded), counting the copy of k that the Put replaces as free. wake
// reports that size eviction should run: the booking took the load (used
// plus reserved bytes) from at most high to above it, or was refused.
func (x *index) reserve(k tier.Key, n, capacity, high int64) (ok, wake bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	load := x.used + x.reserved
	if capacity > 0 && load-x.blocks[k].length+n > capacity {
		return false, true
	}
	x.reserved += n
	return true, capacity > 0 && load <= high && load+n > high
}

// load returns the payload bytes stored plus those of Puts in flight.
func (x *index) load() int64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.used + x.reserved
}

// put ends a Put of n reserved bytes; if stored, k now has n bytes, stored
// at mod (Unix ns).
func (x *index) put(k tier.Key, n int64, stored bool, mod int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.reserved -= n
	if !stored {
		return
	}
	x.seq++
	x.used += n - x.blocks[k].length
	x.blocks[k] = indexEntry{length: n, seq: x.seq, mod: mod}
	x.touch(k)
}

// remove forgets k.
func (x *index) remove(k tier.Key) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.removeLocked(k)
}

func (x *index) removeLocked(k tier.Key) {
	if e, ok := x.blocks[k]; ok {
		x.used -= e.length
		delete(x.blocks, k)
	}
	x.touch(k)
}

// removeIfSeq forgets k if its entry is still the one set at sequence
// number seq.
func (x *index) removeIfSeq(k tier.Key, seq uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if e, ok := x.blocks[k]; ok && e.seq == seq {
		x.removeLocked(k)
	}
}

// setMod sets the stored time of k's entry to mod if the entry is still
// the one set at sequence number seq.
func (x *index) setMod(k tier.Key, seq uint64, mod int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if e, ok := x.blocks[k]; ok && e.seq == seq {
		e.mod = mod
		x.blocks[k] = e
	}
}

// entry returns k's entry.
func (x *index) entry(k tier.Key) (indexEntry, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	e, ok := x.blocks[k]
	return e, ok
}

// removeIfOlder forgets k unless its entry was set after sequence number
// seq (a Put that finished after a Get that missed began).
func (x *index) removeIfOlder(k tier.Key, seq uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if e, ok := x.blocks[k]; ok && e.seq <= seq {
		x.removeLocked(k)
	}
}

// current returns the latest sequence number.
func (x *index) current() uint64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.seq
}

func (x *index) stat(k tier.Key) (int64, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	e, ok := x.blocks[k]
	return e.length, ok
}

// usage returns bytes and blocks.
func (x *index) usage() (int64, int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.used, int64(len(x.blocks))
}

// beginList marks a listing in flight.
func (x *index) beginList() {
	x.mu.Lock()
	x.listing++
	x.mu.Unlock()
}

// endList ends a listing; if listed is not nil (the listing completed), the
// index becomes listed, except for keys touched during the listing.
func (x *index) endList(listed map[tier.Key]listedBlock) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if listed != nil {
		for k, e := range x.blocks {
			if _, ok := listed[k]; !ok {
				if _, t := x.touched[k]; !t {
					x.used -= e.length
					delete(x.blocks, k)
				}
			}
		}
		for k, b := range listed {
			if _, t := x.touched[k]; t {
				continue
			}
			if e, ok := x.blocks[k]; ok && e.length == b.length && e.mod == b.mod {
				continue // unchanged: keep its seq (an eviction in flight still matches)
			}
			x.seq++
			x.used += b.length - x.blocks[k].length
			x.blocks[k] = indexEntry{length: b.length, seq: x.seq, mod: b.mod}
		}
	}
	x.listing--
	if x.listing == 0 {
		clear(x.touched)
	}
}

// snapshot copies the index.
func (x *index) snapshot() map[tier.Key]int64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	m := make(map[tier.Key]int64, len(x.blocks))
	for k, e := range x.blocks {
		m[k] = e.length
	}
	return m
}

// candidate is a block chosen for size eviction: its entry as the scan saw it.
type candidate struct {
	k      tier.Key
	length int64
	seq    uint64
	mod    int64
}

// candHeap is a max-heap of candidates by mod (the newest on top).
type candHeap []candidate

func (h candHeap) Len() int           { return len(h) }
func (h candHeap) Less(i, j int) bool { return h[i].mod > h[j].mod }
func (h candHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *candHeap) Push(v any)        { *h = append(*h, v.(candidate)) }
func (h *candHeap) Pop() any {
	old := *h
	v := old[len(old)-1]
	*h = old[:len(old)-1]
	return v
}

// scanBatch is how many entries oldest looks at between releases of mu.
const scanBatch = 1024

// oldest returns the blocks stored longest ago (by mod), oldest first,
// whose lengths add up to at least need bytes (fewer if the index holds
// less), leaving out the blocks retain exempts. Memory is proportional to
// the blocks returned, not to the index. The scan releases mu every
// scanBatch entries and around every call of retain (which may take the
// caller's locks, and those may be held around calls into the tier):
// entries that change meanwhile may be missed or seen in either state, and
// the caller re-checks each candidate's seq under its key lock.
func (x *index) oldest(need int64, retain func(tier.Key) bool) []candidate {
	var h candHeap
	var sum int64
	x.mu.Lock()
	i := 0
	for k, e := range x.blocks {
		if i++; i%scanBatch == 0 {
			x.mu.Unlock()
			x.mu.Lock()
		}
		if sum >= need && len(h) > 0 && e.mod >= h[0].mod {
			continue // newer than every block chosen so far
		}
		if retain != nil {
			x.mu.Unlock()
			r := retain(k)
			x.mu.Lock()
			if r {
				continue
			}
		}
		heap.Push(&h, candidate{k: k, length: e.length, seq: e.seq, mod: e.mod})
		sum += e.length
		for len(h) > 1 && sum-h[0].length >= need {
			sum -= heap.Pop(&h).(candidate).length
		}
	}
	x.mu.Unlock()
	slices.SortFunc(h, func(a, b candidate) int { return cmp.Compare(a.mod, b.mod) })
	return h
}

// keyLocks serialises mutations of one key (Put, Delete, expiry,
// quarantine) without serialising different keys.
type keyLocks struct {
	mu sync.Mutex
	m  map[tier.Key]*keyLock
}

type keyLock struct {
	mu   sync.Mutex
	refs int
}

// lock locks k and returns the unlock function.
func (l *keyLocks) lock(k tier.Key) func() {
	l.mu.Lock()
	if l.m == nil {
		l.m = map[tier.Key]*keyLock{}
	}
	kl := l.m[k]
	if kl == nil {
		kl = &keyLock{}
		l.m[k] = kl
	}
	kl.refs++
	l.mu.Unlock()
	kl.mu.Lock()
	return func() {
		kl.mu.Unlock()
		l.mu.Lock()
		if kl.refs--; kl.refs == 0 {
			delete(l.m, k)
		}
		l.mu.Unlock()
	}
}
