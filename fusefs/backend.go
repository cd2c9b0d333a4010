package fusefs

import (
	"context"
	"time"

	"github.com/ctxmem/ctxmemd/tiering"
)

// ObjectKind is the ObjectInfo.Kind tag of every object this package creates.
// Reconciliation at mount only ever considers objects of this kind, so the
// objects of other front ends sharing the store (NBD exports) are never
// touched.
const ObjectKind = "file"

// Backend is the part of the tiering core (*tiering.Store) that the FUSE
// front end uses. Every method is safe for concurrent use. Errors are
// translated to errno with tiering.Errno, except where a method says
// otherwise.
type Backend interface {
	// Create makes a new empty object (generation 1) in namespace ns split
	// into blocks of blockSize bytes, tagged with kind, and returns its id.
	Create(ns string, blockSize int, kind string) (tiering.ObjectID, error)
	// ReadAt reads up to len(p) bytes at byte offset off. It returns fewer
	// than len(p) bytes only at the end of the object (0, nil at or past
	// it); holes read as zeros. tiering.ErrNotExist or tiering.ErrLost mean
	// the object is gone.
	ReadAt(ctx context.Context, id tiering.ObjectID, p []byte, off int64) (int, error)
	// WriteAt writes p at byte offset off, extending the object as needed.
	// The bytes are visible to ReadAt when it returns; p is not retained.
	WriteAt(ctx context.Context, id tiering.ObjectID, p []byte, off int64) (int, error)
	// Truncate sets the object's size in bytes: shrinking discards bytes
	// past size, growing adds a hole that reads as zeros. Size 0 starts a
	// new generation.
	Truncate(ctx context.Context, id tiering.ObjectID, size int64) error
	// Delete frees the object in every tier (the work may finish in the
	// background).
	Delete(ctx context.Context, id tiering.ObjectID) error
	// Stat describes one object.
	Stat(id tiering.ObjectID) (tiering.ObjectInfo, error)
	// Flush returns once every dirty block of the object is written back
	// below G2 (G3 or G4).
	Flush(ctx context.Context, id tiering.ObjectID) error
	// SetPinned pins (true) or unpins the object's blocks in G2.
	SetPinned(id tiering.ObjectID, pinned bool) error
	// Prestage starts bringing every block of the object up to G2.
	Prestage(ctx context.Context, id tiering.ObjectID) error
	// BlockTiers names the tier holding each block in block order
	// ("G2", "G3", "G3.5", "G4", or "hole").
	BlockTiers(id tiering.ObjectID) ([]string, error)
	// ServingTier names the slowest tier a whole read of the object needs
	// now ("G2" when every block is in memory, or it has none).
	ServingTier(id tiering.ObjectID) (string, error)
	// RestoreEstimate predicts how long reading the whole object would
	// take now, and the slowest tier it needs.
	RestoreEstimate(id tiering.ObjectID) (time.Duration, string, error)
	// Heat is the object's mean block heat, 0–100.
	Heat(id tiering.ObjectID) (float64, error)
	// Capacity reports total and free bytes (statfs).
	Capacity() (totalBytes, freeBytes int64)
	// Objects lists every live object (used once at mount to reconcile).
	Objects() []tiering.ObjectInfo
	// OnLost registers fn, called with the id of every object the store
	// loses from then on. It is called once, before the mount serves.
	OnLost(fn func(tiering.ObjectID))
}
