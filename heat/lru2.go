package heat

import "time"

// singleOffset shifts the rank of a block seen only once below every block
// seen twice: ranks are UnixNano values (< 2^62 until the year 2116), so
// last-2^62 is negative and sorts first.
const singleOffset = int64(1) << 62

// LRU2 orders keys for eviction by their second-most-recent access (LRU-K
// with K=2: E. J. O'Neil, P. E. O'Neil, G. Weikum, "The LRU-K page
// replacement algorithm for database disk buffering", SIGMOD 1993). The
// victim is the key whose penultimate access is oldest; a key accessed only
// once has an infinitely old penultimate access, so every once-accessed key
// is evicted before any twice-accessed key, oldest last access first.
//
// This is the plain ordering helper: it keeps no history for removed keys
// (no Retained Information Period) and does not merge correlated references
// (no Correlated Reference Period); an access at the same nanosecond as the
// last one still counts. Times should be non-decreasing; an out-of-order
// time is tolerated (the later two accesses are kept) but the order is then
// approximate. Operations are O(log n) (an indexed binary heap).
// An LRU2 is not safe for concurrent use.
type LRU2[K comparable] struct {
	h *rankHeap[K, int64] // rank: penultimate (or last-2^62), aux: last access
}

// NewLRU2 returns an empty LRU2.
func NewLRU2[K comparable]() *LRU2[K] {
	return &LRU2[K]{h: newRankHeap[K, int64]()}
}

// Touch records an access of k at now, adding k if it is absent.
func (l *LRU2[K]) Touch(k K, now time.Time) {
	l.touchNano(k, now.UnixNano(), 0)
}

// touchNano is Touch at n UnixNano, recording hash for admission tests.
func (l *LRU2[K]) touchNano(k K, n int64, hash uint64) {
	it, ok := l.h.get(k)
	if !ok {
		l.h.set(k, n-singleOffset, n, hash)
		return
	}
	// The old last access becomes the penultimate one. With an
	// out-of-order time, keep the later of the two as the last access.
	pen, last := it.aux, n
	if last < pen {
		pen, last = last, pen
	}
	l.h.set(k, pen, last, hash)
}

// Remove forgets k and its history; it reports whether k was present.
func (l *LRU2[K]) Remove(k K) bool { return l.h.remove(k) }

// Victim returns the key LRU-2 would evict next, without removing it; ok
// is false when the LRU2 is empty.
func (l *LRU2[K]) Victim() (k K, ok bool) {
	it, ok := l.h.min()
	return it.key, ok
}

// Contains reports whether k is tracked.
func (l *LRU2[K]) Contains(k K) bool { return l.h.has(k) }

// Len returns the number of keys tracked.
func (l *LRU2[K]) Len() int { return l.h.len() }
