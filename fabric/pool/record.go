package pool

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// Record layout. Records follow the extent header (extent.go) from byte
// 4096 of the extent, each on a 4 KiB boundary: one 4 KiB header sector,
// then the payload padded with zeros to 4 KiB. Header
// fields (little-endian, format of this project's own design; bytes from
// hdrUsed to 4096 are zero):
//
//	off size field
//	  0    4 magic        "CMXR"
//	  4    2 version      recVersion
//	  6    2 used         bytes of header covered by the header CRC (hdrFixed+nsLen)
//	  8    4 header CRC   CRC32C of bytes [0, used) with this field zero
//	 12    4 payload CRC  CRC32C of the payload bytes (not the padding)
//	 16   16 pool id      Superblock.PoolID
//	 32    8 offset       byte offset of this header from the device start
//	 40    4 extent       extent number
//	 44    4 length       payload bytes
//	 48    8 epoch        lease epoch the writer held
//	 56    8 object       tier.Key.Object
//	 64    8 generation   tier.Key.Gen
//	 72    4 index        tier.Key.Index
//	 76    4 reserved     0
//	 80    8 written      Unix ns on the writer's clock (diagnostics only)
//	 88    1 host length  ≤ MaxHost
//	 89   64 host         writer host name, zero-padded
//	153    1 reserved     0
//	154    2 ns length    ≤ MaxNamespace
//	156    n namespace    tier.Key.Namespace bytes
const (
	recMagic   = "CMXR"
	recVersion = 1
	hdrFixed   = 156
	headerSize = pageSize
)

// MaxHost is the longest writer host name, in bytes.
const MaxHost = 64

// MaxNamespace is the longest key namespace, in bytes (NAME_MAX: a
// namespace is a directory name).
const MaxNamespace = 255

// recordHeader is a decoded record header.
type recordHeader struct {
	poolID     [16]byte
	offset     int64
	extent     uint32
	length     uint32
	epoch      uint64
	key        tier.Key
	payloadCRC uint32
	written    time.Time
	host       string
}

// recordLen returns the bytes a record with an n-byte payload occupies.
func recordLen(n int) int64 {
	return headerSize + (int64(n)+pageSize-1)/pageSize*pageSize
}

// encodeHeader fills buf[:headerSize] with h.
func encodeHeader(buf []byte, h *recordHeader) {
	clear(buf[:headerSize])
	le := binary.LittleEndian
	copy(buf[0:4], recMagic)
	le.PutUint16(buf[4:], recVersion)
	used := hdrFixed + len(h.key.Namespace)
	le.PutUint16(buf[6:], uint16(used))
	le.PutUint32(buf[12:], h.payloadCRC)
	copy(buf[16:32], h.poolID[:])
	le.PutUint64(buf[32:], uint64(h.offset))
	le.PutUint32(buf[40:], h.extent)
	le.PutUint32(buf[44:], h.length)
	le.PutUint64(buf[48:], h.epoch)
	le.PutUint64(buf[56:], h.key.Object)
	le.PutUint64(buf[64:], h.key.Gen)
	le.PutUint32(buf[72:], h.key.Index)
	le.PutUint64(buf[80:], uint64(h.written.UnixNano()))
	buf[88] = byte(len(h.host))
	copy(buf[89:89+MaxHost], h.host)
	le.PutUint16(buf[154:], uint16(len(h.key.Namespace)))
	copy(buf[hdrFixed:], h.key.Namespace)
	le.PutUint32(buf[8:], tier.Checksum(buf[:used]))
}

// Header decoding outcomes, wrapped by decodeHeader's errors.
var (
	// errNotRecord: no record header here (wrong magic or version): zeros
	// after a Reclaim, the middle of another record's payload, or space
	// never written.
	errNotRecord = errors.New("no record header")
	// errHeaderCRC: record magic present but the header fails its CRC32C
	// or is malformed.
	errHeaderCRC = errors.New("record header checksum mismatch")
)

// decodeHeader parses the header sector buf (at least headerSize bytes).
// Errors wrap errNotRecord or errHeaderCRC.
func decodeHeader(buf []byte) (recordHeader, error) {
	var h recordHeader
	le := binary.LittleEndian
	if len(buf) < headerSize || string(buf[0:4]) != recMagic {
		return h, errNotRecord
	}
	if v := le.Uint16(buf[4:]); v != recVersion {
		return h, fmt.Errorf("%w: version %d", errNotRecord, v)
	}
	used := int(le.Uint16(buf[6:]))
	if used < hdrFixed || used > hdrFixed+MaxNamespace {
		return h, fmt.Errorf("%w: header length %d", errHeaderCRC, used)
	}
	want := le.Uint32(buf[8:])
	le.PutUint32(buf[8:], 0)
	got := tier.Checksum(buf[:used])
	le.PutUint32(buf[8:], want)
	if got != want {
		return h, fmt.Errorf("%w: CRC32C %08x, stored %08x", errHeaderCRC, got, want)
	}
	hostLen := int(buf[88])
	nsLen := int(le.Uint16(buf[154:]))
	if hostLen > MaxHost || hdrFixed+nsLen != used {
		return h, fmt.Errorf("%w: host length %d, namespace length %d, header length %d", errHeaderCRC, hostLen, nsLen, used)
	}
	h.payloadCRC = le.Uint32(buf[12:])
	copy(h.poolID[:], buf[16:32])
	h.offset = int64(le.Uint64(buf[32:]))
	h.extent = le.Uint32(buf[40:])
	h.length = le.Uint32(buf[44:])
	h.epoch = le.Uint64(buf[48:])
	h.key.Object = le.Uint64(buf[56:])
	h.key.Gen = le.Uint64(buf[64:])
	h.key.Index = le.Uint32(buf[72:])
	h.written = time.Unix(0, int64(le.Uint64(buf[80:])))
	h.host = string(buf[89 : 89+hostLen])
	h.key.Namespace = string(buf[hdrFixed:used])
	return h, nil
}
