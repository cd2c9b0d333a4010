package workloads

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
)

// KeyHash returns the 64-bit FNV-1a hash of an object key; it seeds the
// object's byte pattern.
func KeyHash(key string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(key))
	return h.Sum64()
}

// word returns the pattern's 8-byte word number w (bytes 8w … 8w+7) of
// generation gen of the object whose key hashes to kh. The mixer is
// SplitMix64's finaliser (Steele, Lea, Flood: "Fast splittable pseudorandom
// number generators", OOPSLA 2014).
func word(kh, gen, w uint64) uint64 {
	z := kh ^ (gen * 0x9e3779b97f4a7c15) ^ ((w + 1) * 0xd1b54a32d192ed03)
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// patternByte returns the pattern byte at byte offset off.
func patternByte(kh, gen uint64, off int64) byte {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], word(kh, gen, uint64(off)/8))
	return b[off%8]
}

// Fill writes into buf the pattern bytes of object key, generation gen, for
// byte offsets off … off+len(buf)-1 of the object. off may be any value ≥ 0.
func Fill(buf []byte, key string, gen uint64, off int64) {
	fillHash(buf, KeyHash(key), gen, off)
}

// fillHash is Fill for a hashed key. It is exempt from race instrumentation
// (a pure loop over a caller-owned buffer) to keep -race runs fast.
//
//go:norace
func fillHash(buf []byte, kh, gen uint64, off int64) {
	i := 0
	for ; i < len(buf) && (off+int64(i))%8 != 0; i++ {
		buf[i] = patternByte(kh, gen, off+int64(i))
	}
	w := uint64(off+int64(i)) / 8
	for ; i+8 <= len(buf); i += 8 {
		binary.LittleEndian.PutUint64(buf[i:], word(kh, gen, w))
		w++
	}
	for ; i < len(buf); i++ {
		buf[i] = patternByte(kh, gen, off+int64(i))
	}
}

// Verify compares buf with the pattern of object key, generation gen, at
// object byte offset off. It returns the index in buf of the first wrong
// byte, or -1 when every byte matches.
func Verify(buf []byte, key string, gen uint64, off int64) int {
	return verifyHash(buf, KeyHash(key), gen, off)
}

// verifyHash is Verify for a hashed key; exempt from race instrumentation
// like fillHash.
//
//go:norace
func verifyHash(buf []byte, kh, gen uint64, off int64) int {
	i := 0
	for ; i < len(buf) && (off+int64(i))%8 != 0; i++ {
		if buf[i] != patternByte(kh, gen, off+int64(i)) {
			return i
		}
	}
	w := uint64(off+int64(i)) / 8
	for ; i+8 <= len(buf); i += 8 {
		if binary.LittleEndian.Uint64(buf[i:]) != word(kh, gen, w) {
			for j := i; ; j++ { // locate the byte inside the word
				if buf[j] != patternByte(kh, gen, off+int64(j)) {
					return j
				}
			}
		}
		w++
	}
	for ; i < len(buf); i++ {
		if buf[i] != patternByte(kh, gen, off+int64(i)) {
			return i
		}
	}
	return -1
}

// zeroIndex returns the index of the first non-zero byte of buf, or -1.
//
//go:norace
func zeroIndex(buf []byte) int {
	for i, c := range buf {
		if c != 0 {
			return i
		}
	}
	return -1
}

// matchGen finds which of gens buf (object bytes from offset off) belongs to
// entirely. It returns the generation and -1, or, when none matches
// entirely, 0 and a description of what the bytes are (for messages).
func matchGen(buf []byte, key string, off int64, gens []uint64) (uint64, string) {
	kh := KeyHash(key)
	best, bestAt := uint64(0), -2
	for _, g := range gens {
		at := verifyHash(buf, kh, g, off)
		if at < 0 {
			return g, ""
		}
		if at > bestAt {
			best, bestAt = g, at
		}
	}
	return 0, describe(buf, kh, off, gens, best, bestAt)
}

// describe explains a mismatch: where the bytes stop matching the closest
// generation and what they are there (zeros, another generation, unknown).
func describe(buf []byte, kh uint64, off int64, gens []uint64, best uint64, bestAt int) string {
	if len(gens) == 0 {
		return "no generation recorded for this key"
	}
	if zeroIndex(buf) < 0 {
		return fmt.Sprintf("all %d bytes are zero", len(buf))
	}
	at := bestAt
	what := "unknown bytes"
	if at >= 0 && at+8 <= len(buf) {
		for _, g := range gens {
			if g != best && verifyHash(buf[at:at+8], kh, g, off+int64(at)) < 0 {
				what = fmt.Sprintf("bytes of generation %d (torn object)", g)
			}
		}
		if zeroIndex(buf[at:at+8]) < 0 {
			what = "zeros"
		}
	}
	return fmt.Sprintf("bytes match generation %d only up to object offset %d; there: %s (candidates %v)",
		best, off+int64(at), what, gens)
}
