package g4

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"testing"

	"github.com/ctxmem/ctxmemd/internal/fuzzkit"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// FuzzBlockHeader checks decodeHeader, the parser of the first bytes of
// every G4 object (header.go), on raw bytes and on headers written by
// encodeHeader:
//   - it never panics or alters its buffer, and every error wraps errHeader
//     and tier.ErrCorrupt;
//   - a header it accepts names exactly the wanted key, passes its CRC32C
//     and re-encodes to the same bytes (reserved bytes aside);
//   - decode(encode(k, payload)) gives k, the payload length and CRC, and
//     one flipped bit, or asking for another key, makes it fail.
func FuzzBlockHeader(f *testing.F) {
	k := tier.Key{Namespace: "llama", Object: 12, Gen: 2, Index: 3}
	h := encodeHeader(k, []byte("payload"))
	long := encodeHeader(tier.Key{Namespace: string(bytes.Repeat([]byte("z"), 255)), Object: 1<<63 + 5}, bytes.Repeat([]byte{1}, 9000))
	flipped := slices.Clone(h)
	flipped[9] ^= 4
	fuzzkit.Seed(f,
		fuzzkit.C("valid", h, "llama", uint64(12), uint64(2), uint32(3), []byte("payload"), uint32(0)),
		fuzzkit.C("long", long, string(bytes.Repeat([]byte("z"), 255)), uint64(1<<63+5), uint64(0), uint32(0), []byte{}, uint32(99)),
		fuzzkit.C("otherkey", h, "llama", uint64(12), uint64(2), uint32(4), []byte("p"), uint32(1)),
		fuzzkit.C("flipped", flipped, "llama", uint64(12), uint64(2), uint32(3), []byte("payload"), uint32(2)),
		fuzzkit.C("short", h[:40], "", uint64(0), uint64(0), uint32(0), []byte(nil), uint32(3)),
	)
	f.Fuzz(func(t *testing.T, raw []byte, ns string, obj, gen uint64, idx uint32, payload []byte, flip uint32) {
		want := tier.Key{Namespace: ns, Object: obj, Gen: gen, Index: idx}
		if len(ns) > 0xffff {
			return
		}
		orig := slices.Clone(raw)
		got, err := decodeHeader(raw, want)
		if !bytes.Equal(raw, orig) {
			t.Fatal("decodeHeader changed its buffer")
		}
		if err != nil {
			if !isHeaderErr(err) || !errors.Is(err, tier.ErrCorrupt) {
				t.Fatalf("error %v does not wrap errHeader and tier.ErrCorrupt", err)
			}
		} else {
			if got.key != want || len(raw) != headerLen(ns) {
				t.Fatalf("accepted a header for %v (%d bytes) when asked for %v", got.key, len(raw), want)
			}
			re := encodeHeader(want, nil)
			binary.LittleEndian.PutUint32(re[28:], got.length)
			binary.LittleEndian.PutUint32(re[32:], got.crc)
			copy(re[36:60], raw[36:60]) // reserved
			re[5] = raw[5]              // flags, none defined
			binary.LittleEndian.PutUint32(re[60:], headerCRC(re))
			if !bytes.Equal(re, raw) {
				t.Fatalf("re-encoded header differs:\n got %x\nwant %x", re, raw)
			}
		}

		enc := encodeHeader(want, payload)
		h, err := decodeHeader(enc, want)
		if err != nil || h.key != want || h.length != uint32(len(payload)) || h.crc != tier.Checksum(payload) {
			t.Fatalf("decode(encode(%v)) = %+v, %v", want, h, err)
		}
		other := want
		other.Index++
		if _, err := decodeHeader(enc, other); err == nil {
			t.Fatal("header of one key accepted for another")
		}
		bit := int(flip % uint32(8*len(enc)))
		enc[bit/8] ^= 1 << (bit % 8)
		if _, err := decodeHeader(enc, want); err == nil {
			t.Fatalf("header with bit %d flipped decodes", bit)
		}
	})
}
