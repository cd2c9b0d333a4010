// Package faulttier wraps a tier.Tier and injects faults into its calls, so
// tests of the tiering core's error paths run on real tiers (G3 segments,
// G4 on a directory or S3) that fail on demand: the Nth put or get fails
// with a chosen error (tier.ErrUnavailable, tier.ErrCorrupt,
// tier.ErrNoSpace, ...), a call stalls for a while or until a test
// releases it, or every call of a kind fails until the fault is removed.
//
// A Tier is safe for concurrent use. It forwards the optional interfaces
// the core looks for (Sync, tier.HealthReporter, tier.Relocator, tier.Reclaimer, tier.Retaining, tier.Prober, tier.Expirer) to the
// wrapped tier.
package faulttier

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// Op is the kind of tier call a fault applies to.
type Op uint8

// Ops a fault can match.
const (
	Put Op = iota
	Get
	Delete
	Stat
	// Probe is tier.Prober's Probe (its key is the zero Key).
	Probe
	// Sync is the wrapped tier's Sync (G3's fdatasync; its key is the
	// zero Key).
	Sync
	numOps
)

func (op Op) String() string {
	return [...]string{"put", "get", "delete", "stat", "probe", "sync"}[op]
}

// Fault describes one injected fault. A call matches when its Op is Op and
// Match (if set) accepts its key; of the matching calls the first After
// pass through untouched, the next Times (0: all) get the fault.
type Fault struct {
	Op    Op
	Match func(tier.Key) bool
	After int
	Times int
	// Delay stalls the call this long before it proceeds (or fails with
	// Err); a call whose ctx ends first returns the ctx error.
	Delay time.Duration
	// Err, when set, is returned instead of calling the wrapped tier,
	// wrapped as "faulttier: <op> <key>: <Err>" so errors.Is sees it.
	Err error
	// Gate, when set, holds the call until the gate is released (or the
	// call's ctx ends).
	Gate *Gate
	// Late, with Err, makes the call reach the wrapped tier first and
	// fail only then: a put that stored the block but whose answer was
	// lost (an object store's deadline passing after the write).
	Late bool
	// Stall, when set, holds the call until the gate is released and
	// ignores the call's ctx: a device that does not answer (a pread the
	// kernel does not interrupt). The call then proceeds.
	Stall *Gate
	// Hold, when set, holds a put after the wrapped tier stored the
	// block, until the gate is released (or the call's ctx ends): a put
	// whose copy is already listed by the tier but has not returned.
	Hold *Gate
}

// Gate holds calls until Release. Arrived is closed when the first call
// reaches it.
type Gate struct {
	arrived   chan struct{}
	arriveOne sync.Once
	release   chan struct{}
	relOne    sync.Once
	waiting   atomic.Int64
}

// NewGate returns a closed gate (calls wait at it).
func NewGate() *Gate {
	return &Gate{arrived: make(chan struct{}), release: make(chan struct{})}
}

// Arrived is closed once a call has reached the gate.
func (g *Gate) Arrived() <-chan struct{} { return g.arrived }

// Waiting is the number of calls held at the gate now.
func (g *Gate) Waiting() int { return int(g.waiting.Load()) }

// Release lets every held and future call through.
func (g *Gate) Release() { g.relOne.Do(func() { close(g.release) }) }

func (g *Gate) wait(ctx context.Context) error {
	g.arriveOne.Do(func() { close(g.arrived) })
	g.waiting.Add(1)
	defer g.waiting.Add(-1)
	select {
	case <-g.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

type rule struct {
	f       Fault
	seen    int // matching calls so far
	applied int
}

// Tier is a tier.Tier with injected faults. Create it with Wrap.
type Tier struct {
	tier.Tier
	mu     sync.Mutex
	rules  []*rule
	calls  [numOps]atomic.Int64
	faults [numOps]atomic.Int64
}

// Wrap returns t with no faults injected yet.
func Wrap(t tier.Tier) *Tier { return &Tier{Tier: t} }

// Inject adds a fault; the returned func removes it (idempotent).
func (t *Tier) Inject(f Fault) (remove func()) {
	r := &rule{f: f}
	t.mu.Lock()
	t.rules = append(t.rules, r)
	t.mu.Unlock()
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		for i, x := range t.rules {
			if x == r {
				t.rules = append(t.rules[:i], t.rules[i+1:]...)
				return
			}
		}
	}
}

// Clear removes every fault.
func (t *Tier) Clear() {
	t.mu.Lock()
	t.rules = nil
	t.mu.Unlock()
}

// Calls is the number of op calls made so far; Faults the number of them
// that got a fault.
func (t *Tier) Calls(op Op) int64  { return t.calls[op].Load() }
func (t *Tier) Faults(op Op) int64 { return t.faults[op].Load() }

// pick returns the faults that apply to this call (every matching rule
// counts the call).
func (t *Tier) pick(op Op, k tier.Key) []Fault {
	t.calls[op].Add(1)
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []Fault
	for _, r := range t.rules {
		if r.f.Op != op || (r.f.Match != nil && !r.f.Match(k)) {
			continue
		}
		r.seen++
		if r.seen <= r.f.After || (r.f.Times > 0 && r.applied >= r.f.Times) {
			continue
		}
		r.applied++
		out = append(out, r.f)
	}
	if len(out) > 0 {
		t.faults[op].Add(1)
	}
	return out
}

// late returns the error of a Late fault among fs, if any.
func late(op Op, k tier.Key, fs []Fault) error {
	for _, f := range fs {
		if f.Late && f.Err != nil {
			return fmt.Errorf("faulttier: %s %s (after the call): %w", op, k, f.Err)
		}
	}
	return nil
}

// apply runs the faults of one call: stalls, gates, then the first error
// (Late faults are returned after the call, see late).
func apply(ctx context.Context, op Op, k tier.Key, fs []Fault) error {
	for _, f := range fs {
		if f.Delay > 0 {
			tm := time.NewTimer(f.Delay)
			select {
			case <-tm.C:
			case <-ctx.Done():
				tm.Stop()
				return ctx.Err()
			}
		}
		if f.Gate != nil {
			if err := f.Gate.wait(ctx); err != nil {
				return err
			}
		}
		if f.Stall != nil {
			_ = f.Stall.wait(context.Background())
		}
	}
	for _, f := range fs {
		if f.Err != nil && !f.Late {
			return fmt.Errorf("faulttier: %s %s: %w", op, k, f.Err)
		}
	}
	return nil
}

// Put implements tier.Tier.
func (t *Tier) Put(ctx context.Context, k tier.Key, data []byte) error {
	fs := t.pick(Put, k)
	if err := apply(ctx, Put, k, fs); err != nil {
		return err
	}
	if err := t.Tier.Put(ctx, k, data); err != nil {
		return err
	}
	for _, f := range fs {
		if f.Hold != nil {
			if err := f.Hold.wait(ctx); err != nil {
				return err
			}
		}
	}
	return late(Put, k, fs)
}

// Get implements tier.Tier.
func (t *Tier) Get(ctx context.Context, k tier.Key, p []byte, off int64) (int, error) {
	if err := apply(ctx, Get, k, t.pick(Get, k)); err != nil {
		return 0, err
	}
	return t.Tier.Get(ctx, k, p, off)
}

// Delete implements tier.Tier.
func (t *Tier) Delete(ctx context.Context, k tier.Key) error {
	if err := apply(ctx, Delete, k, t.pick(Delete, k)); err != nil {
		return err
	}
	return t.Tier.Delete(ctx, k)
}

// Stat implements tier.Tier.
func (t *Tier) Stat(ctx context.Context, k tier.Key) (int64, error) {
	if err := apply(ctx, Stat, k, t.pick(Stat, k)); err != nil {
		return 0, err
	}
	return t.Tier.Stat(ctx, k)
}

// Probe implements tier.Prober: faults of Op Probe apply, then the wrapped
// tier's Probe runs (a tier without one answers nil: it works).
func (t *Tier) Probe(ctx context.Context) error {
	if err := apply(ctx, Probe, tier.Key{}, t.pick(Probe, tier.Key{})); err != nil {
		return err
	}
	if p, ok := t.Tier.(tier.Prober); ok {
		return p.Probe(ctx)
	}
	return nil
}

// Sync forwards to the wrapped tier when it can sync (G3), after faults
// of Op Sync apply.
func (t *Tier) Sync(ctx context.Context) error {
	if err := apply(ctx, Sync, tier.Key{}, t.pick(Sync, tier.Key{})); err != nil {
		return err
	}
	if s, ok := t.Tier.(interface{ Sync(context.Context) error }); ok {
		return s.Sync(ctx)
	}
	return nil
}

// Relocate forwards tier.Relocator; a wrapped tier without it answers
// tier.ErrNoSpace (nothing is kept, as when a relocating tier has no room).
func (t *Tier) Relocate(ctx context.Context, k tier.Key) error {
	if r, ok := t.Tier.(tier.Relocator); ok {
		return r.Relocate(ctx, k)
	}
	return fmt.Errorf("faulttier: %s cannot relocate: %w", t.Tier.Name(), tier.ErrNoSpace)
}

// PostponeReclaim forwards tier.Relocator (a no-op for tiers without it).
func (t *Tier) PostponeReclaim() {
	if r, ok := t.Tier.(tier.Relocator); ok {
		r.PostponeReclaim()
	}
}

// SetDemoter forwards tier.Reclaimer (a no-op for tiers without it).
func (t *Tier) SetDemoter(d tier.Demoter) {
	if r, ok := t.Tier.(tier.Reclaimer); ok {
		r.SetDemoter(d)
	}
}

// SetRetainer forwards tier.Retaining (a no-op for tiers without it).
func (t *Tier) SetRetainer(r tier.Retainer) {
	if x, ok := t.Tier.(tier.Retaining); ok {
		x.SetRetainer(r)
	}
}

// Healthy forwards tier.HealthReporter (true when the wrapped tier has none).
func (t *Tier) Healthy() bool {
	if h, ok := t.Tier.(tier.HealthReporter); ok {
		return h.Healthy()
	}
	return true
}

// Unwrap returns the wrapped tier.
func (t *Tier) Unwrap() tier.Tier { return t.Tier }

// Block matches the calls for block index idx of any object.
func Block(idx uint32) func(tier.Key) bool {
	return func(k tier.Key) bool { return k.Index == idx }
}
