package g4

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// Size eviction: a bounded tier (TierOptions.Capacity) deletes the blocks
// stored longest ago when it fills, so that a full G4 loses its oldest
// cold blocks rather than refusing the newest ones. A lost block is a
// cache miss (KV bytes can be recomputed); a block is never read wrong.

// Evicter is implemented by *Tier: size eviction, for a Sweeper to run.
type Evicter interface {
	// Evict deletes the oldest blocks if the tier is over its high
	// watermark, or a put was refused for want of space, until it is at
	// most at its low watermark (lower if the refused put needs it), and
	// returns how many it deleted.
	Evict(ctx context.Context) (int, error)
	// EvictSignal receives (capacity 1, never closed) when a Put takes the
	// tier over its high watermark or is refused for want of space.
	EvictSignal() <-chan struct{}
}

var _ Evicter = (*Tier)(nil)

// EvictSignal implements Evicter.
func (t *Tier) EvictSignal() <-chan struct{} { return t.wake }

// Evicted returns how many blocks Evict has deleted since the tier opened.
func (t *Tier) Evicted() uint64 { return t.evicted.Load() }

func (t *Tier) signalEvict() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// Evict implements Evicter. It does nothing unless Capacity is set and
// either the payload bytes held, with those of Puts in flight, are above
// HighWatermark × Capacity, or a Put was refused for want of space since
// the last Evict (a put larger than the room left, such as a pack object,
// is refused below high). Then it deletes blocks in the order they were
// stored (the object's ModTime as listed, or the time of the Put),
// oldest first, skipping those Retain exempts, until at most
// LowWatermark × Capacity bytes are held, or fewer if the largest refused
// put needs more room than that leaves. It works from the index (no
// listing), deleting up to evictWorkers blocks at once (so it may go a
// few blocks below its target). Before deleting a block it re-checks,
// under the block's lock, that the index entry is the one it chose and
// that the stored object is older than the start of the eviction, so a
// block stored again meanwhile survives. The first backend error stops it
// and is returned with the count so far. Evict and MakeRoom run one at a
// time.
func (t *Tier) Evict(ctx context.Context) (int, error) {
	if t.closed.Load() {
		return 0, fmt.Errorf("g4 evict: %w", tier.ErrClosed)
	}
	if t.opts.Capacity <= 0 {
		return 0, nil
	}
	t.evictMu.Lock()
	defer t.evictMu.Unlock()
	target := t.lowBytes()
	need := t.short.Swap(0)
	if need > 0 {
		target = min(target, t.opts.Capacity-need)
	}
	if load := t.idx.load(); load <= t.high && (need == 0 || load <= target) {
		return 0, nil
	}
	return t.evictTo(ctx, target, t.retained)
}

// MakeRoom implements tier.RoomMaker: when a put of n bytes does not fit
// in Capacity, it evicts as Evict does, oldest first and never a block
// Retain or keep (if not nil) keeps, down to the low watermark or lower
// if n needs it, and
// returns nil once n bytes fit. If they still do not, because what is
// left is retained (device-class blocks), kept or being stored, it returns
// an error wrapping tier.ErrNoSpace that says so; also when n exceeds
// Capacity. It deletes nothing when n fits already or the tier is
// unbounded. A refused put of at most n bytes is then no longer owed room
// by the next Evict. The caller must hold no lock its Retainer takes.
func (t *Tier) MakeRoom(ctx context.Context, n int64, keep func(tier.Key) bool) error {
	if t.closed.Load() {
		return fmt.Errorf("g4 make room: %w", tier.ErrClosed)
	}
	c := t.opts.Capacity
	switch {
	case c <= 0 || t.idx.load()+n <= c:
		return nil
	case n > c:
		return fmt.Errorf("g4: %d bytes are more than its capacity of %d bytes (g4_size): %w", n, c, tier.ErrNoSpace)
	}
	t.evictMu.Lock()
	retain := t.retained
	if keep != nil {
		retain = func(k tier.Key) bool { return keep(k) || t.retained(k) }
	}
	evicted, err := t.evictTo(ctx, min(t.lowBytes(), c-n), retain)
	// The refusal that led here is served: the next Evict must not make
	// room for it again (counting its retried put, in flight, as held).
	for old := t.short.Load(); old <= n && !t.short.CompareAndSwap(old, 0); old = t.short.Load() {
	}
	t.evictMu.Unlock()
	if f := t.opts.OnMakeRoom; f != nil && (evicted > 0 || err != nil) {
		f(evicted, err)
	}
	if err != nil {
		return err
	}
	if load := t.idx.load(); load+n > c {
		return fmt.Errorf("g4: no room for %d bytes: %d of its %d bytes (g4_size) are held and none of them may be evicted "+
			"(blocks of device-class objects such as NBD exports are kept, as are those of the object being stored, and blocks being stored are new): %w", n, load, c, tier.ErrNoSpace)
	}
	return nil
}

var _ tier.RoomMaker = (*Tier)(nil)

// lowBytes is LowWatermark × Capacity, in bytes.
func (t *Tier) lowBytes() int64 {
	return int64(math.Round(t.opts.LowWatermark * float64(t.opts.Capacity)))
}

// noteShort records that a put of n bytes was refused for want of space,
// for the next Evict to make room for it (n beyond Capacity never fits,
// and is not recorded).
func (t *Tier) noteShort(n int64) {
	if n > t.opts.Capacity {
		return
	}
	for {
		old := t.short.Load()
		if n <= old || t.short.CompareAndSwap(old, n) {
			return
		}
	}
}

// evictTo deletes the oldest blocks retain does not keep until at most
// target bytes are held, t.evictMu held, and returns how many it deleted.
func (t *Tier) evictTo(ctx context.Context, target int64, retain func(tier.Key) bool) (int, error) {
	start := t.opts.Now()
	n := 0
	for {
		excess := t.idx.load() - target
		if excess <= 0 {
			return n, nil
		}
		deleted, err := t.evictAll(ctx, t.idx.oldest(excess, retain), target, start)
		n += deleted
		if err != nil {
			return n, err
		}
		if deleted == 0 {
			// Nothing evictable (all retained, or every candidate
			// changed under us): the next sweep tries again.
			return n, nil
		}
	}
}

// evictWorkers is how many blocks Evict deletes at once (object stores
// answer one call per round trip).
const evictWorkers = 8

// evictAll evicts the candidates, oldest first, evictWorkers at a time,
// until the load is at most low; the first error stops it.
func (t *Tier) evictAll(ctx context.Context, cands []candidate, low int64, start time.Time) (int, error) {
	var next, deleted atomic.Int64
	var stop atomic.Bool
	var errOnce sync.Once
	var first error
	var wg sync.WaitGroup
	for range min(evictWorkers, len(cands)) {
		wg.Go(func() {
			for !stop.Load() {
				i := next.Add(1) - 1
				if i >= int64(len(cands)) || t.idx.load() <= low {
					return
				}
				n, err := t.evictOne(ctx, cands[i], start)
				if err != nil {
					errOnce.Do(func() { first = err })
					stop.Store(true)
					return
				}
				deleted.Add(int64(n))
				t.evicted.Add(uint64(n))
			}
		})
	}
	wg.Wait()
	return int(deleted.Load()), first
}

// evictOne deletes the block of candidate c if its index entry is still
// the one chosen and its object is not newer than start, or the pack
// object of c if it is still known, and returns how many live blocks it
// deleted.
func (t *Tier) evictOne(ctx context.Context, c candidate, start time.Time) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("g4 evict: %w", err)
	}
	if c.pk != nil {
		return t.evictPack(ctx, c.pk, start)
	}
	ok, err := t.evictBlock(ctx, c, start)
	if ok {
		return 1, err
	}
	return 0, err
}

// evictPack deletes pack object pk whole if it is still known with a live
// member and was stored before start, and returns how many live blocks
// went with it.
func (t *Tier) evictPack(ctx context.Context, pk *pack, start time.Time) (int, error) {
	k, live := t.idx.packLive(pk)
	if !live || pk.mod > start.UnixNano() {
		return 0, nil
	}
	if err := t.call(ctx, "evict", k, func(ctx context.Context) error {
		return t.store.Delete(ctx, pk.name)
	}); err != nil {
		return 0, err
	}
	t.packsDeleted.Add(1)
	return t.idx.dropPack(pk), nil
}

// evictBlock is evictOne for a block in its own object.
func (t *Tier) evictBlock(ctx context.Context, c candidate, start time.Time) (bool, error) {
	unlock := t.locks.lock(c.k)
	defer unlock()
	if e, ok := t.idx.entry(c.k); !ok || e.seq != c.seq {
		return false, nil // stored again, deleted or re-listed since the scan
	}
	name := t.ObjectName(c.k)
	var a ObjectAttrs
	err := t.call(ctx, "evict", c.k, func(ctx context.Context) error {
		var err error
		a, err = t.store.Head(ctx, name)
		return err
	})
	if errors.Is(err, tier.ErrNotFound) {
		t.reap(ctx, t.idx.removeIfSeq(c.k, c.seq))
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if a.ModTime.After(start) {
		// Another writer stored it since the eviction began: it is
		// among the newest now, not to be chosen again.
		t.idx.setMod(c.k, c.seq, a.ModTime.UnixNano())
		return false, nil
	}
	if err := t.call(ctx, "evict", c.k, func(ctx context.Context) error {
		return t.store.Delete(ctx, name)
	}); err != nil {
		return false, err
	}
	t.reap(ctx, t.idx.remove(c.k))
	return true, nil
}

// AutoCapacityFraction is the share of its filesystem's size that a local
// G4 may fill when no size is configured (AutoCapacity).
const AutoCapacityFraction = 0.8

// AutoCapacity returns the default capacity of a local G4 in dir:
// AutoCapacityFraction of the size of the filesystem holding dir (statfs
// f_blocks × f_frsize, whatever is free), and that size.
func AutoCapacity(dir string) (capacity, fsSize int64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, fmt.Errorf("g4: statfs %s: %w", dir, err)
	}
	bsize := int64(st.Frsize)
	if bsize <= 0 {
		bsize = int64(st.Bsize)
	}
	fsSize = int64(st.Blocks) * bsize
	capacity = int64(AutoCapacityFraction * float64(fsSize))
	if capacity <= 0 {
		return 0, fsSize, fmt.Errorf("g4: statfs %s reports a filesystem of %d bytes", dir, fsSize)
	}
	return capacity, fsSize, nil
}
