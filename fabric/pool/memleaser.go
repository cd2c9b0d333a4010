package pool

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// MemLeaseOptions configures NewMemLeases.
type MemLeaseOptions struct {
	// TTL is a lease's lifetime from Acquire or the latest Renew; 0 means
	// DefaultLeaseTTL.
	TTL time.Duration
	// Grace is how long past Expires an extent stays unavailable to
	// Acquire (see Leaser); 0 means none, which suits a single host.
	Grace time.Duration
	// Clock returns the current time; nil means time.Now. Tests inject a
	// fake clock to expire leases.
	Clock func() time.Time
	// FirstEpoch is the first epoch handed out; later ones count up from
	// it. 0 means Clock().UnixNano(), so epochs keep growing across
	// restarts of a single-host daemon whose leases live only in memory.
	FirstEpoch uint64
}

// DefaultLeaseTTL is the default lease lifetime.
const DefaultLeaseTTL = 30 * time.Second

// MemLeases is an in-memory lease table over the extents of one pool, for
// tests and single-host mode. Leaser returns per-host handles on it, so
// several simulated hosts in one process share one table. Epochs come
// from one counter over all extents, so every lease has a distinct epoch.
// Acquire scans round-robin from the extent after the last one handed out,
// which delays reuse of a just-freed extent. Safe for concurrent use.
type MemLeases struct {
	ttl, grace time.Duration
	clock      func() time.Time

	mu        sync.Mutex
	extents   []memExtent
	nextEpoch uint64
	cursor    uint32
}

type memExtent struct {
	held  bool // leased and not released (it may have expired)
	lease Lease
}

// NewMemLeases returns a lease table for extents 0..extents-1, all free.
func NewMemLeases(extents uint32, opts MemLeaseOptions) *MemLeases {
	m := &MemLeases{ttl: opts.TTL, grace: opts.Grace, clock: opts.Clock, extents: make([]memExtent, extents)}
	if m.ttl <= 0 {
		m.ttl = DefaultLeaseTTL
	}
	if m.clock == nil {
		m.clock = time.Now
	}
	m.nextEpoch = opts.FirstEpoch
	if m.nextEpoch == 0 {
		m.nextEpoch = uint64(m.clock().UnixNano())
	}
	return m
}

// Leaser returns the handle through which host holder acquires, renews
// and releases leases.
func (m *MemLeases) Leaser(holder string) Leaser { return &memLeaser{m: m, holder: holder} }

// Leases returns the live leases, indexed by extent (a zero Lease for a
// free extent); for tests and status.
func (m *MemLeases) Leases() []Lease {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock()
	out := make([]Lease, len(m.extents))
	for i, e := range m.extents {
		if e.held && now.Before(e.lease.Expires) {
			out[i] = e.lease
		}
	}
	return out
}

// free reports whether extent slot e may be leased at now.
func (m *MemLeases) free(e *memExtent, now time.Time) bool {
	return !e.held || !now.Before(e.lease.Expires.Add(m.grace))
}

// live returns the slot of l when l is its extent's live lease at now.
func (m *MemLeases) live(l Lease, now time.Time) (*memExtent, bool) {
	if l.Extent >= uint32(len(m.extents)) {
		return nil, false
	}
	e := &m.extents[l.Extent]
	ok := e.held && e.lease.Epoch == l.Epoch && e.lease.Holder == l.Holder && now.Before(e.lease.Expires)
	return e, ok
}

type memLeaser struct {
	m      *MemLeases
	holder string
}

func (h *memLeaser) Acquire(ctx context.Context) (Lease, error) {
	if err := ctx.Err(); err != nil {
		return Lease{}, err
	}
	m := h.m
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock()
	n := uint32(len(m.extents))
	for i := range n {
		x := (m.cursor + i) % n
		e := &m.extents[x]
		if !m.free(e, now) {
			continue
		}
		m.cursor = (x + 1) % n
		e.held = true
		e.lease = Lease{Extent: x, Epoch: m.nextEpoch, Holder: h.holder, Expires: now.Add(m.ttl)}
		m.nextEpoch++
		return e.lease, nil
	}
	return Lease{}, fmt.Errorf("%w: all %d extents leased", ErrNoExtent, n)
}

func (h *memLeaser) Renew(ctx context.Context, l Lease) (Lease, error) {
	if err := ctx.Err(); err != nil {
		return Lease{}, err
	}
	m := h.m
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock()
	e, ok := m.live(l, now)
	if !ok || l.Holder != h.holder {
		return Lease{}, fmt.Errorf("%w: renew %v", ErrLeaseLost, l)
	}
	e.lease.Expires = now.Add(m.ttl)
	return e.lease, nil
}

func (h *memLeaser) Release(ctx context.Context, l Lease) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m := h.m
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.live(l, m.clock())
	if !ok || l.Holder != h.holder {
		return fmt.Errorf("%w: release %v", ErrLeaseLost, l)
	}
	e.held = false
	return nil
}
