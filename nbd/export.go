package nbd

import (
	"context"
	"fmt"
	"unicode/utf8"

	"github.com/ctxmem/ctxmemd/catalog"
	"github.com/ctxmem/ctxmemd/tiering"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// Backend is the part of the tiering core (*tiering.Store) the NBD front
// end uses. Every method is safe for concurrent use. Errors are mapped to
// NBD error values with tiering.Errno (see errnoFor).
type Backend interface {
	// CreateWith makes a new empty object (size 0) in namespace ns split
	// into blocks of blockSize bytes, with opts' kind label and durability
	// class (tiering.KindNBD and tiering.DurabilityDevice here: an export
	// is never dropped and its FLUSH is durable).
	CreateWith(ns string, blockSize int, opts tiering.CreateOptions) (tiering.ObjectID, error)
	// Stat describes one object; tiering.ErrNotExist when it is gone.
	Stat(id tiering.ObjectID) (tiering.ObjectInfo, error)
	// Objects lists every live object (used once, to find orphans).
	Objects() []tiering.ObjectInfo
	// Delete frees an object in every tier.
	Delete(ctx context.Context, id tiering.ObjectID) error
	// Truncate sets the object's size in bytes; growing adds a hole.
	Truncate(ctx context.Context, id tiering.ObjectID, size int64) error
	// ReadAt reads up to len(p) bytes at byte offset off; holes read as
	// zeros; fewer bytes only at the end of the object.
	ReadAt(ctx context.Context, id tiering.ObjectID, p []byte, off int64) (int, error)
	// WriteAt writes p at byte offset off; the bytes are visible to every
	// reader when it returns; p is not retained.
	WriteAt(ctx context.Context, id tiering.ObjectID, p []byte, off int64) (int, error)
	// Flush returns once every block of the object written before the call
	// is stored below G2 (G3 or G4), so it survives a crash of the daemon.
	Flush(ctx context.Context, id tiering.ObjectID) error
	// Discard makes [off, off+length) read as zeros, freeing whole blocks
	// (they become holes).
	Discard(ctx context.Context, id tiering.ObjectID, off, length int64) error
	// BlockTiers names the tier of every block of the object in order;
	// tiering.TierHole for blocks never written (or discarded).
	BlockTiers(id tiering.ObjectID) ([]string, error)
}

// The real store is the production Backend.
var _ Backend = (*tiering.Store)(nil)

// Defaults and bounds of Export fields.
const (
	// DefaultNamespace is the tiering namespace of exports that name none.
	DefaultNamespace = "nbd"
	// DefaultBlockSize is the tiering block size of an export that names
	// none: 64 KiB (bytes). Smaller blocks cost more per-block bookkeeping
	// on large requests; larger ones amplify small random writes at
	// write-back (a 4 KiB write dirties a whole block).
	DefaultBlockSize = 64 << 10
	// DefaultMinBlockSize is the minimum block size advertised in
	// NBD_INFO_BLOCK_SIZE when an export names none (bytes).
	DefaultMinBlockSize = 512
	// MaxPayload is the largest READ or WRITE length in bytes the server
	// accepts and advertises as the maximum block size (32 MiB). Longer
	// requests fail with EINVAL (a WRITE's payload is read and dropped).
	MaxPayload = 32 << 20
	// maxNameLen bounds export names (proto.md: strings MUST be no longer
	// than 4096 bytes).
	maxNameLen = 4096
)

// Export declares one NBD export: a named byte range backed by one object
// of the tiering core.
type Export struct {
	// Name is the export name clients ask for (NBD_OPT_GO / EXPORT_NAME);
	// UTF-8, 1–4096 bytes, no NUL. "" is not allowed: the empty name
	// selects the first export instead (the spec's "default" export).
	Name string
	// Namespace is the tiering namespace of the backing object (default
	// DefaultNamespace).
	Namespace string
	// Quota, when set, is the usage accounting (a catalog namespace's,
	// shared with the FUSE mount) that the export's whole Size is
	// reserved in while it is served: NewServer fails when it does not
	// fit. QuotaName names it in errors.
	Quota     *catalog.Quota
	QuotaName string
	// Size of the export in bytes: a positive multiple of MinBlockSize.
	// Growing an existing export keeps its bytes; shrinking one is refused
	// (NewServer fails) so that a config typo cannot cut a device.
	Size int64
	// BlockSize is the tiering block size in bytes (a power of two,
	// 4 KiB–4 MiB; default DefaultBlockSize). An existing export keeps the
	// block size it was created with.
	BlockSize int
	// MinBlockSize is the minimum block size advertised to clients (1 or a
	// power of two up to 64 KiB; default 512). Clients that asked for block
	// sizes get EINVAL for requests whose offset or length is not a
	// multiple of it.
	MinBlockSize int
	// ReadOnly exports advertise NBD_FLAG_READ_ONLY and fail writes, trims
	// and write-zeroes with EPERM.
	ReadOnly bool
	// Description is sent as NBD_INFO_DESCRIPTION when a client asks for
	// it (optional, at most 4096 bytes).
	Description string
}

// withDefaults returns e with zero fields defaulted, or an error naming the
// bad field.
func (e Export) withDefaults() (Export, error) {
	if e.Namespace == "" {
		e.Namespace = DefaultNamespace
	}
	if e.BlockSize == 0 {
		e.BlockSize = DefaultBlockSize
	}
	if e.MinBlockSize == 0 {
		e.MinBlockSize = DefaultMinBlockSize
	}
	switch {
	case e.Name == "" || len(e.Name) > maxNameLen || !utf8.ValidString(e.Name) || containsNUL(e.Name):
		return e, fmt.Errorf("nbd: export name %q: want 1–%d bytes of UTF-8 without NUL", e.Name, maxNameLen)
	case len(e.Description) > maxNameLen || !utf8.ValidString(e.Description):
		return e, fmt.Errorf("nbd: export %q: description longer than %d bytes or not UTF-8", e.Name, maxNameLen)
	case e.BlockSize < tier.MinBlockSize || e.BlockSize > tier.MaxBlockSize || e.BlockSize&(e.BlockSize-1) != 0:
		return e, fmt.Errorf("nbd: export %q: block size %d: want a power of two in [%d, %d]", e.Name, e.BlockSize, tier.MinBlockSize, tier.MaxBlockSize)
	case e.MinBlockSize < 1 || e.MinBlockSize > 64<<10 || e.MinBlockSize&(e.MinBlockSize-1) != 0:
		return e, fmt.Errorf("nbd: export %q: minimum block size %d: want a power of two in [1, 65536]", e.Name, e.MinBlockSize)
	case e.Size <= 0 || e.Size%int64(e.MinBlockSize) != 0:
		return e, fmt.Errorf("nbd: export %q: size %d: want a positive multiple of %d bytes", e.Name, e.Size, e.MinBlockSize)
	}
	return e, nil
}

func containsNUL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return true
		}
	}
	return false
}

// export is a configured export bound to its object.
type export struct {
	Export
	id tiering.ObjectID
	bs int // block size of the object (may differ from Export.BlockSize for an old export)
}

// flags returns the transmission flags advertised for e on a connection
// that has (or has not) negotiated structured replies.
func (e *export) flags(structured bool) uint16 {
	f := tflagHasFlags | tflagSendFlush | tflagCanMultiConn
	if e.ReadOnly {
		f |= tflagReadOnly
	} else {
		f |= tflagSendFUA | tflagSendTrim | tflagSendWriteZeroes
	}
	if structured {
		f |= tflagSendDF
	}
	return f
}

// preferredBlockSize is the NBD_INFO_BLOCK_SIZE preferred size: the
// object's block size (a request of that size and alignment touches one
// block), at least 4096 and at least the minimum.
func (e *export) preferredBlockSize() uint32 {
	return uint32(max(e.bs, 4096, e.MinBlockSize))
}

// StateFile is the name of the export map in Options.StateDir (see
// catalog.ExportFile for its format).
const StateFile = catalog.ExportFile
