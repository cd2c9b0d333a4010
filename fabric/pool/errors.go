package pool

import "errors"

// Sentinel errors of the pool. Functions wrap them with context; test with
// errors.Is. Reads additionally return tier.ErrNotFound and tier.ErrCorrupt
// (see Reader.Get), writes tier.ErrTooLarge and tier.ErrClosed.
var (
	// ErrNoSuperblock: the first 4 KiB of the device do not carry the pool
	// magic (an unformatted or foreign device, or one shorter than 4 KiB).
	ErrNoSuperblock = errors.New("pool: no superblock")
	// ErrBadSuperblock: the superblock carries the magic but fails its
	// CRC32C or holds impossible values (damaged).
	ErrBadSuperblock = errors.New("pool: bad superblock")
	// ErrUnknownVersion: the superblock is of a format version this code
	// does not read.
	ErrUnknownVersion = errors.New("pool: unknown format version")
	// ErrSizeMismatch: the device is smaller than the superblock says it
	// was when it was formatted (truncated file, shrunk namespace, wrong
	// device).
	ErrSizeMismatch = errors.New("pool: device size mismatch")
	// ErrFormatted: Format found a valid superblock and FormatOptions.Force
	// was not set.
	ErrFormatted = errors.New("pool: device already formatted")
	// ErrNoExtent: Leaser.Acquire found no free or expired extent (the
	// pool is full).
	ErrNoExtent = errors.New("pool: no free extent")
	// ErrLeaseLost: the extent lease expired, was taken over, or is about
	// to expire (within the writer's safety margin); nothing was published.
	ErrLeaseLost = errors.New("pool: extent lease lost")
)
