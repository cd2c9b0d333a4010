package g4

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// staleRemover is implemented by stores that can leave temporary files
// behind after a crash (Local); ExpireBefore calls it.
type staleRemover interface {
	RemoveStale(ctx context.Context, before time.Time) (int, error)
}

// ExpireBefore implements tier.Expirer: it lists the store under the
// prefix (bounded by ListTimeout and ctx) and deletes every block whose
// object was stored before t (ObjectAttrs.ModTime), except those that
// Retain exempts, and returns how many it deleted. Before deleting a block
// it re-reads the object's ModTime under the key's lock, so a block stored
// again since the listing survives. It also removes the store's leftover
// temporary files older than t or staleTempAge, whichever is earlier. The
// first deletion error stops the sweep and is returned with the count so
// far.
func (t *Tier) ExpireBefore(ctx context.Context, before time.Time) (int, error) {
	if t.closed.Load() {
		return 0, fmt.Errorf("g4 expire: %w", tier.ErrClosed)
	}
	lctx, cancel := context.WithTimeout(ctx, t.opts.ListTimeout)
	var old []tier.Key
	var oldPacks []packRef
	err := t.store.List(lctx, t.opts.Prefix+"/", func(a ObjectAttrs) bool {
		if !a.ModTime.Before(before) {
			return true
		}
		if k, ok := ParseBlockName(t.opts.Prefix, a.Name); ok {
			if !t.retained(k) {
				old = append(old, k)
			}
		} else if r, ok := parsePackName(t.opts.Prefix, a.Name, t.opts.MaxBlockSize); ok {
			oldPacks = append(oldPacks, r)
		}
		return true
	})
	cancel()
	if err != nil {
		return 0, t.listErr(err)
	}
	t.reap(ctx, t.idx.emptyPacks()) // deletes that failed before
	n := 0
	for _, r := range oldPacks {
		deleted, err := t.expirePack(ctx, r)
		n += deleted
		t.expired.Add(uint64(deleted))
		if err != nil {
			return n, err
		}
	}
	for _, k := range old {
		deleted, err := t.expireOne(ctx, k, before)
		if err != nil {
			return n, err
		}
		if deleted {
			n++
			t.expired.Add(1)
		}
	}
	if s, ok := t.raw.(staleRemover); ok {
		cutoff := t.opts.Now().Add(-staleTempAge)
		if before.Before(cutoff) {
			cutoff = before
		}
		if _, err := s.RemoveStale(ctx, cutoff); err != nil {
			return n, fmt.Errorf("g4 expire: temporary files: %w", err)
		}
	}
	return n, nil
}

// expireOne deletes block k if its object is still older than before.
func (t *Tier) expireOne(ctx context.Context, k tier.Key, before time.Time) (bool, error) {
	unlock := t.locks.lock(k)
	defer unlock()
	name := t.ObjectName(k)
	var a ObjectAttrs
	err := t.call(ctx, "expire", k, func(ctx context.Context) error {
		var err error
		a, err = t.store.Head(ctx, name)
		return err
	})
	if errors.Is(err, tier.ErrNotFound) {
		t.reap(ctx, t.idx.remove(k))
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !a.ModTime.Before(before) {
		return false, nil
	}
	if err := t.call(ctx, "expire", k, func(ctx context.Context) error {
		return t.store.Delete(ctx, name)
	}); err != nil {
		return false, err
	}
	t.reap(ctx, t.idx.remove(k))
	return true, nil
}

// expirePack deletes the pack object r, stored before the expiry's
// cutoff, unless a live member is retained (a pack holds one object
// generation, so its first live member speaks for all), and returns how
// many live blocks went with it. Pack objects are never rewritten, so
// the listing's ModTime needs no second look.
func (t *Tier) expirePack(ctx context.Context, r packRef) (int, error) {
	name := r.name(t.opts.Prefix)
	pk := t.idx.knownPack(name)
	k := r.key(0)
	if pk != nil {
		if lk, live := t.idx.packLive(pk); live {
			k = lk
		}
	}
	if t.retained(k) {
		return 0, nil
	}
	if err := t.call(ctx, "expire", k, func(ctx context.Context) error {
		return t.store.Delete(ctx, name)
	}); err != nil {
		return 0, err
	}
	t.packsDeleted.Add(1)
	if pk == nil {
		return 0, nil // no live member known (listed since the last Range)
	}
	return t.idx.dropPack(pk), nil
}

// SweeperOptions configures a Sweeper. Zero values take the defaults.
type SweeperOptions struct {
	// Interval between sweeps (default 10 min).
	Interval time.Duration
	// TTL: blocks stored longer ago than this are expired (default 72 h,
	// DESIGN.md).
	TTL time.Duration
	// Now is the clock (default time.Now); tests inject one.
	Now func() time.Time
	// OnSweep, if set, is called after every sweep with the number of
	// blocks expired and the sweep's error (nil on success).
	OnSweep func(expired int, err error)
	// OnEvict, if set, is called after every size eviction that deleted
	// blocks or failed, with the number deleted and the error (nil when
	// Run's context ended it).
	OnEvict func(evicted int, err error)
}

// Defaults of SweeperOptions.
const (
	DefaultSweepInterval = 10 * time.Minute
	DefaultTTL           = 72 * time.Hour
)

// Sweeper expires blocks of a tier.Expirer by TTL on a timer and, when the
// tier is also an Evicter (a *Tier), runs its size eviction after every
// expiry and whenever the tier signals it is over its high watermark (or refused a put). It
// starts no goroutine of its own: whoever calls Run owns the loop and stops
// it by cancelling Run's context.
type Sweeper struct {
	e    tier.Expirer
	ev   Evicter // nil if e does not evict by size
	opts SweeperOptions
}

// NewSweeper returns a Sweeper over e with the defaults applied to opts.
func NewSweeper(e tier.Expirer, opts SweeperOptions) *Sweeper {
	if opts.Interval <= 0 {
		opts.Interval = DefaultSweepInterval
	}
	if opts.TTL <= 0 {
		opts.TTL = DefaultTTL
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	ev, _ := e.(Evicter)
	return &Sweeper{e: e, ev: ev, opts: opts}
}

// SweepOnce expires every block stored before Now() - TTL and returns how
// many it deleted.
func (s *Sweeper) SweepOnce(ctx context.Context) (int, error) {
	n, err := s.e.ExpireBefore(ctx, s.opts.Now().Add(-s.opts.TTL))
	if s.opts.OnSweep != nil {
		s.opts.OnSweep(n, err)
	}
	return n, err
}

// EvictOnce runs the tier's size eviction (see Tier.Evict) and returns how
// many blocks it deleted; 0 if the tier does not evict by size.
func (s *Sweeper) EvictOnce(ctx context.Context) (int, error) {
	if s.ev == nil {
		return 0, nil
	}
	n, err := s.ev.Evict(ctx)
	rerr := err
	if ctx.Err() != nil {
		rerr = nil // stopped, not failed
	}
	if s.opts.OnEvict != nil && (n > 0 || rerr != nil) {
		s.opts.OnEvict(n, rerr)
	}
	return n, err
}

// Run sweeps (expiry, then size eviction) once at once and then every
// Interval, and evicts by size whenever the tier signals it (EvictSignal),
// until ctx is done; it returns ctx's error. A failed sweep (backend down)
// is reported through OnSweep or OnEvict and retried at the next tick.
func (s *Sweeper) Run(ctx context.Context) error {
	tk := time.NewTicker(s.opts.Interval)
	defer tk.Stop()
	var wake <-chan struct{}
	if s.ev != nil {
		wake = s.ev.EvictSignal()
	}
	sweep := true
	for {
		if sweep {
			_, _ = s.SweepOnce(ctx)
		}
		_, _ = s.EvictOnce(ctx)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tk.C:
			sweep = true
		case <-wake:
			sweep = false
		}
	}
}
