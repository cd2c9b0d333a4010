// Package mrc builds miss-ratio curves (hit ratio versus cache capacity)
// online, from a stream of references, in bounded memory, with SHARDS
// spatial sampling: C. A. Waldspurger, N. Park, A. Garthwaite, I. Ahmad,
// "Efficient MRC Construction with SHARDS", USENIX FAST '15.
//
// A reference to key K is sampled when hash(K) falls under a threshold T
// (hash values are 64 bits, the modulus P is 2^64, so the sampling rate is
// R = T / 2^64). Every reference to a sampled key is sampled, so the
// sampled keys see exactly their own LRU stack distances, computed here
// with a Fenwick tree over the sampled clock (O(log n) per sampled
// reference). A distance d among sampled keys stands for d / R among all
// keys, and goes into a histogram of log-spaced buckets (BucketsPerOctave
// per doubling, in blocks: one key is one block, a file of the KV
// layouts). The curve is
//
//	hit ratio(c) = references with scaled distance < c / all references
//
// with a first reference (a cold miss) at infinite distance: exactly the
// hit ratio of an LRU cache of c blocks when R = 1.
//
// Two variants, both from the paper:
//
//   - fixed-rate (Config.MaxKeys = 0): R stays Config.Rate; memory grows
//     with R × distinct keys.
//   - fixed-size (Config.MaxKeys > 0): at most MaxKeys keys are tracked;
//     when one more would be, the key with the largest hash is dropped and
//     T is lowered to its hash, the histogram being rescaled by R'/R. The
//     tracker starts at Config.Rate (1: exact while the keys fit).
//
// Both use the SHARDS_adj correction: the difference between the expected
// number of sampled references (all references × R) and the number seen
// is added to the first bucket (distance 0), which removes most of the
// bias sampling gives small caches.
//
// Error: the paper reports a mean absolute error of the miss ratio of
// about 0.002 at R = 0.01 and 0.0004 with 8K keys (fixed-size) over 124
// block traces. On the bundled Mooncake trace the package's tests check a
// maximum absolute error of at most 0.02 against the exact LRU of
// heat/sim at 1k-100k blocks, at R = 0.01 and with 8192 keys (docs/curves.md
// has the figures). The log buckets add an interpolation error of at most
// the curve's rise over one bucket (2^(1/16) ≈ 4.4% of capacity).
package mrc

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
)

// BucketsPerOctave is the histogram's resolution: bucket k ≥ 1 covers
// scaled distances [2^((k-1)/16), 2^(k/16)) blocks; bucket 0 is [0, 1).
const BucketsPerOctave = 16

// maxBuckets covers distances up to 2^40 blocks; larger ones go in the
// last bucket.
const maxBuckets = 40*BucketsPerOctave + 1

// Defaults of Config.
const (
	DefaultRate    = 1.0
	DefaultMaxKeys = 8192
)

// Config chooses the variant. The zero Config is fixed-size with
// DefaultMaxKeys keys starting at rate 1.
type Config struct {
	// Rate is the (initial) sampling rate R, in (0, 1]; 0 means
	// DefaultRate.
	Rate float64
	// MaxKeys bounds the tracked keys (fixed-size SHARDS); 0 means
	// DefaultMaxKeys, negative means no bound (fixed-rate SHARDS).
	MaxKeys int
}

// entry is one tracked key.
type entry struct {
	hash uint64
	last int64 // sampled clock of the key's latest reference
	heap int   // index in Tracker.heap
	// The latest reference, for Cancel: the clock before it (0: it was
	// the key's first), its bucket (-1: cold) and weight (stored units).
	prev       int64
	bucket     int
	weight     float64
	dist       float64 // its scaled distance (finite references)
	cancelable bool
}

// Tracker is one curve (one namespace, or the whole mount). It is safe
// for concurrent use; Observe of an unsampled key is a compare and an
// atomic add.
type Tracker struct {
	thr     atomic.Uint64 // sample iff hash <= thr
	refs    atomic.Int64  // all references, sampled or not
	maxKeys int

	mu    sync.Mutex
	rate  float64 // (thr+1) / 2^64
	clock int64
	fen   []int32 // Fenwick tree over clock 1..len(fen)-1: 1 at each key's last reference
	keys  map[uint64]*entry
	heap  []*entry // max-heap by hash (fixed-size only)
	// Stored counts; the actual counts are stored × scale (scale falls
	// by R'/R each time the rate is lowered).
	hist      [maxBuckets]float64
	cold      float64
	scale     float64
	sumDist   float64 // Σ scaled distance × weight, of finite distances
	maxBucket int
}

// New returns an empty Tracker.
func New(cfg Config) *Tracker {
	r := cfg.Rate
	if r <= 0 || r > 1 {
		r = DefaultRate
	}
	mk := cfg.MaxKeys
	if mk == 0 {
		mk = DefaultMaxKeys
	}
	t := &Tracker{maxKeys: mk, rate: r, scale: 1, keys: make(map[uint64]*entry), fen: make([]int32, 1024)}
	t.thr.Store(rateThreshold(r))
	return t
}

func rateThreshold(r float64) uint64 {
	if r >= 1 {
		return math.MaxUint64
	}
	return uint64(r * (1 << 64))
}

// Hash64 is the finaliser of SplitMix64: a 64-bit mix of an integer key
// (a block id), the hash callers give Observe.
func Hash64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// HashName hashes a name under a parent id (FNV-1a of the name, mixed
// with the parent): the key of a file in a directory.
func HashName(parent uint64, name string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(name); i++ {
		h ^= uint64(name[i])
		h *= 1099511628211
	}
	return Hash64(h ^ Hash64(parent))
}

// Sampled reports whether a key of hash h is sampled now.
func (t *Tracker) Sampled(h uint64) bool { return h <= t.thr.Load() }

// Observe records one reference to the key of hash h (Hash64, HashName).
func (t *Tracker) Observe(h uint64) {
	t.refs.Add(1)
	if h > t.thr.Load() {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if h > t.thr.Load() {
		return
	}
	t.clock++
	if int(t.clock) >= len(t.fen) {
		t.compact()
	}
	w := 1 / t.scale
	e := t.keys[h]
	if e == nil {
		e = &entry{hash: h, bucket: -1}
		t.keys[h] = e
		if t.maxKeys > 0 {
			t.heapPush(e)
		}
		t.cold += w
	} else {
		d := t.prefix(t.clock-1) - t.prefix(e.last)
		x := float64(d) / t.rate
		b := bucketOf(x)
		t.hist[b] += w
		t.sumDist += x * w
		t.maxBucket = max(t.maxBucket, b)
		t.fenAdd(e.last, -1)
		e.prev, e.bucket, e.dist = e.last, b, x
	}
	e.last, e.weight, e.cancelable = t.clock, w, true
	t.fenAdd(t.clock, 1)
	if t.maxKeys > 0 && len(t.keys) > t.maxKeys {
		t.lower()
	}
}

// Cancel takes back the latest Observe(h), when no later reference to the
// same key came in between: the mount uses it for the kernel's own lookup
// of a name it is about to create, which is no KV lookup.
func (t *Tracker) Cancel(h uint64) {
	t.refs.Add(-1)
	if h > t.thr.Load() {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.keys[h]
	if e == nil || !e.cancelable {
		return
	}
	e.cancelable = false
	t.fenAdd(e.last, -1)
	if e.bucket < 0 {
		t.cold -= e.weight
		t.remove(e)
		return
	}
	t.hist[e.bucket] -= e.weight
	t.sumDist -= e.dist * e.weight
	e.last = e.prev
	t.fenAdd(e.last, 1)
}

// remove drops e (its Fenwick mark already taken off).
func (t *Tracker) remove(e *entry) {
	delete(t.keys, e.hash)
	if t.maxKeys > 0 {
		t.heapRemove(e.heap)
	}
}

// lower drops the key with the largest hash and lowers the threshold to
// it (fixed-size SHARDS), rescaling the histogram by R'/R.
func (t *Tracker) lower() {
	e := t.heap[0]
	t.fenAdd(e.last, -1)
	t.remove(e)
	thr := e.hash - 1
	nr := (float64(thr) + 1) / (1 << 64)
	t.scale *= nr / t.rate
	t.rate = nr
	t.thr.Store(thr)
}

// compact renumbers the tracked keys' clocks 1..n in order and sizes the
// Fenwick tree for 2n more references (at least 1024). Cancel data is
// dropped.
func (t *Tracker) compact() {
	es := make([]*entry, 0, len(t.keys))
	for _, e := range t.keys {
		es = append(es, e)
	}
	slices.SortFunc(es, func(a, b *entry) int { return int(a.last - b.last) })
	n := max(2*len(es)+2, 1024)
	if t.maxKeys > 0 {
		n = max(2*t.maxKeys+2, 1024)
	}
	t.fen = make([]int32, n)
	for i, e := range es {
		e.last, e.cancelable = int64(i+1), false
		t.fenAdd(e.last, 1)
	}
	t.clock = int64(len(es) + 1)
}

func (t *Tracker) fenAdd(i int64, v int32) {
	for ; i > 0 && int(i) < len(t.fen); i += i & -i {
		t.fen[i] += v
	}
}

func (t *Tracker) prefix(i int64) int64 {
	var s int64
	for ; i > 0; i -= i & -i {
		s += int64(t.fen[i])
	}
	return s
}

// Max-heap by hash.
func (t *Tracker) heapPush(e *entry) {
	e.heap = len(t.heap)
	t.heap = append(t.heap, e)
	t.up(e.heap)
}

func (t *Tracker) heapRemove(i int) {
	last := len(t.heap) - 1
	t.swap(i, last)
	t.heap = t.heap[:last]
	if i < last {
		t.down(i)
		t.up(i)
	}
}

func (t *Tracker) swap(i, j int) {
	t.heap[i], t.heap[j] = t.heap[j], t.heap[i]
	t.heap[i].heap, t.heap[j].heap = i, j
}

func (t *Tracker) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if t.heap[p].hash >= t.heap[i].hash {
			return
		}
		t.swap(i, p)
		i = p
	}
}

func (t *Tracker) down(i int) {
	for {
		l, m := 2*i+1, i
		if l < len(t.heap) && t.heap[l].hash > t.heap[m].hash {
			m = l
		}
		if r := l + 1; r < len(t.heap) && t.heap[r].hash > t.heap[m].hash {
			m = r
		}
		if m == i {
			return
		}
		t.swap(i, m)
		i = m
	}
}

// bucketOf returns the bucket of scaled distance x (blocks).
func bucketOf(x float64) int {
	if x < 1 {
		return 0
	}
	b := 1 + int(math.Log2(x)*BucketsPerOctave)
	return min(b, maxBuckets-1)
}

// bucketLow is bucket b's lower edge in blocks (0 for bucket 0).
func bucketLow(b int) float64 {
	if b == 0 {
		return 0
	}
	return math.Exp2(float64(b-1) / BucketsPerOctave)
}

// Bytes estimates the Tracker's memory (bytes): per tracked key its map
// slot, entry and heap slot; the Fenwick tree; the histogram.
func (t *Tracker) Bytes() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.bytesLocked()
}

// perKeyBytes: a Go map slot of uint64 → pointer (~16 B × 1.5 load
// overhead + tophash), the 72-byte entry, an 8-byte heap slot.
const perKeyBytes = 24 + 72 + 8

func (t *Tracker) bytesLocked() int64 {
	return int64(len(t.keys))*perKeyBytes + int64(len(t.fen))*4 + maxBuckets*8 + 256
}
