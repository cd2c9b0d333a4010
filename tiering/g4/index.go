package g4

import (
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
// unbounded), counting the copy of k that the Put replaces as free.
func (x *index) reserve(k tier.Key, n, capacity int64) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if capacity > 0 && x.used+x.reserved-x.blocks[k].length+n > capacity {
		return false
	}
	x.reserved += n
	return true
}

// put ends a Put of n reserved bytes; if stored, k now has n bytes.
func (x *index) put(k tier.Key, n int64, stored bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.reserved -= n
	if !stored {
		return
	}
	x.seq++
	x.used += n - x.blocks[k].length
	x.blocks[k] = indexEntry{length: n, seq: x.seq}
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
func (x *index) endList(listed map[tier.Key]int64) {
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
		for k, n := range listed {
			if _, t := x.touched[k]; t {
				continue
			}
			x.seq++
			x.used += n - x.blocks[k].length
			x.blocks[k] = indexEntry{length: n, seq: x.seq}
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
