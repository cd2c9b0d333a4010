package pool

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// Superblock layout (first 4 KiB of the device, little-endian, format of
// this project's own design; the rest of the page is zero):
//
//	off size field
//	  0    8 magic        "CTXMPOOL"
//	  8    4 version      FormatVersion
//	 12    4 crc          CRC32C of bytes [0, sbUsed) with this field zero
//	 16   16 pool id      random (crypto/rand), shown as a UUID
//	 32    8 extent size  bytes; power of two ≥ MinExtentSize
//	 40    4 extent count
//	 44    4 reserved     0
//	 48    8 data start   bytes from device start to extent 0 (DataStart)
//	 56    8 device size  bytes the pool was formatted over
//	 64    8 created      Unix ns
const (
	sbMagic = "CTXMPOOL"
	sbUsed  = 72
)

// FormatVersion is the on-disk format version written by Format and the
// only one Open accepts.
const FormatVersion = 1

// DataStart is the byte offset of extent 0 from the start of the device:
// the superblock page, then zeros up to a 1 MiB boundary.
const DataStart = 1 << 20

// MinExtentSize and DefaultExtentSize bound and default the extent size,
// in bytes.
const (
	MinExtentSize     = 1 << 20
	DefaultExtentSize = 64 << 20
)

// Superblock describes a formatted pool; it is immutable once written.
type Superblock struct {
	// Version is the on-disk format version (FormatVersion).
	Version uint32
	// PoolID identifies this formatting of the device; every record
	// carries it, so records left over from an earlier format never
	// validate.
	PoolID [16]byte
	// ExtentSize is the size of one extent in bytes (a power of two
	// ≥ MinExtentSize).
	ExtentSize int64
	// ExtentCount is the number of extents, numbered 0..ExtentCount-1.
	ExtentCount uint32
	// DataStart is the byte offset of extent 0 (DataStart).
	DataStart int64
	// DeviceSize is the device size in bytes when it was formatted; Open
	// refuses a smaller device.
	DeviceSize int64
	// Created is when the pool was formatted.
	Created time.Time
}

// UUID renders PoolID in the 8-4-4-4-12 hex form of RFC 9562.
func (s Superblock) UUID() string {
	b := s.PoolID
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// ExtentOffset returns the byte offset of extent e from the device start.
func (s Superblock) ExtentOffset(e uint32) int64 {
	return s.DataStart + int64(e)*s.ExtentSize
}

// end returns the byte offset just past the last extent.
func (s Superblock) end() int64 { return s.ExtentOffset(s.ExtentCount) }

func encodeSuperblock(buf []byte, s Superblock) {
	clear(buf[:pageSize])
	le := binary.LittleEndian
	copy(buf[0:8], sbMagic)
	le.PutUint32(buf[8:], s.Version)
	copy(buf[16:32], s.PoolID[:])
	le.PutUint64(buf[32:], uint64(s.ExtentSize))
	le.PutUint32(buf[40:], s.ExtentCount)
	le.PutUint64(buf[48:], uint64(s.DataStart))
	le.PutUint64(buf[56:], uint64(s.DeviceSize))
	le.PutUint64(buf[64:], uint64(s.Created.UnixNano()))
	le.PutUint32(buf[12:], tier.Checksum(buf[:sbUsed]))
}

// decodeSuperblock parses and validates the superblock page buf (at least
// pageSize bytes). Errors wrap ErrNoSuperblock, ErrUnknownVersion or
// ErrBadSuperblock, checked in that order: the version is read before the
// CRC because another version may lay out its checksum differently.
func decodeSuperblock(buf []byte) (Superblock, error) {
	le := binary.LittleEndian
	if len(buf) < pageSize || string(buf[0:8]) != sbMagic {
		return Superblock{}, ErrNoSuperblock
	}
	var s Superblock
	s.Version = le.Uint32(buf[8:])
	if s.Version != FormatVersion {
		return Superblock{}, fmt.Errorf("%w: %d (this build reads %d)", ErrUnknownVersion, s.Version, FormatVersion)
	}
	want := le.Uint32(buf[12:])
	le.PutUint32(buf[12:], 0)
	got := tier.Checksum(buf[:sbUsed])
	le.PutUint32(buf[12:], want)
	if got != want {
		return Superblock{}, fmt.Errorf("%w: CRC32C %08x, stored %08x", ErrBadSuperblock, got, want)
	}
	copy(s.PoolID[:], buf[16:32])
	s.ExtentSize = int64(le.Uint64(buf[32:]))
	s.ExtentCount = le.Uint32(buf[40:])
	s.DataStart = int64(le.Uint64(buf[48:]))
	s.DeviceSize = int64(le.Uint64(buf[56:]))
	s.Created = time.Unix(0, int64(le.Uint64(buf[64:])))
	if err := s.validate(); err != nil {
		return Superblock{}, fmt.Errorf("%w: %v", ErrBadSuperblock, err)
	}
	return s, nil
}

// validate checks the geometry for consistency.
func (s Superblock) validate() error {
	switch {
	case s.ExtentSize < MinExtentSize || s.ExtentSize&(s.ExtentSize-1) != 0:
		return fmt.Errorf("extent size %d is not a power of two ≥ %d", s.ExtentSize, MinExtentSize)
	case s.DataStart != DataStart:
		return fmt.Errorf("data start %d, want %d", s.DataStart, DataStart)
	case s.ExtentCount == 0:
		return fmt.Errorf("no extents")
	case s.ExtentSize > (1<<62)/int64(s.ExtentCount) || s.end() > s.DeviceSize:
		return fmt.Errorf("%d extents of %d bytes do not fit in %d bytes", s.ExtentCount, s.ExtentSize, s.DeviceSize)
	}
	return nil
}
