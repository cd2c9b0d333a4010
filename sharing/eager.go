package sharing

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/ctxmem/ctxmemd/tiering"
)

// Eager sharing: a KV file written here is shared to the pool (G3.5) as
// soon as it is complete and stored, before any other host asks for it.
// Sharing only after another host's miss (the scheduler's "wanted" path)
// is too late for an engine that recomputes at once on a miss: the second
// host's first lookup of a block fails, and so do the lookups of the
// blocks after it until the share lands.
//
// A file is shared when the core reports it stored (tiering.EventStored:
// its last writer closed it and every block is written back, so the pool
// copy is of complete bytes that are durable here too). A file still open
// for writing is never shared eagerly: another host would import a prefix
// of it. Admission stays by room, and leaves room for the other hosts:
// nothing is shared eagerly while this host maps more than eagerHigh of
// the pool's capacity, or holds leases on eagerHostShare of its extents or
// more. Without that second bound one host writing KV fast leased every
// extent the pool's reclaim freed, and another host could not share the
// file a third one asked for (TestE2EPoolFaults' restart step with eager
// sharing, 2 runs in 4 under load). The scheduler's value-based shares
// are not bounded by it.
const (
	eagerHigh      = 0.9
	eagerHostShare = 0.5
	eagerQueue     = 4096 // stored files waiting for their share (more are dropped, counted)
	// eagerWorkers share concurrently: one share waits for a pool write
	// and an index publish on the bus, and files are stored in bursts.
	eagerWorkers = 4
)

// eagerState is the queue of stored files to share.
type eagerState struct {
	ready   chan storedFile
	dropped atomic.Int64
	shared  atomic.Int64
	skipped atomic.Int64 // not shared: no room, an import, or an error
	// waitNs and shareNs total, over the files shared eagerly, the time
	// from the store's EventStored to the start of the share (the queue)
	// and the share itself (pool writes, read-back, index publish).
	waitNs, shareNs atomic.Int64
}

// storedFile is a queued EventStored and when the sharer received it.
type storedFile struct {
	id tiering.ObjectID
	at time.Time
}

func newEagerState() *eagerState {
	return &eagerState{ready: make(chan storedFile, eagerQueue)}
}

// stored queues id; it never blocks.
func (e *eagerState) stored(id tiering.ObjectID) {
	select {
	case e.ready <- storedFile{id, time.Now()}:
	default:
		e.dropped.Add(1)
	}
}

// eagerLoop shares stored files. Owner: Run (its WaitGroup); it ends with
// ctx.
func (s *Sharer) eagerLoop(ctx context.Context, files Files) {
	for {
		select {
		case <-ctx.Done():
			return
		case f := <-s.eager.ready:
			s.eagerOne(ctx, files, f)
		}
	}
}

// eagerOne shares id if it is still sealed and clean, has a name, holds
// copies of its own (an import's blocks are only in the pool: another
// host's file) and the pool has room.
func (s *Sharer) eagerOne(ctx context.Context, files Files, f storedFile) {
	id := f.id
	st := s.cfg.Store
	info, err := st.Stat(id)
	if err != nil || info.Dirty || !info.Sealed || info.Size == 0 || info.Durability != tiering.DurabilityCache {
		return // gone, or changed since: a later EventStored brings it back
	}
	ns, path, ok := files.Path(id)
	if !ok {
		s.eager.skipped.Add(1) // unlinked meanwhile
		return
	}
	if local, err := st.LocalCopies(id); err != nil || !local {
		s.eager.skipped.Add(1)
		return
	}
	if !s.eagerRoom() {
		s.eager.skipped.Add(1)
		return
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := s.Share(sctx, id, ns, path, false); err != nil {
		if !errors.Is(err, tiering.ErrNotExist) {
			s.log.Debug("G3.5: eager share", "object", id, "err", err)
		}
		s.eager.skipped.Add(1)
		return
	}
	s.eager.waitNs.Add(int64(start.Sub(f.at)))
	s.eager.shareNs.Add(int64(time.Since(start)))
	s.eager.shared.Add(1)
}

// eagerRoom reports whether the pool has room for an eager share from
// this host (see eagerHigh and eagerHostShare).
func (s *Sharer) eagerRoom() bool {
	t := s.cfg.Tier
	u := t.Usage()
	if u.CapacityBytes <= 0 {
		return true
	}
	if float64(u.UsedBytes) > eagerHigh*float64(u.CapacityBytes) {
		return false
	}
	if es := t.ExtentSize(); es > 0 {
		if w := t.Writer(); w != nil && float64(len(w.Leases())) >= eagerHostShare*float64(u.CapacityBytes/es) {
			return false
		}
	}
	return true
}
