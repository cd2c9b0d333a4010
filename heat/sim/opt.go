package sim

// optHits returns the hits of Belady's MIN/OPT (L. A. Belady, "A study of
// replacement algorithms for a virtual-storage computer", IBM Systems
// Journal 5(2), 1966) over blocks with a cache of capacity blocks: every
// miss is inserted, and when full the resident block whose next reference
// is farthest in the future (or never) is evicted. Next-use distances are
// computed offline in one backward pass; the resident set is a max-heap
// of next-use positions with lazy deletion of stale entries.
func optHits(blocks []uint64, capacity int) int64 {
	next := nextUse(blocks)
	resident := make(map[uint64]int32, capacity) // block -> its next use
	var h maxHeap
	var hits int64
	for i, b := range blocks {
		if _, ok := resident[b]; ok {
			hits++
		} else if len(resident) >= capacity {
			for {
				top := h.pop()
				if nu, ok := resident[top.block]; ok && nu == top.next {
					delete(resident, top.block)
					break
				}
			}
		}
		resident[b] = next[i]
		h.push(optEntry{next: next[i], block: b})
		if len(h) > 4*capacity+1024 { // drop stale entries
			h = h.compact(resident)
		}
	}
	return hits
}

// never is the next use of a block's last reference.
const never = int32(1<<31 - 1)

// nextUse returns, for each reference i, the position of the next
// reference to the same block, or never.
func nextUse(blocks []uint64) []int32 {
	next := make([]int32, len(blocks))
	last := make(map[uint64]int32, len(blocks)/2)
	for i := len(blocks) - 1; i >= 0; i-- {
		if j, ok := last[blocks[i]]; ok {
			next[i] = j
		} else {
			next[i] = never
		}
		last[blocks[i]] = int32(i)
	}
	return next
}

// oracleLRUHits returns the hits of LRU with perfect admission: it knows
// whether a block will be referenced again (not when), keeps a block only
// while it has a future reference, and evicts least recently used. It is an
// offline bound on what reuse prediction is worth, not a policy.
func oracleLRUHits(blocks []uint64, capacity int) int64 {
	next := nextUse(blocks)
	c := newRefLRU(capacity)
	var hits int64
	for i, b := range blocks {
		e, ok := c.where[b]
		if ok {
			hits++
		}
		switch {
		case next[i] == never && ok:
			c.order.Remove(e)
			delete(c.where, b)
		case next[i] != never:
			access(c, ref{block: b, i: i})
		}
	}
	return hits
}

type optEntry struct {
	next  int32
	block uint64
}

// maxHeap is a binary max-heap on next.
type maxHeap []optEntry

func (h *maxHeap) push(e optEntry) {
	*h = append(*h, e)
	a := *h
	for i := len(a) - 1; i > 0; {
		p := (i - 1) / 2
		if a[p].next >= a[i].next {
			break
		}
		a[p], a[i] = a[i], a[p]
		i = p
	}
}

func (h *maxHeap) pop() optEntry {
	a := *h
	top := a[0]
	n := len(a) - 1
	a[0] = a[n]
	a = a[:n]
	for i := 0; ; {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && a[r].next > a[l].next {
			m = r
		}
		if a[i].next >= a[m].next {
			break
		}
		a[i], a[m] = a[m], a[i]
		i = m
	}
	*h = a
	return top
}

// compact rebuilds the heap from the live entries only.
func (h maxHeap) compact(resident map[uint64]int32) maxHeap {
	var out maxHeap
	for _, e := range h {
		if nu, ok := resident[e.block]; ok && nu == e.next {
			out.push(e)
		}
	}
	return out
}
