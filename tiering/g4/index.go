package g4

import (
	"cmp"
	"container/heap"
	"slices"
	"sync"
	"sync/atomic"

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
	packs    map[string]*pack // packs known to hold a live block, or emptied and not yet deleted, by name
	pending  map[string]bool  // packs whose put is in flight, by name
	used     int64            // bytes of payload over blocks
	reserved int64            // bytes of Puts in flight (capacity accounting)
	seq      uint64
	listing  int                   // listings in flight
	touched  map[tier.Key]struct{} // keys mutated while listing > 0
}

type indexEntry struct {
	length int64  // payload bytes
	seq    uint64 // index.seq when the entry was set
	mod    int64  // when the object was stored, Unix ns (listing's ModTime, or the clock at Put): eviction order
	pk     *pack  // the pack object holding the block; nil: its own object
}

// pack is one pack object (packname.go) the index knows. Its members are
// the keys whose entry points to it; a member whose key was deleted or
// stored again elsewhere is dead (the bytes stay in the object until the
// last member dies and the object is deleted, see Tier.reap).
type pack struct {
	ref  packRef
	name string
	mod  int64 // when stored, Unix ns

	live      int   // members whose entry points here; index.mu
	liveBytes int64 // their payload bytes; index.mu
	gone      bool  // deleted from the store, or no longer listed; index.mu

	hdrMu sync.Mutex
	crcs  []uint32 // the verified CRC table; nil until read (hdrMu)

	last atomic.Int64 // 1 + the member a Get read last (0: none); read-ahead
	win  atomic.Int64 // blocks the last read-ahead fetched
}

// listedBlock is what a listing says of one block.
type listedBlock struct {
	length int64 // payload bytes
	mod    int64 // ObjectAttrs.ModTime, Unix ns
	pk     *pack // the pack holding it (a new struct per listed pack); nil: its own object
}

func newIndex() *index {
	return &index{blocks: map[tier.Key]indexEntry{}, packs: map[string]*pack{}, pending: map[string]bool{}, touched: map[tier.Key]struct{}{}}
}

// touch records a mutation of k; the caller holds mu.
func (x *index) touch(k tier.Key) {
	if x.listing > 0 {
		x.touched[k] = struct{}{}
	}
}

// unlinkLocked takes entry e out of its pack, if any, and appends the
// pack to empty when that was its last live member; mu held.
func (x *index) unlinkLocked(e indexEntry, empty []*pack) []*pack {
	if e.pk == nil {
		return empty
	}
	e.pk.live--
	e.pk.liveBytes -= e.length
	if e.pk.live == 0 {
		empty = append(empty, e.pk)
	}
	return empty
}

// setLocked makes e the entry of k, replacing (and unlinking) any other;
// mu held. It returns the packs left without a live member.
func (x *index) setLocked(k tier.Key, e indexEntry, empty []*pack) []*pack {
	old, had := x.blocks[k]
	if had {
		empty = x.unlinkLocked(old, empty)
	}
	x.seq++
	e.seq = x.seq
	x.used += e.length - old.length
	x.blocks[k] = e
	if e.pk != nil {
		e.pk.live++
		e.pk.liveBytes += e.length
	}
	return empty
}

// reserve books n bytes for a Put of k if the capacity allows it (cap 0 =
// unbounded), counting the copy of k that the Put replaces as free. wake
// reports that size eviction should run: the booking took the load (used
// plus reserved bytes) from at most high to above it, or was refused.
func (x *index) reserve(k tier.Key, n, capacity, high int64) (ok, wake bool) {
	return x.reserveMany([]tier.Key{k}, n, capacity, high)
}

// reserveMany is reserve for a put of n bytes in all replacing keys.
func (x *index) reserveMany(keys []tier.Key, n, capacity, high int64) (ok, wake bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	load := x.used + x.reserved
	free := int64(0)
	for _, k := range keys {
		free += x.blocks[k].length
	}
	if capacity > 0 && load-free+n > capacity {
		return false, true
	}
	x.reserved += n
	return true, capacity > 0 && load <= high && load+n > high
}

// unreserve gives back n reserved bytes of a put that failed.
func (x *index) unreserve(n int64) {
	x.mu.Lock()
	x.reserved -= n
	x.mu.Unlock()
}

// load returns the payload bytes stored plus those of Puts in flight.
func (x *index) load() int64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.used + x.reserved
}

// put ends a Put of n reserved bytes; if stored, k now has n bytes in its
// own object, stored at mod (Unix ns). It returns the packs left without a
// live member (to be deleted).
func (x *index) put(k tier.Key, n int64, stored bool, mod int64) []*pack {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.reserved -= n
	if !stored {
		return nil
	}
	empty := x.setLocked(k, indexEntry{length: n, mod: mod}, nil)
	x.touch(k)
	return empty
}

// putPack ends the put of pack pk (reserved bytes: its payload): every
// member now lives in it. It returns the packs left without a live member.
func (x *index) putPack(pk *pack) []*pack {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.reserved -= pk.ref.payload()
	var empty []*pack
	x.packs[pk.name] = pk
	for i := range pk.ref.count {
		k := pk.ref.key(i)
		empty = x.setLocked(k, indexEntry{length: pk.ref.blockLen(i), mod: pk.mod, pk: pk}, empty)
		x.touch(k)
	}
	return empty
}

// remove forgets k and returns the packs left without a live member.
func (x *index) remove(k tier.Key) []*pack {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.removeLocked(k, nil)
}

func (x *index) removeLocked(k tier.Key, empty []*pack) []*pack {
	if e, ok := x.blocks[k]; ok {
		x.used -= e.length
		delete(x.blocks, k)
		empty = x.unlinkLocked(e, empty)
	}
	x.touch(k)
	return empty
}

// removeIfSeq forgets k if its entry is still the one set at sequence
// number seq; it returns the packs left without a live member.
func (x *index) removeIfSeq(k tier.Key, seq uint64) []*pack {
	x.mu.Lock()
	defer x.mu.Unlock()
	if e, ok := x.blocks[k]; ok && e.seq == seq {
		return x.removeLocked(k, nil)
	}
	return nil
}

// removeIfIn forgets k if its live copy is in pack pk; it returns the
// packs left without a live member.
func (x *index) removeIfIn(k tier.Key, pk *pack) []*pack {
	x.mu.Lock()
	defer x.mu.Unlock()
	if e, ok := x.blocks[k]; ok && e.pk == pk {
		return x.removeLocked(k, nil)
	}
	return nil
}

// unpack takes k out of pack pk, if its entry is there, back to old (its
// per-block object's entry) or, if old is nil, to not held; it returns
// the packs left without a live member.
func (x *index) unpack(k tier.Key, pk *pack, old *indexEntry) []*pack {
	x.mu.Lock()
	defer x.mu.Unlock()
	if e, ok := x.blocks[k]; !ok || e.pk != pk {
		return nil
	}
	if old == nil {
		return x.removeLocked(k, nil)
	}
	empty := x.setLocked(k, indexEntry{length: old.length, mod: old.mod}, nil)
	x.touch(k)
	return empty
}

// dropPack forgets pack pk, whose object is gone from the store, and every
// key whose live copy it held; it returns how many keys it forgot.
func (x *index) dropPack(pk *pack) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	n := 0
	for i := range pk.ref.count {
		k := pk.ref.key(i)
		if e, ok := x.blocks[k]; ok && e.pk == pk {
			x.used -= e.length
			delete(x.blocks, k)
			n++
		}
		x.touch(k)
	}
	pk.live, pk.liveBytes, pk.gone = 0, 0, true
	if x.packs[pk.name] == pk {
		delete(x.packs, pk.name)
	}
	return n
}

// knownPack returns the pack the index knows by name, if any.
func (x *index) knownPack(name string) *pack {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.packs[name]
}

// packLive reports whether pk is still known with a live member, and the
// first live member's key.
func (x *index) packLive(pk *pack) (tier.Key, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if pk.gone || pk.live == 0 {
		return tier.Key{}, false
	}
	for i := range pk.ref.count {
		k := pk.ref.key(i)
		if e, ok := x.blocks[k]; ok && e.pk == pk {
			return k, true
		}
	}
	return tier.Key{}, false
}

// emptyPacks returns the known packs without a live member that are not
// yet deleted (a delete that failed is retried at the next listing).
func (x *index) emptyPacks() []*pack {
	x.mu.Lock()
	defer x.mu.Unlock()
	var out []*pack
	for _, pk := range x.packs {
		if pk.live == 0 && !pk.gone {
			out = append(out, pk)
		}
	}
	return out
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
// seq (a Put that finished after a Get that missed began); it returns the
// packs left without a live member.
func (x *index) removeIfOlder(k tier.Key, seq uint64) []*pack {
	x.mu.Lock()
	defer x.mu.Unlock()
	if e, ok := x.blocks[k]; ok && e.seq <= seq {
		return x.removeLocked(k, nil)
	}
	return nil
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

// packCount returns the packs known.
func (x *index) packCount() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.packs)
}

// beginList marks a listing in flight.
func (x *index) beginList() {
	x.mu.Lock()
	x.listing++
	x.mu.Unlock()
}

// endList ends a listing; if listed is not nil (the listing completed), the
// index becomes listed, except for keys touched during the listing and
// packs whose put is in flight (beginPack). listedPacks are the packs the
// listing found, by name, as new structs; listed gives each listed key's
// live copy. A listed key whose live copy the listing places in a pack the
// index already knows keeps its entry as it is: the index knows which
// members of its packs died. It returns the packs without a live member,
// to be deleted.
func (x *index) endList(listed map[tier.Key]listedBlock, listedPacks map[string]*pack) []*pack {
	x.mu.Lock()
	defer x.mu.Unlock()
	defer func() {
		x.listing--
		if x.listing == 0 {
			clear(x.touched)
		}
	}()
	if listed == nil {
		return nil
	}
	var empty []*pack
	for k, e := range x.blocks {
		if _, ok := listed[k]; !ok {
			if _, t := x.touched[k]; !t {
				x.used -= e.length
				delete(x.blocks, k)
				empty = x.unlinkLocked(e, empty)
			}
		}
	}
	for k, b := range listed {
		if b.pk != nil && (x.packs[b.pk.name] != nil && x.packs[b.pk.name] != b.pk || x.pending[b.pk.name]) {
			continue // the index knows its live members, or its put is in flight
		}
		if _, t := x.touched[k]; t {
			continue
		}
		if e, ok := x.blocks[k]; ok && e.pk == nil && b.pk == nil && e.length == b.length && e.mod == b.mod {
			continue // unchanged: keep its seq (an eviction in flight still matches)
		}
		if b.pk != nil {
			x.packs[b.pk.name] = b.pk
		}
		empty = x.setLocked(k, indexEntry{length: b.length, mod: b.mod, pk: b.pk}, empty)
	}
	for name, pk := range listedPacks {
		if x.packs[name] == nil && !x.pending[name] {
			empty = append(empty, pk) // listed, but no member lives in it
		}
	}
	for name, pk := range x.packs {
		if pk.live > 0 {
			continue
		}
		if listedPacks[name] != nil {
			empty = append(empty, pk)
		} else {
			pk.gone = true // deleted meanwhile, or by another process
			delete(x.packs, name)
		}
	}
	slices.SortFunc(empty, func(a, b *pack) int { return cmp.Compare(a.name, b.name) })
	return slices.CompactFunc(empty, func(a, b *pack) bool { return a == b })
}

// beginPack marks the put of the pack named name in flight: listings
// leave it alone until endPack.
func (x *index) beginPack(name string) {
	x.mu.Lock()
	x.pending[name] = true
	x.mu.Unlock()
}

// endPack ends the put of a pack begun with beginPack.
func (x *index) endPack(name string) {
	x.mu.Lock()
	delete(x.pending, name)
	x.mu.Unlock()
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

// candidate is a block, or a pack, chosen for size eviction: its entry as
// the scan saw it.
type candidate struct {
	k      tier.Key // the block, or a live member of the pack
	length int64    // payload bytes freed by deleting it
	seq    uint64
	mod    int64
	pk     *pack // non-nil: evict this pack object whole
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
// the caller re-checks each candidate's seq under its key lock. A pack is
// one candidate (its live bytes, its mod, retained if its first member
// looked at is); the map of packs looked at grows with the packs of the
// index.
func (x *index) oldest(need int64, retain func(tier.Key) bool) []candidate {
	var h candHeap
	var sum int64
	packs := map[*pack]bool{} // packs looked at
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
		if e.pk != nil {
			// A pack is evicted whole (deleting one member frees
			// nothing), and retained as a whole: all its members are
			// blocks of one object generation, so of one class.
			if packs[e.pk] {
				continue
			}
			packs[e.pk] = true
			e.length = e.pk.liveBytes
		}
		if retain != nil {
			x.mu.Unlock()
			r := retain(k)
			x.mu.Lock()
			if r {
				continue
			}
		}
		if e.pk != nil && (e.pk.gone || e.pk.live == 0) {
			continue // deleted while mu was released
		}
		heap.Push(&h, candidate{k: k, length: e.length, seq: e.seq, mod: e.mod, pk: e.pk})
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
