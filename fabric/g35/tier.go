// Package g35 is the G3.5 tier: a tier.Tier over a shared pool (package
// fabric/pool) that several hosts read and write. Put appends a verified
// record into one of this host's leased extents and remembers its
// location; Get reads a block either from a record this host wrote or from
// a record another host wrote (an alias registered when a shared file is
// imported), verifying key, generation, epoch and CRC32C on every read, so
// a reused extent reads as a miss, never as wrong bytes.
//
// While the link to the pool is down the tier is in bypass (SetBypass):
// Get answers tier.ErrNotFound (the core falls back to G4 or counts a
// miss) and Put answers tier.ErrUnavailable.
package g35

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctxmem/ctxmemd/fabric/pool"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// Name is the tier's name in status and xattrs.
const Name = "G3.5"

// Ref is where one block lives in the pool: the key its record was
// written under (the writer host's key) and the record's location.
type Ref struct {
	Key tier.Key
	Loc pool.Location
}

// Options configure a Tier.
type Options struct {
	// EventBuffer is how many events (Events) wait for their reader
	// before new ones are dropped and counted (default 4096).
	EventBuffer int
}

// EventKind says what an Event reports.
type EventKind uint8

const (
	// EventDeleted: a block this host put was deleted here (the core
	// dropped its copy); the shared index entry that points at it should
	// be withdrawn.
	EventDeleted EventKind = iota + 1
	// EventStale: a read found a record that no longer matches (extent
	// reused, torn or corrupt): its index entry is stale.
	EventStale
)

// Event is one notification of the tier to its reader (the sidecar, which
// owns the shared index). Ref and Err are set for EventStale.
type Event struct {
	Kind EventKind
	Key  tier.Key
	Ref  Ref
	Err  error
}

// Tier is the G3.5 tier of one host.
type Tier struct {
	p      *pool.Pool
	w      *pool.Writer
	r      *pool.Reader
	opts   Options
	bypass atomic.Bool
	// probeGate keeps probes of a hung device from piling up (Probe).
	probeGate tier.ProbeGate
	closed    atomic.Bool

	events  chan Event // Events; sends never block
	dropped atomic.Int64

	mu    sync.RWMutex
	refs  map[tier.Key]Ref // local key → record
	own   map[tier.Key]bool
	bytes int64

	// starvedAt is the unix ns of the latest Put that found no free
	// extent (0: none since open); see StarvedAt.
	starvedAt atomic.Int64

	useMu     sync.Mutex
	lastUse   map[uint32]int64 // extent → unix ns of the last read or write here
	lastWrite map[uint32]int64 // extent → unix ns of the last write here
}

// New returns the tier over pool p, writing through w (nil: read-only,
// Put fails with tier.ErrUnavailable).
func New(p *pool.Pool, w *pool.Writer, opts Options) *Tier {
	if opts.EventBuffer <= 0 {
		opts.EventBuffer = 4096
	}
	return &Tier{p: p, w: w, r: pool.NewReader(p), opts: opts, refs: map[tier.Key]Ref{}, own: map[tier.Key]bool{},
		events:  make(chan Event, opts.EventBuffer),
		lastUse: map[uint32]int64{}, lastWrite: map[uint32]int64{}}
}

// Events returns the tier's notifications (deleted own blocks, stale
// records), in order, for one reader: the sidecar reads them from the
// time it starts, so events of the tier's first moments wait for it. The
// tier never blocks on them: past Options.EventBuffer unread events new
// ones are dropped and counted (DroppedEvents); a dropped one costs at most
// an index entry that readers find stale on their own (every read is
// verified).
func (t *Tier) Events() <-chan Event { return t.events }

// DroppedEvents returns how many events were dropped unread.
func (t *Tier) DroppedEvents() int64 { return t.dropped.Load() }

func (t *Tier) emit(e Event) {
	select {
	case t.events <- e:
	default:
		t.dropped.Add(1)
	}
}

// Name implements tier.Tier.
func (t *Tier) Name() string { return Name }

// SetBypass puts the tier into bypass (link down) or takes it out.
func (t *Tier) SetBypass(on bool) { t.bypass.Store(on) }

// Probe implements tier.Prober: it opens the pool device (or file) anew
// and reads its superblock page, so a device that came back under the
// same path after a reconnect counts as answering. One probe at a time
// goes into the device (tier.ProbeGate): while one is stuck there, the
// next fails at once with tier.ErrUnavailable.
func (t *Tier) Probe(ctx context.Context) error {
	return t.probeGate.Run(ctx, "G3.5 probe "+t.p.Path(), func() error {
		f, err := os.Open(t.p.Path())
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = f.ReadAt(make([]byte, 4096), 0)
		return err
	})
}

// Bypassed reports whether the tier is in bypass.
func (t *Tier) Bypassed() bool { return t.bypass.Load() }

// Healthy implements tier.HealthReporter: false while in bypass.
func (t *Tier) Healthy() bool { return !t.bypass.Load() }

// Put implements tier.Tier: it writes data into a leased extent, waits for
// the write and its read-back verification, and only then records the
// location (publish after verify). Errors: tier.ErrUnavailable (bypass,
// no writer), wrapped pool errors (no free extent → tier.ErrNoSpace).
func (t *Tier) Put(ctx context.Context, k tier.Key, data []byte) error {
	if t.bypass.Load() || t.w == nil {
		return fmt.Errorf("G3.5 put %s: pool in bypass: %w", k, tier.ErrUnavailable)
	}
	loc, err := t.w.Put(ctx, k, data)
	if err != nil {
		if errors.Is(err, pool.ErrNoExtent) {
			t.starvedAt.Store(time.Now().UnixNano())
			return fmt.Errorf("G3.5 put %s: %v: %w", k, err, tier.ErrNoSpace)
		}
		return fmt.Errorf("G3.5 put %s: %w", k, err)
	}
	t.mu.Lock()
	if old, ok := t.refs[k]; ok {
		t.bytes -= int64(old.Loc.Length)
	}
	t.refs[k] = Ref{Key: k, Loc: loc}
	t.own[k] = true
	t.bytes += int64(loc.Length)
	t.mu.Unlock()
	t.used(loc.Extent)
	t.useMu.Lock()
	t.lastWrite[loc.Extent] = time.Now().UnixNano()
	t.useMu.Unlock()
	return nil
}

// Alias makes local key k read the record ref (a block of a file another
// host shared).
func (t *Tier) Alias(k tier.Key, ref Ref) {
	t.mu.Lock()
	if old, ok := t.refs[k]; ok {
		t.bytes -= int64(old.Loc.Length)
	}
	t.refs[k] = ref
	delete(t.own, k)
	t.bytes += int64(ref.Loc.Length)
	t.mu.Unlock()
}

// Location returns the record of local key k.
func (t *Tier) Location(k tier.Key) (Ref, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	r, ok := t.refs[k]
	return r, ok
}

// Get implements tier.Tier. Any mismatch of the record read is a miss
// (tier.ErrNotFound, or tier.ErrCorrupt for a CRC error in a live extent),
// reported as an EventStale.
func (t *Tier) Get(ctx context.Context, k tier.Key, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("G3.5 get %s: negative offset %d", k, off)
	}
	if t.bypass.Load() {
		return 0, fmt.Errorf("G3.5 get %s: pool in bypass: %w", k, tier.ErrNotFound)
	}
	t.mu.RLock()
	ref, ok := t.refs[k]
	t.mu.RUnlock()
	if !ok {
		return 0, fmt.Errorf("G3.5 get %s: %w", k, tier.ErrNotFound)
	}
	n := int64(ref.Loc.Length)
	if off >= n {
		return 0, nil
	}
	// The reader verifies into its own aligned buffer and copies the
	// verified bytes out: read whole-block requests (promotions, the
	// common case) straight into p, others through a scratch buffer.
	buf := p
	if off != 0 || int64(len(p)) < n {
		buf = make([]byte, n)
	}
	if _, err := t.r.Get(ctx, ref.Key, ref.Loc, buf); err != nil {
		if !errors.Is(err, tier.ErrNotFound) && !errors.Is(err, tier.ErrCorrupt) {
			// Not a record that no longer matches: the read was
			// cancelled or timed out, or the device did not answer.
			// The record stays (forgetting it would lose a good block).
			return 0, fmt.Errorf("G3.5 get %s: %w", k, err)
		}
		t.emit(Event{Kind: EventStale, Key: k, Ref: ref, Err: err})
		t.forget(k, ref)
		return 0, err
	}
	t.used(ref.Loc.Extent)
	if off == 0 && int64(len(p)) >= n {
		return int(n), nil
	}
	return copy(p, buf[off:]), nil
}

func (t *Tier) used(e uint32) {
	now := time.Now().UnixNano()
	t.useMu.Lock()
	t.lastUse[e] = now
	t.useMu.Unlock()
}

// ExtentUse returns, per extent this host wrote or read, the unix ns of
// its last use here (the scheduler keeps the pool under its watermark by
// reclaiming the least recently used extents).
func (t *Tier) ExtentUse() map[uint32]int64 {
	t.useMu.Lock()
	defer t.useMu.Unlock()
	out := make(map[uint32]int64, len(t.lastUse))
	for e, at := range t.lastUse {
		out[e] = at
	}
	return out
}

// ExtentWrites returns, per extent this host wrote, the unix ns of its
// last write here (an extent still being filled is not reclaimed).
func (t *Tier) ExtentWrites() map[uint32]int64 {
	t.useMu.Lock()
	defer t.useMu.Unlock()
	out := make(map[uint32]int64, len(t.lastWrite))
	for e, at := range t.lastWrite {
		out[e] = at
	}
	return out
}

// StarvedAt returns the unix ns of the latest Put that failed because
// every extent of the pool was leased (0: none since New). The sidecar
// reports it, and the scheduler gives a host that starves an extent
// taken from hosts holding more than their fair share.
func (t *Tier) StarvedAt() int64 { return t.starvedAt.Load() }

// ForgetExtentUse drops extent e from ExtentUse and ExtentWrites (after
// its reclaim).
func (t *Tier) ForgetExtentUse(e uint32) {
	t.useMu.Lock()
	delete(t.lastUse, e)
	delete(t.lastWrite, e)
	t.useMu.Unlock()
}

func (t *Tier) forget(k tier.Key, ref Ref) {
	t.mu.Lock()
	if cur, ok := t.refs[k]; ok && cur == ref {
		delete(t.refs, k)
		delete(t.own, k)
		t.bytes -= int64(ref.Loc.Length)
	}
	t.mu.Unlock()
}

// Stat implements tier.Tier from the local mappings (ctx is not
// consulted: nothing blocks).
func (t *Tier) Stat(_ context.Context, k tier.Key) (int64, error) {
	if t.closed.Load() {
		return 0, fmt.Errorf("G3.5 stat %s: %w", k, tier.ErrClosed)
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	if r, ok := t.refs[k]; ok {
		return int64(r.Loc.Length), nil
	}
	return 0, tier.ErrNotFound
}

// Delete implements tier.Tier: the local mapping is dropped (the record
// stays on the pool until its extent is reclaimed; no reader trusts it
// once the index entry is gone). For blocks this host put, an EventDeleted
// is emitted.
func (t *Tier) Delete(ctx context.Context, k tier.Key) error {
	if t.closed.Load() {
		return fmt.Errorf("G3.5 delete %s: %w", k, tier.ErrClosed)
	}
	t.mu.Lock()
	r, ok := t.refs[k]
	own := t.own[k]
	if ok {
		delete(t.refs, k)
		delete(t.own, k)
		t.bytes -= int64(r.Loc.Length)
	}
	t.mu.Unlock()
	if own {
		t.emit(Event{Kind: EventDeleted, Key: k})
	}
	return nil
}

// ForgetExtent drops every mapping into extent e (it is being
// reclaimed) and returns the local keys that pointed there.
func (t *Tier) ForgetExtent(e uint32) []tier.Key {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []tier.Key
	for k, r := range t.refs {
		if r.Loc.Extent == e {
			out = append(out, k)
			delete(t.refs, k)
			delete(t.own, k)
			t.bytes -= int64(r.Loc.Length)
		}
	}
	return out
}

// Range implements tier.Tier over the local mappings; it stops with
// ctx.Err() when ctx is done between blocks.
func (t *Tier) Range(ctx context.Context, fn func(k tier.Key, length int64) bool) error {
	if t.closed.Load() {
		return fmt.Errorf("G3.5 range: %w", tier.ErrClosed)
	}
	t.mu.RLock()
	type kv struct {
		k tier.Key
		n int64
	}
	all := make([]kv, 0, len(t.refs))
	for k, r := range t.refs {
		all = append(all, kv{k, int64(r.Loc.Length)})
	}
	t.mu.RUnlock()
	for _, e := range all {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !fn(e.k, e.n) {
			break
		}
	}
	return nil
}

// Usage implements tier.Tier: bytes and blocks this host maps; the
// capacity is the whole pool's data area.
func (t *Tier) Usage() tier.Usage {
	sb := t.p.Superblock()
	t.mu.RLock()
	defer t.mu.RUnlock()
	return tier.Usage{UsedBytes: t.bytes, CapacityBytes: int64(sb.ExtentCount) * int64(sb.ExtentSize), Blocks: int64(len(t.refs))}
}

// Writer returns the pool writer (nil when read-only).
func (t *Tier) Writer() *pool.Writer { return t.w }

// Close implements tier.Tier: it closes the writer (leases lapse at
// expiry) and the pool. Later calls of the tier.Tier methods return
// tier.ErrClosed; a second Close does nothing.
func (t *Tier) Close() error {
	if !t.closed.CompareAndSwap(false, true) {
		return nil
	}
	var errs []error
	if t.w != nil {
		errs = append(errs, t.w.Close())
	}
	errs = append(errs, t.p.Close())
	return errors.Join(errs...)
}

// ExtentSize returns the pool's extent size in bytes.
func (t *Tier) ExtentSize() int64 { return int64(t.p.Superblock().ExtentSize) }

// Forget drops the mapping of local key k without an EventDeleted (the
// caller is replacing the record, e.g. sharing an object again after its
// pool copy went stale).
func (t *Tier) Forget(k tier.Key) {
	t.mu.Lock()
	if r, ok := t.refs[k]; ok {
		delete(t.refs, k)
		delete(t.own, k)
		t.bytes -= int64(r.Loc.Length)
	}
	t.mu.Unlock()
}
