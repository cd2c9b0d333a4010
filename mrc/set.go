package mrc

import (
	"slices"
	"sync"
)

// Set is the curves of a mount: one per namespace and one in total, all
// of the same Config. Keys are hashes (Hash64, HashName) unique across
// namespaces. Safe for concurrent use.
type Set struct {
	cfg   Config
	total *Tracker
	ns    sync.Map // namespace name → *Tracker (lock-free reads)
	mu    sync.Mutex
	names []string
}

// NewSet returns an empty Set.
func NewSet(cfg Config) *Set {
	return &Set{cfg: cfg, total: New(cfg)}
}

// tracker returns namespace ns's Tracker, made on first use.
func (s *Set) tracker(ns string) *Tracker {
	if t, ok := s.ns.Load(ns); ok {
		return t.(*Tracker)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t, loaded := s.ns.LoadOrStore(ns, New(s.cfg))
	if !loaded {
		s.names = append(s.names, ns)
	}
	return t.(*Tracker)
}

// Observe records a reference (unsampled: a map read, compares and
// atomic adds) to key h in namespace ns and in the total.
func (s *Set) Observe(ns string, h uint64) {
	s.total.Observe(h)
	s.tracker(ns).Observe(h)
}

// Cancel takes back the latest Observe(ns, h) (Tracker.Cancel).
func (s *Set) Cancel(ns string, h uint64) {
	s.total.Cancel(h)
	s.tracker(ns).Cancel(h)
}

// NamespaceCurve is one namespace's curve in a Set snapshot.
type NamespaceCurve struct {
	Namespace string
	Curve
}

// Snapshot returns the total curve and the namespaces' curves (sorted by
// name).
func (s *Set) Snapshot() (Curve, []NamespaceCurve) {
	s.mu.Lock()
	names := slices.Clone(s.names)
	s.mu.Unlock()
	slices.Sort(names)
	out := make([]NamespaceCurve, 0, len(names))
	for _, n := range names {
		out = append(out, NamespaceCurve{Namespace: n, Curve: s.tracker(n).Snapshot()})
	}
	return s.total.Snapshot(), out
}
