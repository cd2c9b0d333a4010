package sidecar

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
// A file is shared when the core reports it stored (tiering.Observer.
// Stored: its last writer closed it and every block is written back, so
// the pool copy is of complete bytes that are durable here too). A file
// still open for writing is never shared eagerly: another host would
// import a prefix of it. Admission stays by room: nothing is shared while
// the pool tier is above eagerHigh of its capacity (its reclaim frees the
// oldest extents; the scheduler's value-based shares go on).
const (
	eagerHigh  = 0.9
	eagerQueue = 4096 // stored files waiting for their share (more are dropped, counted)
	// eagerWorkers share concurrently: one share waits for a pool write
	// and an index publish on the bus, and files are stored in bursts.
	eagerWorkers = 4
)

// eagerState is the queue of stored files to share.
type eagerState struct {
	ready   chan tiering.ObjectID
	dropped atomic.Int64
	shared  atomic.Int64
	skipped atomic.Int64 // not shared: no room, an import, or an error
}

func newEagerState() *eagerState {
	return &eagerState{ready: make(chan tiering.ObjectID, eagerQueue)}
}

// stored queues id (from Observer.Stored, under the object's lock: never
// blocks).
func (e *eagerState) stored(id tiering.ObjectID) {
	select {
	case e.ready <- id:
	default:
		e.dropped.Add(1)
	}
}

// eagerLoop shares stored files. Owner: Run (its WaitGroup); it ends with
// ctx.
func (a *Agent) eagerLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case id := <-a.eager.ready:
			a.eagerOne(ctx, id)
		}
	}
}

// eagerOne shares id if it is still sealed and clean, holds copies of its
// own (an import's blocks are only in the pool: another host's file) and
// the pool has room.
func (a *Agent) eagerOne(ctx context.Context, id tiering.ObjectID) {
	sh := a.cfg.Sharing
	info, err := a.store.Stat(id)
	if err != nil || info.Dirty || !info.Sealed || info.Size == 0 || info.Durability != tiering.DurabilityCache {
		return // gone, or changed since: a later Stored brings it back
	}
	if local, err := a.store.LocalCopies(id); err != nil || !local {
		a.eager.skipped.Add(1)
		return
	}
	if u := sh.Tier.Usage(); u.CapacityBytes > 0 && float64(u.UsedBytes) > eagerHigh*float64(u.CapacityBytes) {
		a.eager.skipped.Add(1)
		return
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := a.share(sctx, id, false); err != nil {
		if !errors.Is(err, tiering.ErrNotExist) {
			a.log.Debug("G3.5: eager share", "object", id, "err", err)
		}
		a.eager.skipped.Add(1)
		return
	}
	a.eager.shared.Add(1)
}
