package g4

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

func TestSegmentEncoding(t *testing.T) {
	cases := map[string]string{
		"abc-DEF_0.9": "abc-DEF_0.9",
		"with space":  "with%20space",
		"100%":        "100%25",
		"a+b":         "a%2Bb",
		"é":           "%C3%A9",
		".hidden":     "%2Ehidden",
		"..":          "%2E.",
		"a.b":         "a.b",
		"x@y~":        "x%40y%7E",
	}
	for in, want := range cases {
		if got := encodeSegment(in); got != want {
			t.Errorf("encodeSegment(%q) = %q; want %q", in, got, want)
		}
		if got, ok := decodeSegment(want); !ok || got != in {
			t.Errorf("decodeSegment(%q) = %q, %v; want %q", want, got, ok, in)
		}
	}
	// Non-canonical or malformed encodings are not segments.
	for _, bad := range []string{"", "%", "%2", "%zz", "%c3%a9", "%41", ".x", "a b", "a@", "%2e"} {
		if s, ok := decodeSegment(bad); ok {
			t.Errorf("decodeSegment(%q) = %q, true; want false", bad, s)
		}
	}
	// Random byte strings round-trip and never produce unsafe characters.
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		b := make([]byte, 1+r.IntN(20))
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		enc := encodeSegment(string(b))
		if strings.ContainsAny(enc, "/@\\ \x00") || strings.HasPrefix(enc, ".") {
			t.Fatalf("encodeSegment(%q) = %q holds an unsafe character", b, enc)
		}
		if got, ok := decodeSegment(enc); !ok || got != string(b) {
			t.Fatalf("round trip of %q failed: %q %v", b, got, ok)
		}
	}
}

func TestBlockNames(t *testing.T) {
	keys := []tier.Key{
		{Namespace: "llama3", Object: 7, Gen: 1, Index: 42},
		{Namespace: "", Object: 0, Gen: 0, Index: 0},
		{Namespace: ".", Object: 1, Gen: 2, Index: 3},
		{Namespace: "..", Object: ^uint64(0), Gen: ^uint64(0), Index: ^uint32(0)},
		{Namespace: "a/b", Object: 1},
		{Namespace: "%", Object: 1},
		{Namespace: "100% é 日本", Object: 1},
		{Namespace: "bad\xffutf8", Object: 1},
	}
	if got := BlockName("blocks", keys[0]); got != "blocks/llama3/0000000000000007/0000000000000001/0000002a" {
		t.Fatalf("BlockName = %q", got)
	}
	for _, k := range keys {
		n := BlockName("p/q", k)
		if err := ValidateName(n); err != nil {
			t.Fatalf("BlockName(%v) = %q is not a valid object name: %v", k, n, err)
		}
		if !utf8.ValidString(n) {
			t.Fatalf("BlockName(%v) not UTF-8", k)
		}
		got, ok := ParseBlockName("p/q", n)
		if !ok || got != k {
			t.Fatalf("ParseBlockName(%q) = %v, %v; want %v", n, got, ok, k)
		}
		if _, ok := ParseBlockName("p", n); ok {
			t.Fatalf("ParseBlockName with another prefix accepted %q", n)
		}
	}
	for _, bad := range []string{
		"blocks/ns/0000000000000007/0000000000000001",             // too few segments
		"blocks/ns/0000000000000007/0000000000000001/0000002a/x",  // too many
		"blocks/ns/000000000000007/0000000000000001/0000002a",     // short object
		"blocks/ns/0000000000000007/0000000000000001/0000002A",    // upper case
		"blocks/ns/000000000000000g/0000000000000001/0000002a",    // not hex
		"blocks/n%2fs/0000000000000007/0000000000000001/0000002a", // non-canonical namespace
		"blocksx/ns/0000000000000007/0000000000000001/0000002a",   // other prefix
		"blocks/ns/0000000000000007/0000000000000001/+000002a",
	} {
		if k, ok := ParseBlockName("blocks", bad); ok {
			t.Errorf("ParseBlockName(%q) = %v, true; want false", bad, k)
		}
	}
}

func TestHeader(t *testing.T) {
	k := tier.Key{Namespace: "ns-é", Object: 0x0102030405060708, Gen: 9, Index: 77}
	data := []byte("payload bytes")
	h := encodeHeader(k, data)
	if len(h) != headerLen(k.Namespace) || len(h) != 64+len(k.Namespace) {
		t.Fatalf("header is %d bytes", len(h))
	}
	got, err := decodeHeader(h, k)
	if err != nil || got.key != k || int(got.length) != len(data) || got.crc != tier.Checksum(data) {
		t.Fatalf("decodeHeader = %+v, %v", got, err)
	}
	// Any single bit flip anywhere in the header is detected.
	for i := range h {
		for bit := range 8 {
			b := append([]byte(nil), h...)
			b[i] ^= 1 << bit
			if _, err := decodeHeader(b, k); !errors.Is(err, tier.ErrCorrupt) || !isHeaderErr(err) {
				t.Fatalf("flip of byte %d bit %d: decodeHeader = %v; want a header error", i, bit, err)
			}
		}
	}
	// A valid header of another key is rejected, field by field.
	for _, other := range []tier.Key{
		{Namespace: "ns-e", Object: k.Object, Gen: k.Gen, Index: k.Index},
		{Namespace: k.Namespace, Object: k.Object + 1, Gen: k.Gen, Index: k.Index},
		{Namespace: k.Namespace, Object: k.Object, Gen: k.Gen + 1, Index: k.Index},
		{Namespace: k.Namespace, Object: k.Object, Gen: k.Gen, Index: k.Index + 1},
	} {
		oh := encodeHeader(other, data)
		if len(oh) != len(h) {
			continue // a reader of k reads len(h) bytes; covered by the length check
		}
		if _, err := decodeHeader(oh, k); !isHeaderErr(err) {
			t.Fatalf("header of %v accepted for %v: %v", other, k, err)
		}
	}
	if _, err := decodeHeader(encodeHeader(tier.Key{Namespace: "ns"}, data), k); !isHeaderErr(err) {
		t.Fatalf("header with another namespace length accepted: %v", err)
	}
}

func TestLocalMetaEncoding(t *testing.T) {
	m := map[string]string{"b": "2", "a": "x=y z", "empty": ""}
	b := encodeLocalMeta(m)
	if string(b[:4]) != "G4L1" || !strings.HasPrefix(string(b[8:]), "a=x=y z\nb=2\nempty=\n") {
		t.Fatalf("encoded metadata = %q", b)
	}
}
