package msg

import (
	"errors"
	"testing"
)

func TestCheckShapeRefusesInflatedLengths(t *testing.T) {
	// A Report whose "cold" array claims 2^32-1 elements in a 40-byte
	// message must be refused before the decoder allocates for it.
	bad := []byte{0x82, 0xa1, 'v', 0x01, 0xa4, 'c', 'o', 'l', 'd', 0xdd, 0xff, 0xff, 0xff, 0xff, 0x80}
	var r Report
	if err := Decode(bad, &r); !errors.Is(err, ErrMalformed) {
		t.Fatalf("inflated array: %v", err)
	}
	for name, data := range map[string][]byte{
		"str past the end":   {0xd9, 0x40, 'a'},
		"map16 too long":     {0xde, 0x10, 0x00, 0x01},
		"trailing bytes":     {0x01, 0x02},
		"never-used 0xc1":    {0xc1},
		"deep nesting":       deep(40),
		"ext32 past the end": {0xc9, 0x00, 0x00, 0x10, 0x00, 0x01},
	} {
		if err := checkShape(data); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	good, err := Encode(&Report{V: Version, Host: "h", Cold: []Object{{Namespace: "ns", Path: "p", ID: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := checkShape(good); err != nil {
		t.Fatalf("a real report refused: %v", err)
	}
}

func deep(n int) []byte {
	b := make([]byte, 0, n+1)
	for i := 0; i < n; i++ {
		b = append(b, 0x91)
	}
	return append(b, 0x01)
}
