package g4

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
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

// FuzzLocalFile checks the preamble and metadata parser of Local's object
// files (localfile.go) on raw file bytes and on files encodeLocalMeta
// writes:
//   - it never panics, and never reads or allocates more metadata than
//     maxLocalMeta, whatever length the preamble declares; errors wrap
//     errBadLocalFile;
//   - accepted metadata survives encode → decode unchanged;
//   - decode(encode(meta)) == meta for every metadata ValidateMeta
//     accepts, and the data starts right after it.
func FuzzLocalFile(f *testing.F) {
	meta := map[string]string{"expires": "1700000000", "ctxmem-key": "ns/1/2@3"}
	file := append(encodeLocalMeta(meta), "data"...)
	huge := []byte("G4L1\xff\xff\xff\xff")
	fuzzkit.Seed(f,
		fuzzkit.C("valid", file, "expires", "1700000000", "ctxmem-key", "ns/1/2@3"),
		fuzzkit.C("nometa", append(encodeLocalMeta(nil), 1, 2, 3), "a", "", "b", "c"),
		fuzzkit.C("hugelen", huge, "k", "v", "k", "w"),
		fuzzkit.C("truncated", file[:12], "", "x", "y", "z"),
		fuzzkit.C("badline", []byte("G4L1\x04\x00\x00\x00abc\n"), "a-b", "1 2", "c", "\x7f"),
		fuzzkit.C("foreign", []byte("PK\x03\x04\x00\x00\x00\x00"), "x", "y", "z", "w"),
	)
	f.Fuzz(func(t *testing.T, raw []byte, k1, v1, k2, v2 string) {
		r := bytes.NewReader(raw)
		m, err := readLocalPreamble(r)
		if err == nil && (m < 0 || m > maxLocalMeta) {
			t.Fatalf("metadata length %d accepted", m)
		}
		if err == nil {
			var got map[string]string
			fuzzkit.AllocAtMost(t, 64<<10+8*uint64(m), "readLocalMeta", func() { got, err = readLocalMeta(r, m) })
			if err == nil {
				back, err := readLocalMeta(bytes.NewReader(encodeLocalMeta(got)), int64(len(encodeLocalMeta(got))-localPreLen))
				if err != nil || !reflect.DeepEqual(back, got) && !(len(back) == 0 && len(got) == 0) {
					t.Fatalf("accepted metadata %q does not survive encode/decode: %q, %v", got, back, err)
				}
			}
		}
		if err != nil && !errors.Is(err, errBadLocalFile) {
			t.Fatalf("error %v does not wrap errBadLocalFile", err)
		}

		want := map[string]string{k1: v1, k2: v2}
		if ValidateMeta(want) != nil {
			return
		}
		enc := append(encodeLocalMeta(want), raw...)
		rd := bytes.NewReader(enc)
		m, err = readLocalPreamble(rd)
		if err != nil {
			t.Fatalf("preamble of valid metadata %q: %v", want, err)
		}
		got, err := readLocalMeta(rd, m)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("decode(encode(%q)) = %q, %v", want, got, err)
		}
		if !bytes.Equal(enc[localPreLen+m:], raw) {
			t.Fatal("the object's bytes do not start right after the metadata")
		}
	})
}
