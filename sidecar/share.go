package sidecar

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctxmem/ctxmemd/fabric/g35"
	"github.com/ctxmem/ctxmemd/fabric/pool"
	"github.com/ctxmem/ctxmemd/fabric/poolkv"
	"github.com/ctxmem/ctxmemd/sidecar/msg"
	"github.com/ctxmem/ctxmemd/tiering"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// Sharing connects the agent to the shared pool (G3.5): the host's pool
// tier (registered with the store as its G35) and the cluster's index of
// shared files. With it the agent answers share and reclaim_extent
// commands, and, as the FUSE mount's Remote, imports files other hosts
// shared.
type Sharing struct {
	Tier  *g35.Tier
	Index *poolkv.Index
}

// wantedEvery bounds how often missed lookups are published ahead of the
// next report.
const wantedEvery = 20 * time.Millisecond

// shareState is the agent's G3.5 bookkeeping.
type shareState struct {
	mu        sync.Mutex
	published map[tiering.ObjectID][2]string // object → (namespace, path) published by this host
	withdraw  chan tiering.ObjectID
	staleCh   chan staleRec
	imports   atomic.Int64
	importNs  atomic.Int64
	shares    atomic.Int64
	stale     atomic.Int64
}

func newShareState() *shareState {
	return &shareState{published: map[tiering.ObjectID][2]string{}, withdraw: make(chan tiering.ObjectID, 4096),
		staleCh: make(chan staleRec, 1024)}
}

// Withdraw handles the G3.5 tier's EventDeleted: a block this host put in the
// pool changed or was deleted, so the file's index entry is withdrawn
// (asynchronously, by Run).
func (a *Agent) Withdraw(k tier.Key) {
	select {
	case a.sh.withdraw <- tiering.ObjectID(k.Object):
	default: // a burst: the next share or reclaim of the path corrects it
	}
}

// Stale handles the G3.5 tier's EventStale: a record read did not match
// (extent leased again, torn or corrupt). The file's index entry is
// withdrawn if it still points at that record, so later lookups miss (the
// engine recomputes) instead of importing the bad record again, and the
// scheduler hears of it (EvStale) so the next share puts fresh records.
func (a *Agent) Stale(k tier.Key, ref g35.Ref, err error) {
	a.sh.stale.Add(1)
	a.log.Warn("G3.5: stale pool record", "key", k.String(), "record", ref.Loc.String(), "err", err)
	ns, path, ok := a.files.Path(tiering.ObjectID(k.Object))
	if !ok {
		return
	}
	select {
	case a.sh.staleCh <- staleRec{ns: ns, path: path, idx: k.Index, loc: ref.Loc}:
	default:
	}
}

// staleRec is a stale record to withdraw from the index.
type staleRec struct {
	ns, path string
	idx      uint32
	loc      pool.Location
}

// withdrawStale removes the index entry of r's file if it still points at
// the stale record (a fresh share is left alone) and reports it.
func (a *Agent) withdrawStale(ctx context.Context, r staleRec) {
	sh := a.cfg.Sharing
	if sh == nil {
		return
	}
	e, ok := sh.Index.Lookup(r.ns, r.path)
	if ok && int(r.idx) < len(e.Blocks) && e.Blocks[r.idx] == r.loc {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if err := sh.Index.Remove(cctx, r.ns, r.path); err != nil {
			a.log.Warn("G3.5: withdraw stale entry", "ns", r.ns, "path", r.path, "err", err)
		}
		cancel()
	}
	a.evMu.Lock()
	if len(a.named) < maxPendingEvents {
		a.named = append(a.named, msg.Event{Kind: msg.EvStale, Namespace: r.ns, Path: r.path})
	}
	a.evMu.Unlock()
}

// withdrawLoop reads the G3.5 tier's events and removes index entries of
// changed objects.
func (a *Agent) withdrawLoop(ctx context.Context) {
	var events <-chan g35.Event
	if a.cfg.Sharing != nil && a.cfg.Sharing.Tier != nil {
		events = a.cfg.Sharing.Tier.Events()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-events:
			switch e.Kind {
			case g35.EventDeleted:
				a.Withdraw(e.Key)
			case g35.EventStale:
				a.Stale(e.Key, e.Ref, e.Err)
			}
		case r := <-a.sh.staleCh:
			a.withdrawStale(ctx, r)
		case id := <-a.sh.withdraw:
			a.sh.mu.Lock()
			p, ok := a.sh.published[id]
			delete(a.sh.published, id)
			a.sh.mu.Unlock()
			if ok && a.cfg.Sharing != nil {
				cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				if err := a.cfg.Sharing.Index.Remove(cctx, p[0], p[1]); err != nil {
					a.log.Warn("G3.5: withdraw index entry", "ns", p[0], "path", p[1], "err", err)
				}
				cancel()
			}
		}
	}
}

// Import implements the FUSE mount's Remote: it makes the file path of
// namespace ns that another host shared available here, as an object whose
// blocks are read from the pool. ok=false when nobody shares the name.
func (a *Agent) Import(ctx context.Context, ns, path string) (tiering.ObjectID, int64, bool, error) {
	sh := a.cfg.Sharing
	if sh == nil {
		return 0, 0, false, nil
	}
	start := time.Now()
	e, ok := sh.Index.Lookup(ns, path)
	if !ok || e.Owner == a.cfg.Host || sh.Tier.Bypassed() {
		return 0, 0, false, nil
	}
	id, err := a.store.Import(ns, e.BlockSize, "file", e.Size, func(id tiering.ObjectID, gen uint64) error {
		for idx, loc := range e.Blocks {
			if loc == (pool.Location{}) {
				continue // a hole
			}
			sh.Tier.Alias(tier.Key{Namespace: ns, Object: uint64(id), Index: uint32(idx), Gen: gen},
				g35.Ref{Key: tier.Key{Namespace: e.Namespace, Object: e.Object, Index: uint32(idx), Gen: e.Gen}, Loc: loc})
		}
		return nil
	})
	if err != nil {
		return 0, 0, false, fmt.Errorf("import %s/%s from %s: %w", ns, path, e.Owner, err)
	}

	// Holes in the entry are not blocks of the imported object.
	a.sh.imports.Add(1)
	a.sh.importNs.Add(int64(time.Since(start)))
	a.queueEvent(msg.EvImported, id)
	return id, e.Size, true, nil
}

// HasDir implements the FUSE mount's Remote.
func (a *Agent) HasDir(ns, path string) bool {
	return a.cfg.Sharing != nil && a.cfg.Sharing.Index.HasDir(ns, path)
}

// Missed implements the FUSE mount's Remote: the name is wanted here.
func (a *Agent) Missed(ns, path string) {
	a.evMu.Lock()
	if len(a.named) < maxPendingEvents {
		a.named = append(a.named, msg.Event{Kind: msg.EvWanted, Namespace: ns, Path: path})
	}
	a.evMu.Unlock()
	// Run publishes it now instead of at the next report, at most every
	// wantedEvery (every create of a new file is a missed lookup too).
	now := time.Now().UnixNano()
	if last := a.lastWanted.Load(); now-last >= int64(wantedEvery) && a.lastWanted.CompareAndSwap(last, now) {
		a.eventsDue.Store(true)
		a.kick()
	}
}

// share copies object id to the pool and publishes it in the index. With
// force, the object's current pool copies (stale or corrupt on the pool)
// are dropped first and every block is put again; it is refused when a
// block has no copy outside the pool.
func (a *Agent) share(ctx context.Context, id tiering.ObjectID, force bool) (int, error) {
	sh := a.cfg.Sharing
	if sh == nil {
		return 0, fmt.Errorf("%w: no shared pool on this host", tiering.ErrInvalid)
	}
	ns, path, ok := a.files.Path(id)
	if !ok {
		return 0, tiering.ErrNotExist
	}
	if force {
		local, err := a.store.LocalCopies(id)
		if err != nil {
			return 0, err
		}
		if !local {
			return 0, fmt.Errorf("%w: %s/%s has blocks only in the pool: cannot share it again", tiering.ErrInvalid, ns, path)
		}
		info, err := a.store.Stat(id)
		if err != nil {
			return 0, err
		}
		idxs, err := a.store.SharedBlocks(id)
		if err != nil {
			return 0, err
		}
		for _, idx := range idxs {
			sh.Tier.Forget(tier.Key{Namespace: info.Namespace, Object: uint64(id), Index: idx, Gen: info.Gen})
		}
		a.store.Unshare(id, info.Gen, idxs)
	}
	n, err := a.store.Share(ctx, id)
	if err != nil {
		return n, err
	}
	info, err := a.store.Stat(id)
	if err != nil {
		return n, err
	}
	e := poolkv.FileEntry{V: 1, Namespace: ns, Path: path, Size: info.Size, BlockSize: info.BlockSize,
		Owner: a.cfg.Host, Object: uint64(id), Gen: info.Gen, Published: time.Now().UnixNano(),
		Blocks: make([]pool.Location, info.Blocks())}
	shared, err := a.store.SharedBlocks(id)
	if err != nil {
		return n, err
	}
	for _, idx := range shared {
		if int(idx) >= len(e.Blocks) {
			continue
		}
		ref, ok := sh.Tier.Location(tier.Key{Namespace: info.Namespace, Object: uint64(id), Index: idx, Gen: info.Gen})
		if !ok {
			return n, fmt.Errorf("share %s/%s: block %d has no pool record", ns, path, idx)
		}
		e.Blocks[idx] = ref.Loc
	}
	// Every written block must be in the pool; a block missing here was
	// rewritten during the share: do not publish a mixed version.
	res, err := a.store.Residency(id)
	if err != nil {
		return n, err
	}
	if res.G35 != res.Blocks {
		return n, fmt.Errorf("share %s/%s: %d of %d blocks in the pool (rewritten meanwhile?)", ns, path, res.G35, res.Blocks)
	}
	if err := sh.Index.Publish(ctx, e); err != nil {
		return n, fmt.Errorf("publish %s/%s: %w", ns, path, err)
	}
	a.sh.mu.Lock()
	a.sh.published[id] = [2]string{ns, path}
	a.sh.mu.Unlock()
	a.sh.shares.Add(1)
	a.queueEvent(msg.EvShared, id)
	return n, nil
}

// reclaim withdraws this host's records in extent e and releases it: the
// index entries that point into e go first (so no new reader is sent
// there), then the local mappings (blocks with no other copy make their
// objects lost), then the extent header is wiped and the lease released.
func (a *Agent) reclaim(ctx context.Context, e uint32) (int, error) {
	sh := a.cfg.Sharing
	if sh == nil {
		return 0, fmt.Errorf("%w: no shared pool on this host", tiering.ErrInvalid)
	}
	held := false
	if w := sh.Tier.Writer(); w != nil {
		for _, l := range w.Leases() {
			held = held || l.Extent == e
		}
	}
	if !held {
		return 0, fmt.Errorf("extent %d: not held by this host: %w", e, tiering.ErrNotExist)
	}
	for _, fe := range sh.Index.ByExtent(e) {
		if err := sh.Index.Remove(ctx, fe.Namespace, fe.Path); err != nil {
			return 0, fmt.Errorf("reclaim extent %d: withdraw %s/%s: %w", e, fe.Namespace, fe.Path, err)
		}
		a.sh.mu.Lock()
		delete(a.sh.published, tiering.ObjectID(fe.Object))
		a.sh.mu.Unlock()
	}
	keys := sh.Tier.ForgetExtent(e)
	byObj := map[tiering.ObjectID]struct {
		gen  uint64
		idxs []uint32
	}{}
	for _, k := range keys {
		v := byObj[tiering.ObjectID(k.Object)]
		v.gen = k.Gen
		v.idxs = append(v.idxs, k.Index)
		byObj[tiering.ObjectID(k.Object)] = v
	}
	for id, v := range byObj {
		a.store.Unshare(id, v.gen, v.idxs)
	}
	if err := sh.Tier.Writer().Reclaim(ctx, e); err != nil && !errors.Is(err, pool.ErrLeaseLost) {
		return len(keys), fmt.Errorf("reclaim extent %d: %w", e, err)
	}
	sh.Tier.ForgetExtentUse(e)
	return len(keys), nil
}

// poolReport is the report's pool section.
func (a *Agent) poolReport() *msg.Pool {
	sh := a.cfg.Sharing
	if sh == nil {
		return nil
	}
	u := sh.Tier.Usage()
	p := &msg.Pool{Bypass: sh.Tier.Bypassed(), LastUse: sh.Tier.ExtentUse(), LastWrite: sh.Tier.ExtentWrites(), Imports: a.sh.imports.Load(),
		Shares: a.sh.shares.Load(), ImportNs: a.sh.importNs.Load()}
	if w := sh.Tier.Writer(); w != nil {
		for _, l := range w.Leases() {
			p.Held = append(p.Held, l.Extent)
		}
	}
	p.ExtentSize = sh.Tier.ExtentSize()
	if p.ExtentSize > 0 {
		p.Extents = uint32(u.CapacityBytes / p.ExtentSize)
	}
	return p
}
