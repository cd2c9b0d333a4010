package sim

import "container/list"

// arc is ARC (N. Megiddo, D. S. Modha, "ARC: A Self-Tuning, Low Overhead
// Replacement Cache", FAST 2003): two LRU lists (seen once, seen at least
// twice) whose split adapts through ghost lists of recently evicted keys.
// One of the alternatives the simulator compares; the core does not use it.
type arc struct {
	c              int
	p              float64 // target size of t1
	t1, t2, b1, b2 *list.List
	where          map[uint64]*list.Element
	in             map[uint64]uint8 // which list: 1=t1 2=t2 3=b1 4=b2
}

func newARC(capacity int) *arc {
	return &arc{c: capacity, t1: list.New(), t2: list.New(), b1: list.New(), b2: list.New(),
		where: make(map[uint64]*list.Element, 2*capacity), in: make(map[uint64]uint8, 2*capacity)}
}

func (a *arc) list(i uint8) *list.List {
	switch i {
	case 1:
		return a.t1
	case 2:
		return a.t2
	case 3:
		return a.b1
	}
	return a.b2
}

// move puts b at the MRU end of list to, taking it off its current list.
func (a *arc) move(b uint64, to uint8) {
	if i, ok := a.in[b]; ok {
		a.list(i).Remove(a.where[b])
	}
	a.where[b] = a.list(to).PushFront(b)
	a.in[b] = to
}

// dropLRU forgets the LRU key of list i and returns it.
func (a *arc) dropLRU(i uint8) uint64 {
	e := a.list(i).Back()
	b := e.Value.(uint64)
	a.list(i).Remove(e)
	delete(a.where, b)
	delete(a.in, b)
	return b
}

// replace evicts from t1 or t2 into its ghost list (ARC's REPLACE) and
// returns the block that left the cache.
func (a *arc) replace(inB2 bool) (uint64, bool) {
	n1 := float64(a.t1.Len())
	if a.t1.Len() > 0 && (n1 > a.p || (inB2 && n1 == a.p) || a.t2.Len() == 0) {
		v := a.t1.Back().Value.(uint64)
		a.move(v, 3)
		return v, true
	} else if a.t2.Len() > 0 {
		v := a.t2.Back().Value.(uint64)
		a.move(v, 4)
		return v, true
	}
	return 0, false
}

func (a *arc) lookup(r ref) bool {
	switch a.in[r.block] {
	case 1, 2:
		a.move(r.block, 2)
		return true
	}
	return false
}

func (a *arc) contains(b uint64) bool {
	i := a.in[b]
	return i == 1 || i == 2
}

// insert follows a miss; a key in a ghost list adapts p (ARC's cases II
// and III), any other is new (case IV).
func (a *arc) insert(r ref) (victim uint64, evicted, admitted bool) {
	b := r.block
	switch a.in[b] {
	case 3:
		d := 1.0
		if a.b1.Len() < a.b2.Len() {
			d = float64(a.b2.Len()) / float64(a.b1.Len())
		}
		a.p = min(float64(a.c), a.p+d)
		victim, evicted = a.replace(false)
		a.move(b, 2)
		return victim, evicted, true
	case 4:
		d := 1.0
		if a.b2.Len() < a.b1.Len() {
			d = float64(a.b1.Len()) / float64(a.b2.Len())
		}
		a.p = max(0, a.p-d)
		victim, evicted = a.replace(true)
		a.move(b, 2)
		return victim, evicted, true
	}
	l1 := a.t1.Len() + a.b1.Len()
	total := l1 + a.t2.Len() + a.b2.Len()
	switch {
	case l1 == a.c:
		if a.t1.Len() < a.c {
			a.dropLRU(3)
			victim, evicted = a.replace(false)
		} else {
			victim, evicted = a.dropLRU(1), true
		}
	case l1 < a.c && total >= a.c:
		if total == 2*a.c {
			a.dropLRU(4)
		}
		victim, evicted = a.replace(false)
	}
	a.move(b, 1)
	return victim, evicted, true
}
