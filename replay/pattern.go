package replay

import "encoding/binary"

// The block pattern is the splitmix64 output stream (Steele, Lea & Flood,
// "Fast Splittable Pseudorandom Number Generators", OOPSLA 2014; constants
// as in Vigna's public-domain splitmix64.c) seeded from the block id, stored
// little-endian eight bytes at a time. Generating and checking it costs a few
// multiplies per 8 bytes, so a 256 KiB block verifies at several GB/s.

const (
	golden = 0x9E3779B97F4A7C15
	mixA   = 0xBF58476D1CE4E5B9
	mixB   = 0x94D049BB133111EB
)

// mix64 is the splitmix64 finalizer, a bijection on uint64.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * mixA
	z = (z ^ (z >> 27)) * mixB
	return z ^ (z >> 31)
}

// seed derives the stream's starting state from a block id.
func seed(id int64) uint64 { return mix64(uint64(id) ^ 0x6374786d656d6421) } // "ctxmemd!"

// Fill writes the pattern of block id into p (any length).
func Fill(id int64, p []byte) {
	s := seed(id)
	i := 0
	for ; i+8 <= len(p); i += 8 {
		s += golden
		binary.LittleEndian.PutUint64(p[i:], mix64(s))
	}
	if i < len(p) {
		s += golden
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], mix64(s))
		copy(p[i:], w[:])
	}
}

// Verify checks p against the pattern of block id and returns the offset
// of the first wrong byte, or -1 when every byte matches.
func Verify(id int64, p []byte) int {
	s := seed(id)
	i := 0
	for ; i+8 <= len(p); i += 8 {
		s += golden
		if binary.LittleEndian.Uint64(p[i:]) != mix64(s) {
			return i + firstDiff(p[i:i+8], mix64(s))
		}
	}
	if i < len(p) {
		s += golden
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], mix64(s))
		for j := i; j < len(p); j++ {
			if p[j] != w[j-i] {
				return j
			}
		}
	}
	return -1
}

// Expected returns the pattern byte of block id at offset off (for error
// messages).
func Expected(id int64, off int) byte {
	s := seed(id) + golden*uint64(off/8+1)
	var w [8]byte
	binary.LittleEndian.PutUint64(w[:], mix64(s))
	return w[off%8]
}

func firstDiff(b []byte, want uint64) int {
	var w [8]byte
	binary.LittleEndian.PutUint64(w[:], want)
	for j := range 8 {
		if b[j] != w[j] {
			return j
		}
	}
	return 0
}
