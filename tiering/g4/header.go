package g4

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// Every per-block G4 object (Put) starts with a block header (pack
// objects have their own, packname.go): a fixed 64-byte part and the
// key's namespace bytes, followed by the block payload. All integers are
// little endian.
//
//	off len field
//	  0   4 magic "CXG4"
//	  4   1 version (1)
//	  5   1 flags (0)
//	  6   2 namespace length N in bytes
//	  8   8 key.Object
//	 16   8 key.Gen
//	 24   4 key.Index
//	 28   4 payload length in bytes
//	 32   4 CRC32C of the payload
//	 36  24 reserved, zero
//	 60   4 CRC32C of bytes 0..59 followed by the N namespace bytes
//	 64   N key.Namespace
//	64+N    payload
//
// One CRC covers the whole payload (no per-chunk CRCs): the tier reads and
// verifies whole blocks. On S3 the cost of a read is dominated by the
// first-byte latency of a request (tens of ms) rather than by moving at most
// 4 MiB, and G4 reads are restores of whole blocks to an upper tier, so one
// request that fetches and checks the whole block beats a header request
// plus a range request. The header has its own CRC so that a damaged header
// is told apart from a block of another key.
const (
	headerFixed   = 64
	headerMagic   = "CXG4"
	headerVersion = 1
)

// blockHeader is the decoded header of one G4 object.
type blockHeader struct {
	key    tier.Key
	length uint32 // payload bytes
	crc    uint32 // CRC32C of the payload
}

// headerLen returns the header size in bytes for a block of namespace ns.
func headerLen(ns string) int { return headerFixed + len(ns) }

// errHeader marks a header that is malformed or names another block; it
// wraps tier.ErrCorrupt.
var errHeader = fmt.Errorf("%w: bad block header", tier.ErrCorrupt)

// errPayloadCRC marks a payload whose CRC32C does not match; it wraps
// tier.ErrCorrupt.
var errPayloadCRC = fmt.Errorf("%w: payload CRC32C mismatch", tier.ErrCorrupt)

// encodeHeader returns the header for payload data of block k.
func encodeHeader(k tier.Key, data []byte) []byte {
	b := make([]byte, headerLen(k.Namespace))
	copy(b, headerMagic)
	b[4] = headerVersion
	binary.LittleEndian.PutUint16(b[6:], uint16(len(k.Namespace)))
	binary.LittleEndian.PutUint64(b[8:], k.Object)
	binary.LittleEndian.PutUint64(b[16:], k.Gen)
	binary.LittleEndian.PutUint32(b[24:], k.Index)
	binary.LittleEndian.PutUint32(b[28:], uint32(len(data)))
	binary.LittleEndian.PutUint32(b[32:], tier.Checksum(data))
	copy(b[headerFixed:], k.Namespace)
	binary.LittleEndian.PutUint32(b[60:], headerCRC(b))
	return b
}

// headerCRC is the CRC32C of b[0:60] and the namespace bytes b[64:].
func headerCRC(b []byte) uint32 {
	return tier.UpdateChecksum(tier.Checksum(b[:60]), b[headerFixed:])
}

// decodeHeader parses b, which holds exactly the header of block want
// (headerLen(want.Namespace) bytes), and checks that it is intact and names
// want. Errors wrap errHeader (and so tier.ErrCorrupt).
func decodeHeader(b []byte, want tier.Key) (blockHeader, error) {
	if len(b) < headerFixed || string(b[:4]) != headerMagic {
		return blockHeader{}, fmt.Errorf("%w: bad magic", errHeader)
	}
	if b[4] != headerVersion {
		return blockHeader{}, fmt.Errorf("%w: version %d", errHeader, b[4])
	}
	n := int(binary.LittleEndian.Uint16(b[6:]))
	if headerFixed+n != len(b) {
		return blockHeader{}, fmt.Errorf("%w: namespace length %d, want %d", errHeader, n, len(want.Namespace))
	}
	if headerCRC(b) != binary.LittleEndian.Uint32(b[60:]) {
		return blockHeader{}, fmt.Errorf("%w: header CRC32C mismatch", errHeader)
	}
	h := blockHeader{
		key: tier.Key{
			Namespace: string(b[headerFixed:]),
			Object:    binary.LittleEndian.Uint64(b[8:]),
			Gen:       binary.LittleEndian.Uint64(b[16:]),
			Index:     binary.LittleEndian.Uint32(b[24:]),
		},
		length: binary.LittleEndian.Uint32(b[28:]),
		crc:    binary.LittleEndian.Uint32(b[32:]),
	}
	if h.key != want {
		return blockHeader{}, fmt.Errorf("%w: holds block %v", errHeader, h.key)
	}
	return h, nil
}

// isHeaderErr reports whether err is a header (not payload) corruption.
func isHeaderErr(err error) bool { return errors.Is(err, errHeader) }
