package pool

import (
	"context"
	"fmt"
	"time"
)

// Lease is the right of one host to write inside one extent until Expires.
//
// Epoch is strictly greater than the epoch of every earlier lease of the
// same extent (a global counter, such as a JetStream KV revision, also
// qualifies). Every record a writer puts in the extent carries the epoch,
// so a record of an earlier lease never validates against a Location of a
// later one, and the other way round.
type Lease struct {
	// Extent is the extent number, 0..Superblock.ExtentCount-1.
	Extent uint32
	// Epoch identifies this lease of the extent (see above).
	Epoch uint64
	// Holder names the host holding the lease (its ctxmemd host id).
	Holder string
	// Expires is when the lease lapses unless renewed, by the leaser's
	// clock. Writers stop writing a safety margin before it.
	Expires time.Time
}

// String renders the lease as "extent 3 epoch 17 (host-a, expires ...)".
func (l Lease) String() string {
	return fmt.Sprintf("extent %d epoch %d (%s, expires %s)", l.Extent, l.Epoch, l.Holder, l.Expires.Format(time.RFC3339Nano))
}

// Leaser hands out extent leases to one host. It is the pool's only
// cross-host coordination: hosts never lock the device, they only write
// inside extents they hold a lease on. The in-memory implementation is
// MemLeases; the control bus provides the multi-host one (JetStream KV).
// Implementations are safe for concurrent use.
//
// Expiry: a lease is live while the leaser's clock is before Expires.
// An implementation may hand an expired extent out again only after a
// grace period past Expires that covers clock skew between hosts and a
// write still in flight on the old holder.
type Leaser interface {
	// Acquire leases a free extent to this leaser's host: one never
	// leased, released, or whose lease expired (past the grace period).
	// The returned lease has a NEW epoch for that extent (see Lease) and
	// Expires = now + TTL. It returns an error wrapping ErrNoExtent when
	// every extent is held by a live lease, ctx.Err() when ctx ends first,
	// and the bus error when the bus does not answer.
	Acquire(ctx context.Context) (Lease, error)
	// Renew extends l to now + TTL and returns it with the same Extent,
	// Epoch and Holder. It returns an error wrapping ErrLeaseLost when l
	// is no longer the live lease of its extent (expired, released, or
	// the extent was leased again since), and other errors when the bus
	// does not answer (the lease may still be live; retry before
	// Expires).
	Renew(ctx context.Context, l Lease) (Lease, error)
	// Release frees l's extent for the next Acquire. It returns an error
	// wrapping ErrLeaseLost, and changes nothing, when l is no longer the
	// live lease of its extent. Release before anything still points into
	// the extent is the caller's bug (see Pool.Reclaim).
	Release(ctx context.Context, l Lease) error
}
