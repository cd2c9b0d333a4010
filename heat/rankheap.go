package heat

import "cmp"

// rankHeap is an indexed binary min-heap of keys ordered by rank R
// (smallest first). Entries live in a slab (slots, reused through a free
// list); the heap orders slot numbers and each slot records its heap
// position, so sifting touches no map: the key→slot map is read once per
// operation. set and remove are O(log n), get, has and min O(1).
// It is not synchronized.
type rankHeap[K comparable, R cmp.Ordered] struct {
	slots []rankItem[K, R]
	free  []int32
	heap  []int32 // slot numbers in heap order
	idx   map[K]int32
}

// rankItem is one entry: a key with its rank and per-order state.
type rankItem[K comparable, R cmp.Ordered] struct {
	key  K
	rank R
	aux  R      // per-order extra state (LRU2: last access)
	hash uint64 // the key's 64-bit hash, for admission tests
	pos  int32  // index in heap
}

func newRankHeap[K comparable, R cmp.Ordered]() *rankHeap[K, R] {
	return &rankHeap[K, R]{idx: make(map[K]int32)}
}

func (h *rankHeap[K, R]) len() int { return len(h.heap) }

// get returns the item of k and whether it is present.
func (h *rankHeap[K, R]) get(k K) (rankItem[K, R], bool) {
	s, ok := h.idx[k]
	if !ok {
		return rankItem[K, R]{}, false
	}
	return h.slots[s], true
}

func (h *rankHeap[K, R]) has(k K) bool {
	_, ok := h.idx[k]
	return ok
}

// set inserts k or updates its rank, aux and hash, restoring heap order.
func (h *rankHeap[K, R]) set(k K, rank, aux R, hash uint64) {
	if s, ok := h.idx[k]; ok {
		it := &h.slots[s]
		old := it.rank
		it.rank, it.aux, it.hash = rank, aux, hash
		if rank < old {
			h.up(int(it.pos))
		} else if rank > old {
			h.down(int(it.pos))
		}
		return
	}
	var s int32
	item := rankItem[K, R]{key: k, rank: rank, aux: aux, hash: hash, pos: int32(len(h.heap))}
	if n := len(h.free); n > 0 {
		s = h.free[n-1]
		h.free = h.free[:n-1]
		h.slots[s] = item
	} else {
		s = int32(len(h.slots))
		h.slots = append(h.slots, item)
	}
	h.idx[k] = s
	h.heap = append(h.heap, s)
	h.up(len(h.heap) - 1)
}

// min returns the smallest-ranked item.
func (h *rankHeap[K, R]) min() (rankItem[K, R], bool) {
	if len(h.heap) == 0 {
		return rankItem[K, R]{}, false
	}
	return h.slots[h.heap[0]], true
}

// remove deletes k; it reports whether k was present.
func (h *rankHeap[K, R]) remove(k K) bool {
	s, ok := h.idx[k]
	if !ok {
		return false
	}
	delete(h.idx, k)
	i := int(h.slots[s].pos)
	last := len(h.heap) - 1
	if i != last {
		h.heap[i] = h.heap[last]
		h.slots[h.heap[i]].pos = int32(i)
	}
	h.heap = h.heap[:last]
	if i != last {
		h.down(i)
		h.up(i)
	}
	h.slots[s] = rankItem[K, R]{} // drop references held by the key
	h.free = append(h.free, s)
	return true
}

func (h *rankHeap[K, R]) less(i, j int) bool {
	return h.slots[h.heap[i]].rank < h.slots[h.heap[j]].rank
}

func (h *rankHeap[K, R]) swap(i, j int) {
	h.heap[i], h.heap[j] = h.heap[j], h.heap[i]
	h.slots[h.heap[i]].pos = int32(i)
	h.slots[h.heap[j]].pos = int32(j)
}

func (h *rankHeap[K, R]) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h *rankHeap[K, R]) down(i int) {
	n := len(h.heap)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && h.less(r, l) {
			m = r
		}
		if !h.less(m, i) {
			return
		}
		h.swap(i, m)
		i = m
	}
}
