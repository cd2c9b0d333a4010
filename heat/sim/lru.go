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

func (c *refLRU) access(b uint64, _ int64) bool {
	if e, ok := c.where[b]; ok {
		c.order.MoveToFront(e)
		return true
	}
	c.where[b] = c.order.PushFront(b)
	if c.order.Len() > c.capacity {
		e := c.order.Back()
		c.order.Remove(e)
		delete(c.where, e.Value.(uint64))
	}
	return false
}
