package g3

import (
	"encoding/binary"
	"errors"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// On-disk format (all integers little-endian; format of our own design).
//
// A segment file is segHeaderLen bytes of segment header followed by
// records. Every record starts on a pageSize boundary:
//
//	record  = header (hdrLen bytes, a multiple of pageSize) + payload
//	          padded with zeros to a multiple of pageSize
//	header  = fixed fields (hdrFixed bytes, below) + namespace bytes +
//	          one CRC32C per pageSize page of payload + zero padding
//
// Fixed header fields, by byte offset:
//
//	0  magic      u32  recMagic
//	4  version    u16  formatVersion
//	6  type       u8   recBlock, recTomb or recPad
//	7  reserved   u8
//	8  hdrCRC     u32  CRC32C of header bytes [0, used) with this field zero
//	12 hdrLen     u32  bytes of header incl. padding (multiple of pageSize)
//	16 recLen     u32  bytes of the whole record (header + padded payload)
//	20 payloadLen u32  bytes of payload (0 for tombstones and pads)
//	24 salt       u64  the segment's random salt (see segment header)
//	32 seq        u64  store-wide sequence number; newest wins
//	40 object     u64  key.Object
//	48 gen        u64  key.Gen
//	56 index      u32  key.Index
//	60 payloadCRC u32  CRC32C of the whole payload
//	64 nsLen      u16  bytes of key.Namespace
//	66 reserved   u16
//	68 used       u32  bytes of header covered by hdrCRC
//	72 namespace, then page CRCs
//
// The segment header (first segHeaderLen bytes of the file):
//
//	0 magic u32 segMagic, 4 version u16, 6 reserved u16,
//	8 hdrCRC u32 (CRC32C of bytes [0, 48) with this field zero),
//	12 reserved u32, 16 id u64, 24 salt u64 (random), 32 segBytes u64,
//	40 created u64 (Unix ns)
const (
	pageSize      = 4096
	segHeaderLen  = pageSize
	hdrFixed      = 72
	recMagic      = 0x52334743 // "CG3R"
	segMagic      = 0x53334743 // "CG3S"
	formatVersion = 1
	segHeaderUsed = 48
	maxNamespace  = 255 // NAME_MAX: a namespace is a directory name
)

// Record types.
const (
	recBlock = 1 // a block: key + payload
	recTomb  = 2 // a tombstone: key deleted as of seq
	recPad   = 3 // filler over a region whose write failed
)

var errBadHeader = errors.New("g3: bad record header")

// record is a decoded record header.
type record struct {
	typ        uint8
	hdrLen     uint32
	recLen     uint32
	payloadLen uint32
	salt       uint64
	seq        uint64
	key        tier.Key
	payloadCRC uint32
	pageCRCs   []byte // 4 bytes per payload page, little-endian; aliases the buffer
}

func pagesOf(n int) int { return (n + pageSize - 1) / pageSize }

func roundUp(n int) int { return pagesOf(n) * pageSize }

// headerLen returns the header length in bytes for a payload of n bytes in
// namespace ns.
func headerLen(ns string, n int) int {
	return roundUp(hdrFixed + len(ns) + 4*pagesOf(n))
}

// recordLen returns the record length in bytes for a payload of n bytes.
func recordLen(ns string, n int) int { return headerLen(ns, n) + roundUp(n) }

// encodeRecord writes the header of a record into buf[:hdrLen] (buf must be
// zeroed there) for a payload already at buf[hdrLen:hdrLen+payloadLen].
func encodeRecord(buf []byte, typ uint8, k tier.Key, payloadLen int, salt, seq uint64) {
	hl := headerLen(k.Namespace, payloadLen)
	encodeHeader(buf[:hl], typ, k, buf[hl:hl+payloadLen], salt, seq)
}

// encodeHeader writes the header of a record with the given payload into
// hdr (exactly headerLen bytes, zeroed): fields, page CRCs, payload CRC and
// header CRC.
func encodeHeader(hdr []byte, typ uint8, k tier.Key, payload []byte, salt, seq uint64) {
	hl := len(hdr)
	rl := hl + roundUp(len(payload))
	le := binary.LittleEndian
	le.PutUint32(hdr[0:], recMagic)
	le.PutUint16(hdr[4:], formatVersion)
	hdr[6] = typ
	le.PutUint32(hdr[12:], uint32(hl))
	le.PutUint32(hdr[16:], uint32(rl))
	le.PutUint32(hdr[20:], uint32(len(payload)))
	le.PutUint64(hdr[24:], salt)
	le.PutUint64(hdr[32:], seq)
	le.PutUint64(hdr[40:], k.Object)
	le.PutUint64(hdr[48:], k.Gen)
	le.PutUint32(hdr[56:], k.Index)
	le.PutUint16(hdr[64:], uint16(len(k.Namespace)))
	p := hdrFixed + copy(hdr[hdrFixed:], k.Namespace)
	// One pass: page CRCs, combined into the payload CRC (full pages) or
	// extended over the short last page.
	var whole uint32
	for i := 0; i < len(payload); i += pageSize {
		page := payload[i:min(i+pageSize, len(payload))]
		c := tier.Checksum(page)
		le.PutUint32(hdr[p:], c)
		p += 4
		switch {
		case i == 0:
			whole = c
		case len(page) == pageSize:
			whole = combinePage(whole, c)
		default:
			whole = tier.UpdateChecksum(whole, page)
		}
	}
	le.PutUint32(hdr[60:], whole)
	le.PutUint32(hdr[68:], uint32(p))
	le.PutUint32(hdr[8:], tier.Checksum(hdr[:p]))
}

// encodePad writes the header of a pad record spanning recLen bytes.
func encodePad(buf []byte, recLen int, salt, seq uint64) {
	clear(buf[:pageSize])
	le := binary.LittleEndian
	le.PutUint32(buf[0:], recMagic)
	le.PutUint16(buf[4:], formatVersion)
	buf[6] = recPad
	le.PutUint32(buf[12:], pageSize)
	le.PutUint32(buf[16:], uint32(recLen))
	le.PutUint64(buf[24:], salt)
	le.PutUint64(buf[32:], seq)
	le.PutUint32(buf[68:], hdrFixed)
	le.PutUint32(buf[8:], tier.Checksum(buf[:hdrFixed]))
}

// headerCheck is the outcome of looking at a page that may start a record.
type headerCheck int

const (
	hdrOK      headerCheck = iota
	hdrNone                // not a header of this segment (zeros, payload, garbage)
	hdrDamaged             // our magic and salt, but it fails its checks
)

// decodeRecord parses the header at the start of buf (at least one page;
// the whole header when hdrLen > pageSize, else hdrDamaged is returned with
// need set). salt is the segment's salt.
func decodeRecord(buf []byte, salt uint64) (r record, c headerCheck, need int) {
	le := binary.LittleEndian
	if len(buf) < pageSize || le.Uint32(buf[0:]) != recMagic || le.Uint64(buf[24:]) != salt {
		return r, hdrNone, 0
	}
	r.typ = buf[6]
	r.hdrLen = le.Uint32(buf[12:])
	r.recLen = le.Uint32(buf[16:])
	r.payloadLen = le.Uint32(buf[20:])
	used := le.Uint32(buf[68:])
	if r.hdrLen < pageSize || r.hdrLen%pageSize != 0 || r.hdrLen > 4*pageSize || used < hdrFixed || used > r.hdrLen {
		return r, hdrDamaged, 0
	}
	if int(r.hdrLen) > len(buf) {
		return r, hdrDamaged, int(r.hdrLen)
	}
	crc := le.Uint32(buf[8:])
	le.PutUint32(buf[8:], 0)
	ok := tier.Checksum(buf[:used]) == crc
	le.PutUint32(buf[8:], crc)
	if !ok || le.Uint16(buf[4:]) != formatVersion {
		return r, hdrDamaged, 0
	}
	r.salt = salt
	r.seq = le.Uint64(buf[32:])
	r.key.Object = le.Uint64(buf[40:])
	r.key.Gen = le.Uint64(buf[48:])
	r.key.Index = le.Uint32(buf[56:])
	r.payloadCRC = le.Uint32(buf[60:])
	nsLen := int(le.Uint16(buf[64:]))
	switch r.typ {
	case recBlock, recTomb:
		if hdrFixed+nsLen+4*pagesOf(int(r.payloadLen)) != int(used) ||
			int(r.hdrLen) != headerLen(string(buf[hdrFixed:hdrFixed+nsLen]), int(r.payloadLen)) ||
			int(r.recLen) != int(r.hdrLen)+roundUp(int(r.payloadLen)) ||
			(r.typ == recTomb && r.payloadLen != 0) {
			return r, hdrDamaged, 0
		}
		r.key.Namespace = string(buf[hdrFixed : hdrFixed+nsLen])
		r.pageCRCs = buf[hdrFixed+nsLen : used]
	case recPad:
		if r.recLen < pageSize || r.recLen%pageSize != 0 {
			return r, hdrDamaged, 0
		}
	default:
		return r, hdrDamaged, 0
	}
	return r, hdrOK, 0
}

// pageCRC returns the stored CRC32C of payload page i.
func (r *record) pageCRC(i int) uint32 {
	return binary.LittleEndian.Uint32(r.pageCRCs[4*i:])
}

// verifyPages checks payload pages [p0, p0+len(data)/pageSize) (the last
// page may be short: data ends at the payload end) against the page CRCs.
func (r *record) verifyPages(data []byte, p0 int) bool {
	for i := 0; i < len(data); i += pageSize {
		if tier.Checksum(data[i:min(i+pageSize, len(data))]) != r.pageCRC(p0+i/pageSize) {
			return false
		}
	}
	return true
}

// segHeader is a decoded segment header.
type segHeader struct {
	id, salt, segBytes, created uint64
}

func encodeSegHeader(buf []byte, h segHeader) {
	clear(buf[:segHeaderLen])
	le := binary.LittleEndian
	le.PutUint32(buf[0:], segMagic)
	le.PutUint16(buf[4:], formatVersion)
	le.PutUint64(buf[16:], h.id)
	le.PutUint64(buf[24:], h.salt)
	le.PutUint64(buf[32:], h.segBytes)
	le.PutUint64(buf[40:], h.created)
	le.PutUint32(buf[8:], tier.Checksum(buf[:segHeaderUsed]))
}

func decodeSegHeader(buf []byte) (segHeader, bool) {
	le := binary.LittleEndian
	if len(buf) < segHeaderLen || le.Uint32(buf[0:]) != segMagic || le.Uint16(buf[4:]) != formatVersion {
		return segHeader{}, false
	}
	crc := le.Uint32(buf[8:])
	le.PutUint32(buf[8:], 0)
	ok := tier.Checksum(buf[:segHeaderUsed]) == crc
	le.PutUint32(buf[8:], crc)
	h := segHeader{id: le.Uint64(buf[16:]), salt: le.Uint64(buf[24:]), segBytes: le.Uint64(buf[32:]), created: le.Uint64(buf[40:])}
	if !ok || h.segBytes%pageSize != 0 || h.segBytes < 2*pageSize {
		return segHeader{}, false
	}
	return h, true
}

// pageShift4K is the linear map that advancing a raw (unconditioned)
// CRC32C register over pageSize zero bytes applies to it, as 32 columns:
// pageShift4K[j] is the image of bit j.
var pageShift4K = zeroShift(pageSize)

// zeroShift returns the columns of the map "process n zero bytes" on a raw
// CRC32C register. tier.UpdateChecksum(^r, zeros) = ^raw(r, zeros), and the
// raw map is linear, so column j = ^UpdateChecksum(^(1<<j), zeros).
func zeroShift(n int) (cols [32]uint32) {
	zeros := make([]byte, n)
	for j := range cols {
		cols[j] = ^tier.UpdateChecksum(^(uint32(1) << j), zeros)
	}
	return cols
}

// combinePage returns CRC32C(A||B) from crcA = CRC32C(A) and crcB =
// CRC32C(B) for a B of exactly pageSize bytes: shift(crcA) XOR crcB, where
// shift advances crcA over len(B) zero bytes (the pre- and post-inversion
// cancel out). This is the CRC combination of zlib's crc32_combine (Mark
// Adler), here with a fixed length and a precomputed matrix.
func combinePage(crcA, crcB uint32) uint32 {
	var r uint32
	for j := 0; crcA != 0; j, crcA = j+1, crcA>>1 {
		if crcA&1 != 0 {
			r ^= pageShift4K[j]
		}
	}
	return r ^ crcB
}
