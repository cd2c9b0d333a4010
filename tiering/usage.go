package tiering

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
)

// Usage is the live objects of one namespace and front-end label (the
// Kind given at create) and the sum of their sizes in bytes, as Usage
// returns it.
type Usage struct {
	Namespace string
	Kind      string
	Objects   int64
	Bytes     int64 // sum of the objects' sizes (logical, holes included)
}

// usageKey names one Usage row.
type usageKey struct{ ns, kind string }

// usageCount is one Usage row's counters, shared by its objects
// (object.use): changed where an object enters or leaves the object
// table and where its size changes, so Usage never walks the objects.
type usageCount struct{ objects, bytes atomic.Int64 }

// usageTable maps (namespace, kind) to its counters. Rows are made on
// demand and kept (a namespace's row outlives its last object; there are
// as many rows as namespaces × front ends).
type usageTable struct {
	mu   sync.Mutex
	rows map[usageKey]*usageCount
}

func (u *usageTable) row(ns, kind string) *usageCount {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.rows == nil {
		u.rows = make(map[usageKey]*usageCount)
	}
	k := usageKey{ns, kind}
	c := u.rows[k]
	if c == nil {
		c = new(usageCount)
		u.rows[k] = c
	}
	return c
}

// countInLocked counts o, just entered into the object table, in its
// Usage row. o.mu held (or o not yet shared).
func (s *Store) countInLocked(o *object) {
	if o.use != nil {
		return
	}
	o.use = s.usage.row(o.ns, o.kind)
	o.use.objects.Add(1)
	o.use.bytes.Add(o.size)
}

// countOutLocked uncounts o, leaving the object table. o.mu held for
// writing.
func (s *Store) countOutLocked(o *object) {
	if o.use == nil {
		return
	}
	o.use.objects.Add(-1)
	o.use.bytes.Add(-o.size)
	o.use = nil
}

// setSizeLocked sets o's size and moves its Usage row's bytes with it.
// o.mu held for writing.
func (o *object) setSizeLocked(n int64) {
	if o.use != nil {
		o.use.bytes.Add(n - o.size)
	}
	o.size = n
}

// Usage returns the live objects and bytes per namespace and kind,
// sorted by namespace then kind, rows with no object left out. It is a
// read of counters (cost independent of the number of objects), for
// status and metrics.
func (s *Store) Usage() []Usage {
	s.usage.mu.Lock()
	out := make([]Usage, 0, len(s.usage.rows))
	for k, c := range s.usage.rows {
		if n := c.objects.Load(); n > 0 {
			out = append(out, Usage{Namespace: k.ns, Kind: k.kind, Objects: n, Bytes: c.bytes.Load()})
		}
	}
	s.usage.mu.Unlock()
	slices.SortFunc(out, func(a, b Usage) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Kind, b.Kind))
	})
	return out
}
