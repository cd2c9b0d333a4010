// Package sharing is a host's cross-host sharing of KV files through the
// shared pool (G3.5, DESIGN "Shared pool"): the cluster's index of shared
// files (fabric/poolkv), publish-after-verify of this host's files, import
// of other hosts' files on lookup, withdrawal of entries whose blocks
// changed, stale-record handling and eager sharing. It sits beside the
// tiering core, whose Share/Import/Unshare move the blocks, and below the
// front ends and the sidecar: the FUSE mount calls it as its Remote, the
// sidecar hands it the scheduler's share and reclaim_extent commands and
// reports what it does (Notes).
//
// A Sharer is made before the mount and needs nothing made after it:
// names of this host's files come with each call (Share) or from the
// catalog handed to Run, so start-up order is not part of correctness.
package sharing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctxmem/ctxmemd/fabric/g35"
	"github.com/ctxmem/ctxmemd/fabric/pool"
	"github.com/ctxmem/ctxmemd/fabric/poolkv"
	"github.com/ctxmem/ctxmemd/tiering"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// Files names this host's files (implemented by *catalog.Names).
type Files interface {
	// Path returns the namespace and path of the file whose object is id.
	Path(id tiering.ObjectID) (ns, path string, ok bool)
}

// Config configures a Sharer.
type Config struct {
	// Host is this host's name: the owner of the entries it publishes.
	Host string
	// Store is the tiering core the pool tier is registered with (as its
	// G35).
	Store *tiering.Store
	// Tier is the host's pool tier; Index the cluster's index of shared
	// files. Both required.
	Tier  *g35.Tier
	Index *poolkv.Index
	// Eager shares every KV file written here once it is complete and
	// written back (eager.go); without it files are shared on the
	// scheduler's command (after another host missed them).
	Eager bool
	// Log receives the sharer's logs (default slog.Default()).
	Log *slog.Logger
}

// NoteKind names what a Note reports.
type NoteKind uint8

const (
	// NoteImported: ID was imported from another host's share.
	NoteImported NoteKind = iota + 1
	// NoteShared: ID was shared (published in the index).
	NoteShared
	// NoteStale: the shared file Namespace/Path had a stale pool record;
	// its entry was withdrawn.
	NoteStale
	// NoteWanted: a lookup of Namespace/Path found it neither here nor
	// shared.
	NoteWanted
)

// Note is something the sharer did or saw that the control plane reports
// (the sidecar turns them into bus events).
type Note struct {
	Kind            NoteKind
	ID              tiering.ObjectID // NoteImported, NoteShared
	Namespace, Path string           // NoteStale, NoteWanted
}

// noteQueue bounds Notes not yet read (more are dropped, counted).
const noteQueue = 4096

// Stats are the sharer's counters.
type Stats struct {
	Imports  int64 // files imported from other hosts
	ImportNs int64 // total time spent importing (ns)
	Shares   int64 // files published
	// SharedBytes counts the bytes of blocks Share put into the pool (a
	// file's last partial block by its length when the share put every
	// block; else whole blocks).
	SharedBytes int64
	Stale       int64 // stale pool records seen
	// DroppedNotes counts Notes dropped from a full queue.
	DroppedNotes int64
	// EagerShared counts files shared eagerly, EagerSkipped stored files
	// not shared (pool above its high mark, an import, an error),
	// EagerDropped stored files dropped from a full queue.
	EagerShared, EagerSkipped, EagerDropped int64
	// EagerWaitNs and EagerShareNs total, over the EagerShared files, the
	// time from the store reporting the file stored to the start of its
	// share (the eager queue) and the share itself (pool writes and
	// read-back, the index publish), in ns: divided by EagerShared, how
	// late an eager share lands after write-back.
	EagerWaitNs, EagerShareNs int64
}

// Sharer is a host's sharing component. Create it with New, give it to
// the mount as its Remote, and Run it.
type Sharer struct {
	cfg Config
	log *slog.Logger

	mu sync.Mutex
	// published are the entries this host published, by object (trimmed
	// by the store's removed and lost events).
	published map[tiering.ObjectID]name

	withdraw chan tiering.ObjectID
	staleCh  chan staleRec
	notes    chan Note
	events   *tiering.Events // the store's object events
	eager    *eagerState     // nil unless Config.Eager

	imports, importNs, shares, sharedBytes, stale, droppedNotes atomic.Int64
}

type name struct{ ns, path string }

// New creates a sharer and subscribes it to the store's events. Errors:
// a missing Store, Tier or Index.
func New(cfg Config) (*Sharer, error) {
	if cfg.Store == nil || cfg.Tier == nil || cfg.Index == nil {
		return nil, errors.New("sharing: Store, Tier and Index are required")
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	s := &Sharer{cfg: cfg, log: cfg.Log.With("component", "sharing"),
		published: map[tiering.ObjectID]name{},
		withdraw:  make(chan tiering.ObjectID, 4096), staleCh: make(chan staleRec, 1024),
		notes: make(chan Note, noteQueue), events: cfg.Store.Subscribe(0)}
	if cfg.Eager {
		s.eager = newEagerState()
	}
	return s, nil
}

// Tier returns the pool tier.
func (s *Sharer) Tier() *g35.Tier { return s.cfg.Tier }

// Notes returns the channel of the sharer's notes for the control plane.
func (s *Sharer) Notes() <-chan Note { return s.notes }

// Stats returns the sharer's counters.
func (s *Sharer) Stats() Stats {
	st := Stats{Imports: s.imports.Load(), ImportNs: s.importNs.Load(), Shares: s.shares.Load(),
		SharedBytes: s.sharedBytes.Load(), Stale: s.stale.Load(), DroppedNotes: s.droppedNotes.Load()}
	if e := s.eager; e != nil {
		st.EagerShared, st.EagerSkipped, st.EagerDropped = e.shared.Load(), e.skipped.Load(), e.dropped.Load()
		st.EagerWaitNs, st.EagerShareNs = e.waitNs.Load(), e.shareNs.Load()
	}
	return st
}

func (s *Sharer) note(n Note) {
	select {
	case s.notes <- n:
	default:
		s.droppedNotes.Add(1)
	}
}

// Run withdraws index entries of changed or stale blocks, keeps its name
// maps in step with the store's objects and, with Config.Eager, shares
// stored files, until ctx ends (it returns nil then). files names this
// host's files for eager shares. Its goroutines are owned by Run: all have
// ended when it returns.
func (s *Sharer) Run(ctx context.Context, files Files) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	if s.eager != nil {
		for range eagerWorkers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.eagerLoop(ctx, files)
			}()
		}
	}
	defer s.events.Close()
	pool := s.cfg.Tier.Events()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-s.events.C():
			if !ok {
				return nil // the store closed
			}
			s.onStoreEvent(ev)
		case e := <-pool:
			switch e.Kind {
			case g35.EventDeleted:
				s.withdrawKey(e.Key)
			case g35.EventStale:
				s.staleRecord(e.Key, e.Ref, e.Err)
			}
		case r := <-s.staleCh:
			s.withdrawStale(ctx, r)
		case id := <-s.withdraw:
			s.mu.Lock()
			p, ok := s.published[id]
			delete(s.published, id)
			s.mu.Unlock()
			if ok {
				s.removeEntry(ctx, p, "withdraw index entry")
			}
		}
	}
}

// onStoreEvent follows the store: a removed or lost object is neither
// published nor imported any more; a stored one is queued for eager
// sharing.
func (s *Sharer) onStoreEvent(ev tiering.Event) {
	switch ev.Kind {
	case tiering.EventStored:
		if s.eager != nil && ev.Durability == tiering.DurabilityCache {
			s.eager.stored(ev.ID)
		}
	case tiering.EventRemoved, tiering.EventLost:
		s.mu.Lock()
		_, pub := s.published[ev.ID]
		s.mu.Unlock()
		if pub {
			select {
			case s.withdraw <- ev.ID:
			default:
			}
		}
	}
}

func (s *Sharer) removeEntry(ctx context.Context, n name, what string) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := s.cfg.Index.Remove(cctx, n.ns, n.path); err != nil {
		s.log.Warn("G3.5: "+what, "ns", n.ns, "path", n.path, "err", err)
	}
}

// withdrawKey handles the G3.5 tier's EventDeleted: a block this host put in
// the pool changed or was deleted, so the file's index entry is withdrawn
// (asynchronously, by Run).
func (s *Sharer) withdrawKey(k tier.Key) {
	select {
	case s.withdraw <- tiering.ObjectID(k.Object):
	default: // a burst: the next share or reclaim of the path corrects it
	}
}

// staleRec is a stale record to withdraw from the index: block idx of a
// file at location loc.
type staleRec struct {
	idx uint32
	loc pool.Location
}

// staleRecord handles the G3.5 tier's EventStale: a record read did not match
// (extent leased again, torn or corrupt). Every index entry whose block
// is that record is withdrawn (by location, so it does not matter that the
// importing file was dropped as lost meanwhile), so later lookups miss
// (the engine recomputes) instead of importing the bad record again, and
// the control plane hears of each (NoteStale) so the next share puts
// fresh records.
func (s *Sharer) staleRecord(k tier.Key, ref g35.Ref, err error) {
	s.stale.Add(1)
	s.log.Warn("G3.5: stale pool record", "key", k.String(), "record", ref.Loc.String(), "err", err)
	select {
	case s.staleCh <- staleRec{idx: k.Index, loc: ref.Loc}:
	default: // a burst: readers of the others find them stale too
	}
}

// withdrawStale removes the index entries that still point at the stale
// record (a fresh share is left alone) and notes them.
func (s *Sharer) withdrawStale(ctx context.Context, r staleRec) {
	for _, e := range s.cfg.Index.ByExtent(r.loc.Extent) {
		if int(r.idx) >= len(e.Blocks) || e.Blocks[r.idx] != r.loc {
			continue
		}
		n := name{e.Namespace, e.Path}
		s.removeEntry(ctx, n, "withdraw stale entry")
		s.note(Note{Kind: NoteStale, Namespace: n.ns, Path: n.path})
	}
}

// Import implements the FUSE mount's Remote: it makes the file path of
// namespace ns that another host shared available here, as an object whose
// blocks are read from the pool. ok=false when nobody shares the name, the
// owner is this host, or the pool is bypassed.
func (s *Sharer) Import(ctx context.Context, ns, path string) (tiering.ObjectID, int64, bool, error) {
	start := time.Now()
	sh := s.cfg
	e, ok := sh.Index.Lookup(ns, path)
	if !ok || e.Owner == sh.Host || sh.Tier.Bypassed() {
		return 0, 0, false, nil
	}
	id, err := sh.Store.Import(ns, e.BlockSize, "file", e.Size, func(id tiering.ObjectID, gen uint64) error {
		for idx, loc := range e.Blocks {
			if loc == (pool.Location{}) {
				continue // a hole: not a block of the imported object
			}
			sh.Tier.Alias(tier.Key{Namespace: ns, Object: uint64(id), Index: uint32(idx), Gen: gen},
				g35.Ref{Key: tier.Key{Namespace: e.Namespace, Object: e.Object, Index: uint32(idx), Gen: e.Gen}, Loc: loc})
		}
		return nil
	})
	if err != nil {
		return 0, 0, false, fmt.Errorf("import %s/%s from %s: %w", ns, path, e.Owner, err)
	}
	s.imports.Add(1)
	s.importNs.Add(int64(time.Since(start)))
	s.note(Note{Kind: NoteImported, ID: id})
	return id, e.Size, true, nil
}

// HasDir implements the FUSE mount's Remote.
func (s *Sharer) HasDir(ns, path string) bool { return s.cfg.Index.HasDir(ns, path) }

// Missed implements the FUSE mount's Remote: the name is wanted here
// (NoteWanted). It never blocks.
func (s *Sharer) Missed(ns, path string) {
	s.note(Note{Kind: NoteWanted, Namespace: ns, Path: path})
}

// Share copies object id (the file path of namespace ns) to the pool and
// publishes it in the index, after checking that every written block has
// a pool record of this generation (a file rewritten meanwhile is not
// published as a mix). With force, the object's current pool copies
// (stale or corrupt on the pool) are dropped first and every block is put
// again; that is refused (tiering.ErrInvalid) when a block has no copy
// outside the pool. It returns the blocks put. Errors: tiering.ErrNotExist,
// tiering.ErrInvalid, tier and index errors, ctx errors.
func (s *Sharer) Share(ctx context.Context, id tiering.ObjectID, ns, path string, force bool) (int, error) {
	st, t := s.cfg.Store, s.cfg.Tier
	if force {
		local, err := st.LocalCopies(id)
		if err != nil {
			return 0, err
		}
		if !local {
			return 0, fmt.Errorf("%w: %s/%s has blocks only in the pool: cannot share it again", tiering.ErrInvalid, ns, path)
		}
		info, err := st.Stat(id)
		if err != nil {
			return 0, err
		}
		idxs, err := st.SharedBlocks(id)
		if err != nil {
			return 0, err
		}
		for _, idx := range idxs {
			t.Forget(tier.Key{Namespace: info.Namespace, Object: uint64(id), Index: idx, Gen: info.Gen})
		}
		st.Unshare(id, info.Gen, idxs)
	}
	n, err := st.Share(ctx, id)
	info, serr := st.Stat(id)
	if serr == nil {
		// A file's last block may be partial: at most one block's
		// rounding per share.
		s.sharedBytes.Add(min(int64(n)*int64(info.BlockSize), info.Size))
	}
	if err != nil {
		return n, err
	}
	if serr != nil {
		return n, serr
	}
	e := poolkv.FileEntry{V: 1, Namespace: ns, Path: path, Size: info.Size, BlockSize: info.BlockSize,
		Owner: s.cfg.Host, Object: uint64(id), Gen: info.Gen, Published: time.Now().UnixNano(),
		Blocks: make([]pool.Location, info.Blocks())}
	shared, err := st.SharedBlocks(id)
	if err != nil {
		return n, err
	}
	for _, idx := range shared {
		if int(idx) >= len(e.Blocks) {
			continue
		}
		ref, ok := t.Location(tier.Key{Namespace: info.Namespace, Object: uint64(id), Index: idx, Gen: info.Gen})
		if !ok {
			return n, fmt.Errorf("share %s/%s: block %d has no pool record", ns, path, idx)
		}
		e.Blocks[idx] = ref.Loc
	}
	// Every written block must be in the pool; a block missing here was
	// rewritten during the share: do not publish a mixed version.
	res, err := st.Residency(id)
	if err != nil {
		return n, err
	}
	if res.G35 != res.Blocks {
		return n, fmt.Errorf("share %s/%s: %d of %d blocks in the pool (rewritten meanwhile?)", ns, path, res.G35, res.Blocks)
	}
	if err := s.cfg.Index.Publish(ctx, e); err != nil {
		return n, fmt.Errorf("publish %s/%s: %w", ns, path, err)
	}
	s.mu.Lock()
	s.published[id] = name{ns, path}
	s.mu.Unlock()
	s.shares.Add(1)
	s.note(Note{Kind: NoteShared, ID: id})
	return n, nil
}

// Reclaim withdraws this host's records in extent e and releases it: the
// index entries that point into e go first (so no new reader is sent
// there), then the local mappings (blocks with no other copy make their
// objects lost), then the extent header is wiped and the lease released.
// It returns the records dropped. Errors: tiering.ErrNotExist when this
// host does not hold e, index and pool errors.
func (s *Sharer) Reclaim(ctx context.Context, e uint32) (int, error) {
	t := s.cfg.Tier
	held := false
	if w := t.Writer(); w != nil {
		for _, l := range w.Leases() {
			held = held || l.Extent == e
		}
	}
	if !held {
		return 0, fmt.Errorf("extent %d: not held by this host: %w", e, tiering.ErrNotExist)
	}
	for _, fe := range s.cfg.Index.ByExtent(e) {
		if err := s.cfg.Index.Remove(ctx, fe.Namespace, fe.Path); err != nil {
			return 0, fmt.Errorf("reclaim extent %d: withdraw %s/%s: %w", e, fe.Namespace, fe.Path, err)
		}
		s.mu.Lock()
		delete(s.published, tiering.ObjectID(fe.Object))
		s.mu.Unlock()
	}
	keys := t.ForgetExtent(e)
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
		s.cfg.Store.Unshare(id, v.gen, v.idxs)
	}
	if err := t.Writer().Reclaim(ctx, e); err != nil && !errors.Is(err, pool.ErrLeaseLost) {
		return len(keys), fmt.Errorf("reclaim extent %d: %w", e, err)
	}
	t.ForgetExtentUse(e)
	return len(keys), nil
}
