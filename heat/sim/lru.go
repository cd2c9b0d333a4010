package sim

import "container/list"

// refLRU is the reference LRU, written independently of package heat (a
// map and container/list) so that it validates the simulator: on the
// Mooncake trace it must reproduce the published LRU hit ratios.
type refLRU struct {
	capacity int
	order    *list.List // front = most recent
	where    map[uint64]*list.Element
}

func newRefLRU(capacity int) *refLRU {
	return &refLRU{capacity: capacity, order: list.New(), where: make(map[uint64]*list.Element, capacity)}
}

func (c *refLRU) lookup(r ref) bool {
	e, ok := c.where[r.block]
	if ok {
		c.order.MoveToFront(e)
	}
	return ok
}

func (c *refLRU) insert(r ref) (victim uint64, evicted, admitted bool) {
	c.where[r.block] = c.order.PushFront(r.block)
	if c.order.Len() > c.capacity {
		e := c.order.Back()
		c.order.Remove(e)
		victim = e.Value.(uint64)
		delete(c.where, victim)
		return victim, true, true
	}
	return 0, false, true
}

func (c *refLRU) contains(b uint64) bool {
	_, ok := c.where[b]
	return ok
}
