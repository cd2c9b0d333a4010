package g3

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"slices"
	"testing"

	"github.com/ctxmem/ctxmemd/internal/fuzzkit"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// Fuzz targets for the on-disk G3 formats (see format.go). Each target
// takes raw bytes, as a scan of a damaged segment would read them, plus
// the fields of a record built by the real encoder, and checks:
//   - decoding never panics, never alters its buffer, and asks for more
//     bytes only up to the 4-page header bound;
//   - what decodes as intact is self-consistent and is exactly what the
//     encoder writes for the decoded fields (no field is silently ignored);
//   - decode(encode(x)) == x, and flipping any one bit of the encoded
//     header (or payload) makes it fail its check.

// seedRecord encodes a record the way the store writes one.
func seedRecord(typ uint8, k tier.Key, payload []byte, salt, seq uint64) []byte {
	hl := headerLen(k.Namespace, len(payload))
	buf := make([]byte, hl+roundUp(len(payload)))
	copy(buf[hl:], payload)
	encodeHeader(buf[:hl], typ, k, buf[hl:hl+len(payload)], salt, seq)
	return buf
}

func FuzzRecordHeader(f *testing.F) {
	k := tier.Key{Namespace: "ns", Object: 7, Gen: 3, Index: 9}
	big := bytes.Repeat([]byte{0xab}, pageSize+17)
	blk := seedRecord(recBlock, k, []byte("hello"), 42, 5)
	tomb := seedRecord(recTomb, k, nil, 42, 6)
	large := seedRecord(recBlock, tier.Key{Namespace: string(bytes.Repeat([]byte("n"), 255))}, big, 42, 7)
	pad := make([]byte, pageSize)
	encodePad(pad, 3*pageSize, 42, 8)
	damaged := slices.Clone(blk)
	damaged[40] ^= 1
	fuzzkit.Seed(f,
		fuzzkit.C("block", blk[:headerLen("ns", 5)], uint64(42), "ns", uint64(7), uint64(3), uint32(9), uint64(5), []byte("hello"), false, uint32(0)),
		fuzzkit.C("tomb", tomb, uint64(42), "ns", uint64(7), uint64(3), uint32(9), uint64(6), []byte{}, true, uint32(100)),
		fuzzkit.C("large", large, uint64(42), "x", uint64(1), uint64(2), uint32(3), uint64(4), big, false, uint32(12345)),
		fuzzkit.C("pad", pad, uint64(42), "", uint64(0), uint64(0), uint32(0), uint64(0), []byte{0}, false, uint32(7)),
		fuzzkit.C("damaged", damaged, uint64(42), "ns", uint64(7), uint64(3), uint32(9), uint64(5), []byte("x"), false, uint32(1)),
		fuzzkit.C("othersalt", blk, uint64(43), "ns", uint64(7), uint64(3), uint32(9), uint64(5), []byte("x"), false, uint32(1)),
		fuzzkit.C("short", blk[:100], uint64(42), "ns", uint64(1), uint64(1), uint32(1), uint64(1), []byte("x"), false, uint32(1)),
	)
	f.Fuzz(func(t *testing.T, raw []byte, salt uint64, ns string, obj, gen uint64, idx uint32, seq uint64, payload []byte, tombstone bool, flip uint32) {
		if len(raw) > 4*pageSize+1 {
			raw = raw[:4*pageSize+1] // the longest header, and one byte
		}
		checkRawRecord(t, raw, salt)

		// Round trip of a record the encoder writes.
		if len(ns) > maxNamespace || len(payload) > 64<<10 {
			return
		}
		typ := uint8(recBlock)
		if tombstone {
			typ, payload = recTomb, nil
		}
		key := tier.Key{Namespace: ns, Object: obj, Gen: gen, Index: idx}
		buf := seedRecord(typ, key, payload, salt, seq)
		hl := headerLen(ns, len(payload))
		r, c, need := decodeRecord(buf[:hl], salt)
		if c != hdrOK || need != 0 {
			t.Fatalf("encoded record does not decode: check %d need %d", c, need)
		}
		want := record{typ: typ, hdrLen: uint32(hl), recLen: uint32(len(buf)), payloadLen: uint32(len(payload)),
			salt: salt, seq: seq, key: key, payloadCRC: tier.Checksum(payload)}
		got := r
		got.pageCRCs = nil
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("decode(encode(x)) = %+v, want %+v", got, want)
		}
		if len(r.pageCRCs) != 4*pagesOf(len(payload)) || !r.verifyPages(payload, 0) {
			t.Fatal("page CRCs of an intact record do not verify")
		}
		used := int(binary.LittleEndian.Uint32(buf[68:]))
		bad := slices.Clone(buf)
		bit := int(flip % uint32(8*used))
		bad[bit/8] ^= 1 << (bit % 8)
		if _, c, _ := decodeRecord(bad[:hl], salt); c == hdrOK {
			t.Fatalf("header with bit %d flipped decodes as intact", bit)
		}
		if len(payload) > 0 {
			pbit := int(flip % uint32(8*len(payload)))
			bad = slices.Clone(payload)
			bad[pbit/8] ^= 1 << (pbit % 8)
			if r.verifyPages(bad, 0) {
				t.Fatalf("payload with bit %d flipped verifies", pbit)
			}
		}
	})
}

// checkRawRecord decodes arbitrary bytes as a record header.
func checkRawRecord(t *testing.T, raw []byte, salt uint64) {
	orig := slices.Clone(raw)
	r, c, need := decodeRecord(raw, salt)
	if !bytes.Equal(raw, orig) {
		t.Fatal("decodeRecord changed its buffer")
	}
	if need != 0 && (c != hdrDamaged || need <= len(raw) || need > 4*pageSize || need%pageSize != 0) {
		t.Fatalf("need %d with check %d for %d bytes", need, c, len(raw))
	}
	if c != hdrOK {
		return
	}
	le := binary.LittleEndian
	used := int(le.Uint32(raw[68:]))
	if int(r.hdrLen) > len(raw) || used > int(r.hdrLen) || used < hdrFixed {
		t.Fatalf("intact header claims %d/%d bytes of %d", used, r.hdrLen, len(raw))
	}
	if r.salt != salt || le.Uint32(raw) != recMagic {
		t.Fatal("intact header with a wrong magic or salt")
	}
	// The stored CRC must cover exactly what decodes.
	hdr := slices.Clone(raw[:used])
	le.PutUint32(hdr[8:], 0)
	if tier.Checksum(hdr) != le.Uint32(raw[8:]) {
		t.Fatal("intact header whose CRC32C does not match")
	}
	switch r.typ {
	case recBlock, recTomb:
		if int(r.recLen) != recordLen(r.key.Namespace, int(r.payloadLen)) || int(r.hdrLen) != headerLen(r.key.Namespace, int(r.payloadLen)) {
			t.Fatalf("inconsistent lengths: %+v", r)
		}
		if r.typ == recTomb && r.payloadLen != 0 {
			t.Fatal("tombstone with a payload")
		}
		// Re-encode the decoded fields: every byte covered by the CRC,
		// the reserved ones aside, must be what the encoder writes.
		re := make([]byte, used)
		le.PutUint32(re[0:], recMagic)
		le.PutUint16(re[4:], formatVersion)
		re[6] = r.typ
		le.PutUint32(re[12:], r.hdrLen)
		le.PutUint32(re[16:], r.recLen)
		le.PutUint32(re[20:], r.payloadLen)
		le.PutUint64(re[24:], r.salt)
		le.PutUint64(re[32:], r.seq)
		le.PutUint64(re[40:], r.key.Object)
		le.PutUint64(re[48:], r.key.Gen)
		le.PutUint32(re[56:], r.key.Index)
		le.PutUint32(re[60:], r.payloadCRC)
		le.PutUint16(re[64:], uint16(len(r.key.Namespace)))
		le.PutUint32(re[68:], uint32(used))
		copy(re[copy(re[hdrFixed:], r.key.Namespace)+hdrFixed:], r.pageCRCs)
		for _, i := range []int{7, 66, 67} {
			re[i] = hdr[i]
		}
		if !bytes.Equal(re, hdr) {
			t.Fatalf("re-encoded header differs:\n got %x\nwant %x", re, hdr)
		}
	case recPad:
		if r.recLen < pageSize || r.recLen%pageSize != 0 {
			t.Fatalf("pad of %d bytes", r.recLen)
		}
	default:
		t.Fatalf("intact header of unknown type %d", r.typ)
	}
}

func FuzzSegmentHeader(f *testing.F) {
	page := make([]byte, segHeaderLen)
	encodeSegHeader(page, segHeader{id: 1, salt: 0xfeed, segBytes: 64 << 20, created: 1700000000})
	bad := slices.Clone(page)
	bad[20] ^= 0x80
	tiny := make([]byte, segHeaderLen)
	encodeSegHeader(tiny, segHeader{id: 2, salt: 1, segBytes: pageSize})
	fuzzkit.Seed(f,
		fuzzkit.C("valid", page, uint64(1), uint64(0xfeed), uint64(64<<20), uint64(1700000000), uint32(0)),
		fuzzkit.C("flipped", bad, uint64(9), uint64(9), uint64(2*pageSize), uint64(0), uint32(77)),
		fuzzkit.C("tiny", tiny, uint64(2), uint64(1), uint64(pageSize), uint64(0), uint32(5)),
		fuzzkit.C("short", page[:64], uint64(3), uint64(3), uint64(3*pageSize+1), uint64(3), uint32(3)),
	)
	f.Fuzz(func(t *testing.T, raw []byte, id, salt, segBytes, created uint64, flip uint32) {
		orig := slices.Clone(raw)
		h, ok := decodeSegHeader(raw)
		if !bytes.Equal(raw, orig) {
			t.Fatal("decodeSegHeader changed its buffer")
		}
		if ok {
			if h.segBytes%pageSize != 0 || h.segBytes < 2*pageSize {
				t.Fatalf("accepted a segment of %d bytes", h.segBytes)
			}
			re := make([]byte, segHeaderLen)
			encodeSegHeader(re, h)
			// Bytes 6-7 and 12-15 are reserved: covered by the CRC but
			// not interpreted.
			for _, i := range []int{6, 7, 12, 13, 14, 15} {
				re[i] = raw[i]
			}
			binary.LittleEndian.PutUint32(re[8:], 0)
			binary.LittleEndian.PutUint32(re[8:], tier.Checksum(re[:segHeaderUsed]))
			if !bytes.Equal(re[:segHeaderUsed], raw[:segHeaderUsed]) {
				t.Fatalf("re-encoded segment header differs:\n got %x\nwant %x", re[:segHeaderUsed], raw[:segHeaderUsed])
			}
		}

		want := segHeader{id: id, salt: salt, segBytes: segBytes, created: created}
		enc := make([]byte, segHeaderLen)
		encodeSegHeader(enc, want)
		got, ok := decodeSegHeader(enc)
		valid := segBytes%pageSize == 0 && segBytes >= 2*pageSize
		if ok != valid || (ok && got != want) {
			t.Fatalf("decode(encode(%+v)) = %+v, %v", want, got, ok)
		}
		if valid {
			bit := int(flip % (8 * segHeaderUsed))
			enc[bit/8] ^= 1 << (bit % 8)
			if _, ok := decodeSegHeader(enc); ok {
				t.Fatalf("segment header with bit %d flipped decodes", bit)
			}
		}
	})
}
