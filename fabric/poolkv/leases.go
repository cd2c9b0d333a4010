package poolkv

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/ctxmem/ctxmemd/fabric/pool"
	"github.com/ctxmem/ctxmemd/internal/msgpackguard"
)

// DefaultGrace is the default grace period past a lease's Expires before
// another host may take the extent: it covers clock skew between hosts and
// a write still in flight on the old holder.
const DefaultGrace = 5 * time.Second

// probeLimit is how many extents Acquire probes one by one (one Get each)
// before it reads the whole bucket in one watch.
const probeLimit = 4

// snapshotTimeout bounds a whole-bucket read when ctx has no deadline.
const snapshotTimeout = 10 * time.Second

// LeaseOptions configures NewLeases.
type LeaseOptions struct {
	// TTL is a lease's lifetime from Acquire or the latest Renew; 0 means
	// pool.DefaultLeaseTTL.
	TTL time.Duration
	// Grace is how long past Expires an extent stays unavailable to
	// Acquire; 0 means DefaultGrace, negative means none.
	Grace time.Duration
	// Clock returns the current time; nil means time.Now. Tests inject
	// fake clocks (one per simulated host, to model skew).
	Clock func() time.Time
	// Log receives skipped malformed values; nil means slog.Default().
	Log *slog.Logger
}

// Leases is one host's pool.Leaser over a JetStream KV bucket shared by
// every host of the pool (see the package doc for keys and values).
// Acquire starts its scan at an extent derived from a hash of the host name
// (FNV-1a), then after the extent it last took, so hosts do not all race
// for extent 0. Leases remembers the latest KV revision of each lease it
// holds, so Renew and Release are one compare-and-set each; a lease it does
// not remember (another handle of the same host, a restarted daemon) is
// looked up first. Safe for concurrent use.
type Leases struct {
	kv         jetstream.KeyValue
	n          uint32
	host       string
	ttl, grace time.Duration
	clock      func() time.Time
	log        *slog.Logger

	mu     sync.Mutex
	cursor uint32
	held   map[uint32]heldLease
}

// heldLease is what Leases knows about a lease it holds.
type heldLease struct {
	epoch   uint64
	rev     uint64 // KV revision of the latest write of the lease
	expires int64  // unix ns written by that write
}

var _ pool.Leaser = (*Leases)(nil)

// NewLeases returns host's leaser over extents 0..extents-1 of the pool
// whose leases live in kv (a bucket made by EnsureBuckets). host must be
// non-empty (Acquire fails otherwise); every host of the pool must use
// the same extents count.
func NewLeases(kv jetstream.KeyValue, extents uint32, host string, opts LeaseOptions) *Leases {
	l := &Leases{kv: kv, n: extents, host: host, ttl: opts.TTL, grace: opts.Grace, clock: opts.Clock,
		log: opts.Log, held: map[uint32]heldLease{}}
	if l.ttl <= 0 {
		l.ttl = pool.DefaultLeaseTTL
	}
	switch {
	case l.grace == 0:
		l.grace = DefaultGrace
	case l.grace < 0:
		l.grace = 0
	}
	if l.clock == nil {
		l.clock = time.Now
	}
	if l.log == nil {
		l.log = slog.Default()
	}
	if extents > 0 {
		h := fnv.New32a()
		h.Write([]byte(host))
		l.cursor = h.Sum32() % extents
	}
	return l
}

// ExtentKey is the key of extent e's lease: "extent.<e>".
func ExtentKey(e uint32) string { return "extent." + strconv.FormatUint(uint64(e), 10) }

// parseExtentKey inverts ExtentKey (canonical decimal only).
func parseExtentKey(k string) (uint32, bool) {
	s, ok := strings.CutPrefix(k, "extent.")
	if !ok {
		return 0, false
	}
	x, err := strconv.ParseUint(s, 10, 32)
	if err != nil || strconv.FormatUint(x, 10) != s {
		return 0, false
	}
	return uint32(x), true
}

// Acquire leases a free extent to this host: never leased, released, or
// expired for longer than the grace period. It probes up to 4 extents from
// its cursor with one Get each, then reads the whole bucket once and tries
// the rest. The epoch is the KV revision of the winning Create or Update.
// Errors: ctx.Err() when ctx has ended, an error wrapping pool.ErrNoExtent
// when every extent is held (or was won by another host during the scan),
// and the bus error when NATS does not answer.
func (l *Leases) Acquire(ctx context.Context) (pool.Lease, error) {
	if err := ctx.Err(); err != nil {
		return pool.Lease{}, err
	}
	if l.host == "" {
		return pool.Lease{}, errors.New("poolkv: Acquire without a host name")
	}
	n := l.n
	if n == 0 {
		return pool.Lease{}, fmt.Errorf("%w: the pool has no extents", pool.ErrNoExtent)
	}
	l.mu.Lock()
	start := l.cursor
	l.mu.Unlock()
	probes := min(n, probeLimit)
	for i := range probes {
		x := (start + i) % n
		e, err := l.kv.Get(ctx, ExtentKey(x))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			e, err = nil, nil
		}
		if err != nil {
			return pool.Lease{}, fmt.Errorf("poolkv: read lease of extent %d: %w", x, err)
		}
		if le, ok, err := l.try(ctx, x, e); err != nil || ok {
			return le, err
		}
	}
	if n > probes {
		snap, err := l.snapshot(ctx)
		if err != nil {
			return pool.Lease{}, err
		}
		for i := probes; i < n; i++ {
			x := (start + i) % n
			if le, ok, err := l.try(ctx, x, snap[x]); err != nil || ok {
				return le, err
			}
		}
	}
	return pool.Lease{}, fmt.Errorf("%w: all %d extents leased", pool.ErrNoExtent, n)
}

// try takes extent x when e (its current entry, nil when absent or
// deleted) shows it free. ok is false when x is held or another host won
// the compare-and-set.
func (l *Leases) try(ctx context.Context, x uint32, e jetstream.KeyValueEntry) (le pool.Lease, ok bool, err error) {
	now := l.clock()
	exp := now.Add(l.ttl).UnixNano()
	val, err := encodeLease(leaseValue{Holder: l.host, Expires: exp})
	if err != nil {
		return pool.Lease{}, false, err
	}
	key := ExtentKey(x)
	var rev uint64
	if e == nil {
		rev, err = l.kv.Create(ctx, key, val)
	} else {
		v, derr := decodeLease(e.Value())
		switch {
		case derr != nil && newerLease(e.Value()):
			l.log.Warn("pool lease of a newer schema; extent skipped", "key", key, "revision", e.Revision())
			return pool.Lease{}, false, nil
		case derr != nil:
			l.log.Warn("malformed pool lease; taking the extent over", "key", key, "revision", e.Revision(), "err", derr)
		case now.Before(time.Unix(0, v.Expires).Add(l.grace)):
			return pool.Lease{}, false, nil // live, or expired within the grace period
		}
		rev, err = l.kv.Update(ctx, key, val, e.Revision())
	}
	if isConflict(err) {
		return pool.Lease{}, false, nil
	}
	if err != nil {
		return pool.Lease{}, false, fmt.Errorf("poolkv: lease extent %d: %w", x, err)
	}
	l.mu.Lock()
	l.held[x] = heldLease{epoch: rev, rev: rev, expires: exp}
	l.cursor = (x + 1) % l.n
	l.mu.Unlock()
	return pool.Lease{Extent: x, Epoch: rev, Holder: l.host, Expires: time.Unix(0, exp)}, true, nil
}

// newerLease reports whether b decodes far enough to show a schema
// version above Version (a newer ctxmemd's lease, not ours to judge).
func newerLease(b []byte) bool {
	var v struct {
		V int `msgpack:"v"`
	}
	// Another host wrote b: the shape check first, since the decoder
	// pre-allocates lengths b declares (12 MiB from 7 bytes, FuzzLease).
	return msgpackguard.Check(b) == nil && msgpack.Unmarshal(b, &v) == nil && v.V > Version
}

// Renew extends le to now + TTL with one compare-and-set at the latest
// revision this handle wrote (after a conflict it re-reads the key once in
// case its own earlier write landed unacknowledged). The Lease keeps its
// Extent, Epoch and Holder. Errors: an error wrapping pool.ErrLeaseLost
// when le is not this host's, has expired by this host's clock, or the
// key no longer holds it (released, taken over); ctx.Err(); the bus error
// otherwise (the lease may still be live; retry before Expires).
func (l *Leases) Renew(ctx context.Context, le pool.Lease) (pool.Lease, error) {
	if err := ctx.Err(); err != nil {
		return pool.Lease{}, err
	}
	h, err := l.current(ctx, le)
	if err != nil {
		return pool.Lease{}, err
	}
	for attempt := 0; ; attempt++ {
		now := l.clock()
		if !now.Before(time.Unix(0, h.expires)) {
			l.forget(le)
			return pool.Lease{}, fmt.Errorf("%w: renew %v: expired", pool.ErrLeaseLost, le)
		}
		exp := now.Add(l.ttl).UnixNano()
		val, err := encodeLease(leaseValue{Holder: l.host, Expires: exp, Epoch: le.Epoch})
		if err != nil {
			return pool.Lease{}, err
		}
		rev, err := l.kv.Update(ctx, ExtentKey(le.Extent), val, h.rev)
		if err == nil {
			l.remember(le.Extent, heldLease{epoch: le.Epoch, rev: rev, expires: exp})
			le.Expires = time.Unix(0, exp)
			return le, nil
		}
		if !isConflict(err) {
			return pool.Lease{}, fmt.Errorf("poolkv: renew %v: %w", le, err)
		}
		if attempt == 2 {
			l.forget(le)
			return pool.Lease{}, fmt.Errorf("%w: renew %v: lease keeps changing", pool.ErrLeaseLost, le)
		}
		if h, err = l.fetch(ctx, le); err != nil {
			return pool.Lease{}, err
		}
	}
}

// Release deletes le's key with a compare-and-set at the latest revision,
// so the extent is free for the next Acquire at once. It changes nothing
// and returns an error wrapping pool.ErrLeaseLost when le is not this
// host's live lease (another holder, expired by this host's clock,
// released, taken over); ctx.Err() or the bus error otherwise.
func (l *Leases) Release(ctx context.Context, le pool.Lease) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	h, err := l.current(ctx, le)
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		if !l.clock().Before(time.Unix(0, h.expires)) {
			l.forget(le)
			return fmt.Errorf("%w: release %v: expired", pool.ErrLeaseLost, le)
		}
		err := l.kv.Delete(ctx, ExtentKey(le.Extent), jetstream.LastRevision(h.rev))
		if err == nil {
			l.forget(le)
			return nil
		}
		if !isConflict(err) {
			return fmt.Errorf("poolkv: release %v: %w", le, err)
		}
		if attempt == 2 {
			l.forget(le)
			return fmt.Errorf("%w: release %v: lease keeps changing", pool.ErrLeaseLost, le)
		}
		if h, err = l.fetch(ctx, le); err != nil {
			return err
		}
	}
}

// current returns what this handle knows of le, or reads it from the
// bucket. Errors wrap pool.ErrLeaseLost when le is not this host's lease.
func (l *Leases) current(ctx context.Context, le pool.Lease) (heldLease, error) {
	if le.Holder != l.host || le.Extent >= l.n {
		return heldLease{}, fmt.Errorf("%w: %v is not a lease of host %q", pool.ErrLeaseLost, le, l.host)
	}
	l.mu.Lock()
	h, ok := l.held[le.Extent]
	l.mu.Unlock()
	if ok && h.epoch == le.Epoch {
		return h, nil
	}
	return l.fetch(ctx, le)
}

// fetch reads le's key and returns its state when it still holds le.
func (l *Leases) fetch(ctx context.Context, le pool.Lease) (heldLease, error) {
	e, err := l.kv.Get(ctx, ExtentKey(le.Extent))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		l.forget(le)
		return heldLease{}, fmt.Errorf("%w: %v: extent released", pool.ErrLeaseLost, le)
	}
	if err != nil {
		return heldLease{}, fmt.Errorf("poolkv: read lease %v: %w", le, err)
	}
	v, err := decodeLease(e.Value())
	if err != nil {
		l.forget(le)
		return heldLease{}, fmt.Errorf("%w: %v: %v", pool.ErrLeaseLost, le, err)
	}
	epoch := v.Epoch
	if epoch == 0 {
		epoch = e.Revision()
	}
	if v.Holder != le.Holder || epoch != le.Epoch {
		l.forget(le)
		return heldLease{}, fmt.Errorf("%w: %v: extent now held by %s epoch %d", pool.ErrLeaseLost, le, v.Holder, epoch)
	}
	h := heldLease{epoch: epoch, rev: e.Revision(), expires: v.Expires}
	l.remember(le.Extent, h)
	return h, nil
}

// remember records h unless a later write of the same lease is known.
func (l *Leases) remember(x uint32, h heldLease) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if old, ok := l.held[x]; ok && old.epoch == h.epoch && old.rev > h.rev {
		return
	}
	l.held[x] = h
}

// forget drops what this handle knows of le.
func (l *Leases) forget(le pool.Lease) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if h, ok := l.held[le.Extent]; ok && h.epoch == le.Epoch {
		delete(l.held, le.Extent)
	}
}

// List returns the live leases of every host (Expires after now by this
// handle's clock), ordered by extent: for status and the scheduler's pool
// watermark. Malformed values are skipped and logged. It reads the whole
// bucket with one watch. Errors: ctx, the bus error.
func (l *Leases) List(ctx context.Context) ([]pool.Lease, error) {
	snap, err := l.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	now := l.clock()
	out := make([]pool.Lease, 0, len(snap))
	for x, e := range snap {
		v, err := decodeLease(e.Value())
		if err != nil {
			l.log.Warn("malformed pool lease skipped", "key", e.Key(), "revision", e.Revision(), "err", err)
			continue
		}
		exp := time.Unix(0, v.Expires)
		if !now.Before(exp) {
			continue
		}
		epoch := v.Epoch
		if epoch == 0 {
			epoch = e.Revision()
		}
		out = append(out, pool.Lease{Extent: x, Epoch: epoch, Holder: v.Holder, Expires: exp})
	}
	slices.SortFunc(out, func(a, b pool.Lease) int { return cmp.Compare(a.Extent, b.Extent) })
	return out, nil
}

// snapshot reads the current entry of every extent key (deleted keys are
// absent) with one KV watch.
func (l *Leases) snapshot(ctx context.Context) (map[uint32]jetstream.KeyValueEntry, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, snapshotTimeout)
		defer cancel()
	}
	w, err := l.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("poolkv: read leases: %w", err)
	}
	defer w.Stop()
	out := map[uint32]jetstream.KeyValueEntry{}
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("poolkv: read leases: %w", ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("poolkv: read leases: watch closed")
			}
			if e == nil {
				return out, nil
			}
			if x, ok := parseExtentKey(e.Key()); ok && x < l.n {
				out[x] = e
			}
		}
	}
}
