package sim

import (
	"container/list"

	"github.com/ctxmem/ctxmemd/heat"
)

// wTinyLFU is W-TinyLFU (Einziger, Friedman, Manes, ACM ToS 2017): a
// small admission window (LRU) in front of a main cache (segmented LRU:
// probation and protected), with heat.Sketch deciding whether the window's
// victim may replace the main cache's victim. It is one of the alternatives
// the simulator compares; the core does not use it.
type wTinyLFU struct {
	windowCap, protectedCap, mainCap int
	window, probation, protected     *list.List
	where                            map[uint64]*list.Element
	segment                          map[uint64]uint8
	sk                               *heat.Sketch
}

const (
	segWindow uint8 = iota
	segProbation
	segProtected
)

// newWTinyLFU builds a W-TinyLFU of capacity blocks with window the
// fraction of capacity in the window and protected the fraction of the
// main cache that is protected.
func newWTinyLFU(capacity int, window, protected float64, sampleFactor int) *wTinyLFU {
	w := max(1, int(float64(capacity)*window))
	w = min(w, capacity)
	m := capacity - w
	return &wTinyLFU{
		windowCap: w, mainCap: m, protectedCap: int(float64(m) * protected),
		window: list.New(), probation: list.New(), protected: list.New(),
		where: make(map[uint64]*list.Element, capacity), segment: make(map[uint64]uint8, capacity),
		sk: heat.NewSketch(capacity, sampleFactor*capacity),
	}
}

func (c *wTinyLFU) put(l *list.List, seg uint8, b uint64) {
	c.where[b] = l.PushFront(b)
	c.segment[b] = seg
}

func (c *wTinyLFU) drop(l *list.List, e *list.Element) uint64 {
	b := e.Value.(uint64)
	l.Remove(e)
	delete(c.where, b)
	delete(c.segment, b)
	return b
}

func (c *wTinyLFU) lookup(r ref) bool {
	b := r.block
	c.sk.Increment(heat.Mix64(b))
	e, ok := c.where[b]
	if !ok {
		return false
	}
	switch c.segment[b] {
	case segWindow:
		c.window.MoveToFront(e)
	case segProbation:
		c.drop(c.probation, e)
		c.put(c.protected, segProtected, b)
		if c.protected.Len() > c.protectedCap {
			c.put(c.probation, segProbation, c.drop(c.protected, c.protected.Back()))
		}
	case segProtected:
		c.protected.MoveToFront(e)
	}
	return true
}

func (c *wTinyLFU) contains(b uint64) bool {
	_, ok := c.where[b]
	return ok
}

// insert puts a missed block in the window; the window's victim then
// enters the main cache, replacing the main cache's victim if the sketch
// admits it. The block that loses leaves the cache.
func (c *wTinyLFU) insert(r ref) (victim uint64, evicted, admitted bool) {
	c.put(c.window, segWindow, r.block)
	if c.window.Len() <= c.windowCap {
		return 0, false, true
	}
	cand := c.drop(c.window, c.window.Back())
	if c.probation.Len()+c.protected.Len() < c.mainCap {
		c.put(c.probation, segProbation, cand)
		return 0, false, true
	}
	victims := c.probation
	if victims.Len() == 0 {
		victims = c.protected
	}
	if victims.Len() == 0 { // no main cache at all
		return cand, true, true
	}
	v := victims.Back()
	if c.sk.Admit(heat.Mix64(cand), heat.Mix64(v.Value.(uint64))) {
		victim = c.drop(victims, v)
		c.put(c.probation, segProbation, cand)
		return victim, true, true
	}
	return cand, true, true
}
