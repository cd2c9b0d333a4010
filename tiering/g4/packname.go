package g4

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// Pack objects hold a run of consecutive blocks of one object generation
// (PutPack), so that sinking a file costs one PUT per pack instead of one
// per block. Names:
//
//	<prefix>/<namespace>/<object>/<gen>/p<first>-<count>-<bsize>-<last>-<stamp>
//
// first (the first block index), count (blocks), bsize (bytes of every
// block but the last) and last (bytes of the last block) are 8 lower-case
// hex digits, stamp 16: a number unique to the pack and larger than the
// stamp of every pack the tier had listed or written before it (the clock
// in Unix ns, or one more than the largest stamp seen), which orders packs
// that hold the same key. So the name alone gives every member's key,
// length and offset: a listing rebuilds the index without reading a
// header, and a Get of one member is one ranged GET. The segment starts
// with 'p' and is longer than a block index, so ParseBlockName (and an
// older build) never takes it for a block object.
//
// Which copy of a key is live when a listing shows several: a per-block
// object wins over any pack (PutPack deletes the per-block object of every
// key it packs once the pack is durable, and counts a key whose delete
// fails as not stored, so a per-block object that coexists with a pack
// is the later copy or the one the index kept), and among packs the
// larger stamp wins.
//
// The object is a pack header followed by the payloads, block i of the run
// at offset headerLen + i×bsize. The header (little endian):
//
//	off len field
//	  0   4 magic "CXP4"
//	  4   1 version (1)
//	  5   1 flags (0)
//	  6   2 namespace length N in bytes
//	  8   8 key.Object
//	 16   8 key.Gen
//	 24   4 first block index
//	 28   4 block count C
//	 32   4 bsize
//	 36   4 last block's length
//	 40   8 stamp
//	 48  12 reserved, zero
//	 60   4 CRC32C of bytes 0..59, the namespace and the CRC table
//	 64   N key.Namespace
//	64+N 4C CRC32C of each block's payload, in index order
//
// A read of one block fetches the header once (one ranged GET, checked
// against its own CRC and the name, then cached) and then only the
// block's bytes, checked against its table entry: damage inside one block
// makes only that block corrupt.
const (
	packFixed   = 64
	packMagic   = "CXP4"
	packVersion = 1
	packSegLen  = 1 + 8 + 1 + 8 + 1 + 8 + 1 + 8 + 1 + 16
)

// packRef is what a pack's name says of it.
type packRef struct {
	ns          string
	object, gen uint64
	first       uint32 // first block index
	count       uint32 // blocks, >= 1
	bsize       uint32 // bytes of every block but the last
	last        uint32 // bytes of the last block, 1..bsize
	stamp       uint64
}

// key returns the key of member i (0-based) of the pack.
func (r packRef) key(i uint32) tier.Key {
	return tier.Key{Namespace: r.ns, Object: r.object, Gen: r.gen, Index: r.first + i}
}

// member returns k's position in the pack and whether k belongs to it.
func (r packRef) member(k tier.Key) (uint32, bool) {
	if k.Namespace != r.ns || k.Object != r.object || k.Gen != r.gen || k.Index < r.first || k.Index-r.first >= r.count {
		return 0, false
	}
	return k.Index - r.first, true
}

// blockLen returns the payload bytes of member i.
func (r packRef) blockLen(i uint32) int64 {
	if i == r.count-1 {
		return int64(r.last)
	}
	return int64(r.bsize)
}

// headerLen returns the pack header's size in bytes.
func (r packRef) headerLen() int64 { return packFixed + int64(len(r.ns)) + 4*int64(r.count) }

// offset returns the byte offset of member i's payload in the object.
func (r packRef) offset(i uint32) int64 { return r.headerLen() + int64(i)*int64(r.bsize) }

// size returns the object's size in bytes.
func (r packRef) size() int64 { return r.offset(r.count-1) + int64(r.last) }

// payload returns the payload bytes of all members.
func (r packRef) payload() int64 { return int64(r.count-1)*int64(r.bsize) + int64(r.last) }

// name returns the object name of the pack described by r under
// prefix (layout above).
func (r packRef) name(prefix string) string {
	ns := emptyNamespace
	if r.ns != "" {
		ns = encodeSegment(r.ns)
	}
	return fmt.Sprintf("%s/%s/%016x/%016x/p%08x-%08x-%08x-%08x-%016x", prefix, ns, r.object, r.gen,
		r.first, r.count, r.bsize, r.last, r.stamp)
}

// parsePackName inverts packRef.name; ok is false for any name it cannot
// produce or that describes an impossible pack (no blocks, a last block
// longer than bsize or empty, indexes past 2^32, blocks over maxBlock).
func parsePackName(prefix, name string, maxBlock int) (r packRef, ok bool) {
	rest, found := strings.CutPrefix(name, prefix+"/")
	if !found {
		return r, false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 4 || len(parts[3]) != packSegLen || parts[3][0] != 'p' {
		return r, false
	}
	if parts[0] != emptyNamespace {
		if r.ns, ok = decodeSegment(parts[0]); !ok {
			return r, false
		}
	}
	var err error
	if r.object, err = parseHex(parts[1], 16); err != nil {
		return r, false
	}
	if r.gen, err = parseHex(parts[2], 16); err != nil {
		return r, false
	}
	seg := parts[3][1:]
	var f [4]uint64
	for i := range f {
		if seg[8] != '-' {
			return r, false
		}
		if f[i], err = parseHex(seg[:8], 8); err != nil {
			return r, false
		}
		seg = seg[9:]
	}
	if r.stamp, err = parseHex(seg, 16); err != nil {
		return r, false
	}
	r.first, r.count, r.bsize, r.last = uint32(f[0]), uint32(f[1]), uint32(f[2]), uint32(f[3])
	if r.count == 0 || r.last == 0 || r.last > r.bsize || int64(r.bsize) > int64(maxBlock) ||
		uint64(r.first)+uint64(r.count) > 1<<32 {
		return r, false
	}
	return r, true
}

// encodePackHeader returns the header of pack r whose blocks have the
// CRC32Cs crcs (len(crcs) == r.count).
func encodePackHeader(r packRef, crcs []uint32) []byte {
	b := make([]byte, r.headerLen())
	copy(b, packMagic)
	b[4] = packVersion
	binary.LittleEndian.PutUint16(b[6:], uint16(len(r.ns)))
	binary.LittleEndian.PutUint64(b[8:], r.object)
	binary.LittleEndian.PutUint64(b[16:], r.gen)
	binary.LittleEndian.PutUint32(b[24:], r.first)
	binary.LittleEndian.PutUint32(b[28:], r.count)
	binary.LittleEndian.PutUint32(b[32:], r.bsize)
	binary.LittleEndian.PutUint32(b[36:], r.last)
	binary.LittleEndian.PutUint64(b[40:], r.stamp)
	copy(b[packFixed:], r.ns)
	t := b[packFixed+len(r.ns):]
	for i, c := range crcs {
		binary.LittleEndian.PutUint32(t[4*i:], c)
	}
	binary.LittleEndian.PutUint32(b[60:], headerCRC(b))
	return b
}

// decodePackHeader checks that b is exactly the intact header of pack r
// (magic, version, CRC, every field equal to the name's) and returns its
// CRC table. Errors wrap errHeader (and so tier.ErrCorrupt).
func decodePackHeader(b []byte, r packRef) ([]uint32, error) {
	if int64(len(b)) != r.headerLen() || string(b[:4]) != packMagic {
		return nil, fmt.Errorf("%w: bad pack magic or length", errHeader)
	}
	if b[4] != packVersion {
		return nil, fmt.Errorf("%w: pack version %d", errHeader, b[4])
	}
	if headerCRC(b) != binary.LittleEndian.Uint32(b[60:]) {
		return nil, fmt.Errorf("%w: pack header CRC32C mismatch", errHeader)
	}
	got := packRef{
		object: binary.LittleEndian.Uint64(b[8:]), gen: binary.LittleEndian.Uint64(b[16:]),
		first: binary.LittleEndian.Uint32(b[24:]), count: binary.LittleEndian.Uint32(b[28:]),
		bsize: binary.LittleEndian.Uint32(b[32:]), last: binary.LittleEndian.Uint32(b[36:]),
		stamp: binary.LittleEndian.Uint64(b[40:]),
	}
	n := int(binary.LittleEndian.Uint16(b[6:]))
	if n != len(r.ns) || string(b[packFixed:packFixed+n]) != r.ns {
		return nil, fmt.Errorf("%w: pack header names another namespace", errHeader)
	}
	got.ns = r.ns
	if got != r {
		return nil, fmt.Errorf("%w: pack header does not match its name", errHeader)
	}
	t := b[packFixed+n:]
	crcs := make([]uint32, r.count)
	for i := range crcs {
		crcs[i] = binary.LittleEndian.Uint32(t[4*i:])
	}
	return crcs, nil
}
