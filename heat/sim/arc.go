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

// dropLRU forgets the LRU key of list i.
func (a *arc) dropLRU(i uint8) {
	e := a.list(i).Back()
	b := e.Value.(uint64)
	a.list(i).Remove(e)
	delete(a.where, b)
	delete(a.in, b)
}

// replace evicts from t1 or t2 into its ghost list (ARC's REPLACE).
func (a *arc) replace(inB2 bool) {
	n1 := float64(a.t1.Len())
	if a.t1.Len() > 0 && (n1 > a.p || (inB2 && n1 == a.p) || a.t2.Len() == 0) {
		a.move(a.t1.Back().Value.(uint64), 3)
	} else if a.t2.Len() > 0 {
		a.move(a.t2.Back().Value.(uint64), 4)
	}
}

func (a *arc) access(b uint64, _ int64) bool {
	switch a.in[b] {
	case 1, 2:
		a.move(b, 2)
		return true
	case 3:
		d := 1.0
		if a.b1.Len() < a.b2.Len() {
			d = float64(a.b2.Len()) / float64(a.b1.Len())
		}
		a.p = min(float64(a.c), a.p+d)
		a.replace(false)
		a.move(b, 2)
		return false
	case 4:
		d := 1.0
		if a.b2.Len() < a.b1.Len() {
			d = float64(a.b1.Len()) / float64(a.b2.Len())
		}
		a.p = max(0, a.p-d)
		a.replace(true)
		a.move(b, 2)
		return false
	}
	l1 := a.t1.Len() + a.b1.Len()
	total := l1 + a.t2.Len() + a.b2.Len()
	switch {
	case l1 == a.c:
		if a.t1.Len() < a.c {
			a.dropLRU(3)
			a.replace(false)
		} else {
			a.dropLRU(1)
		}
	case l1 < a.c && total >= a.c:
		if total == 2*a.c {
			a.dropLRU(4)
		}
		a.replace(false)
	}
	a.move(b, 1)
	return false
}
