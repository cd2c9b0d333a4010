package tiering

import (
	"container/list"
	"time"
)

// g2Policy orders G2's evictable blocks (clean, unpinned). Implementations
// need not be safe for concurrent use; the Store serialises calls with g2mu.
type g2Policy interface {
	// Touch records an access to r, inserting it if absent.
	Touch(r bref, now time.Time)
	// Remove forgets r (no-op when absent).
	Remove(r bref)
	// Victim returns the next block to evict, without removing it.
	Victim() (bref, bool)
	// Len returns the number of tracked blocks.
	Len() int
}

// lruPolicy is a plain LRU g2Policy (used until the heat package's policy
// is plugged in, and as the reference in tests).
type lruPolicy struct {
	l *list.List
	m map[bref]*list.Element
}

func newLRUPolicy() *lruPolicy { return &lruPolicy{l: list.New(), m: make(map[bref]*list.Element)} }

func (p *lruPolicy) Touch(r bref, _ time.Time) {
	if e, ok := p.m[r]; ok {
		p.l.MoveToFront(e)
		return
	}
	p.m[r] = p.l.PushFront(r)
}

func (p *lruPolicy) Remove(r bref) {
	if e, ok := p.m[r]; ok {
		p.l.Remove(e)
		delete(p.m, r)
	}
}

func (p *lruPolicy) Victim() (bref, bool) {
	e := p.l.Back()
	if e == nil {
		return bref{}, false
	}
	return e.Value.(bref), true
}

func (p *lruPolicy) Len() int { return p.l.Len() }
