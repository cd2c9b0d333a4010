// Package tiertest is the conformance suite every tier.Tier implementation
// runs in one call, in the manner of rclone's fstests.Run: a tier's _test
// file builds a Harness (how to open the tier on a directory, how to corrupt
// a stored block, how to open a small one) and calls Run.
//
//	func TestConformance(t *testing.T) {
//		tiertest.Run(t, tiertest.Harness{
//			Open: func(t *testing.T, dir string) tier.Tier { ... },
//		})
//	}
//
// Every subtest works on its own fresh directory (t.TempDir) and closes the
// tiers it opens. Block contents are derived from the key, the length and a
// salt (Pattern), so a test can tell any wrong or stale byte from the right
// one without keeping copies.
package tiertest

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// Harness tells Run how to drive one tier implementation.
type Harness struct {
	// Open opens (or reopens) the tier whose persistent state lives in dir.
	// Opening the same dir again after Close must see every block written
	// before Close (restart test). Open fails the test itself on error.
	// Required.
	Open func(t *testing.T, dir string) tier.Tier

	// Corrupt flips at least one byte of the stored payload of block k
	// (the newest copy) in dir, behind the tier's back, while the tier is
	// open. nil skips the corruption test.
	Corrupt func(t *testing.T, dir string, k tier.Key) error

	// OpenSmall opens a tier on dir whose capacity is SmallCapacity bytes
	// of block payload. nil, or SmallCapacity 0, skips the capacity test.
	OpenSmall func(t *testing.T, dir string) tier.Tier
	// SmallCapacity is the capacity in bytes of tiers opened by OpenSmall.
	SmallCapacity int64
	// Reclaims says what the tier does when full: true means a Put that
	// would exceed the capacity reclaims older blocks (they then read as
	// tier.ErrNotFound) and succeeds; false means it fails with
	// tier.ErrNoSpace and every block already stored stays readable.
	Reclaims bool
	// DeleteKeepsSpace says that a Delete gives no space back by itself
	// (G3.5: a record stays in its pool extent until the whole extent is
	// reclaimed): the Capacity case then does not expect a full tier to
	// take blocks again after deletes. Only meaningful without Reclaims.
	DeleteKeepsSpace bool
	// MemoryOnly says that the tier keeps its index in memory only, so a
	// tier reopened on the same dir is empty (G3.5: a restarted host
	// imports shared files again). The Restart case then checks that a
	// reopened tier holds nothing, not even in Range or Usage, and works.
	MemoryOnly bool
}

// Run runs the conformance suite against h as subtests of t.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.Open == nil {
		t.Fatal("tiertest: Harness.Open is required")
	}
	cases := []struct {
		name string
		fn   func(*testing.T, Harness)
	}{
		{"PutGet", testPutGet},
		{"Lengths", testLengths},
		{"TooLarge", testTooLarge},
		{"RangeReads", testRangeReads},
		{"ShortLastBlock", testShortLastBlock},
		{"Overwrite", testOverwrite},
		{"Generations", testGenerations},
		{"Delete", testDelete},
		{"Stat", testStat},
		{"RangeList", testRangeList},
		{"Usage", testUsage},
		{"Capacity", testCapacity},
		{"Corruption", testCorruption},
		{"Restart", testRestart},
		{"Concurrency", testConcurrency},
		{"Closed", testClosed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.fn(t, h) })
	}
}

// Pattern returns n bytes derived from k and salt: every byte depends on
// the key, the salt and its own offset, so bytes of another key, another
// salt (version) or another offset never match. Deterministic.
func Pattern(k tier.Key, n int, salt uint64) []byte {
	p := make([]byte, n)
	FillPattern(p, k, salt)
	return p
}

// FillPattern fills p with the bytes Pattern(k, len(p), salt) would return.
func FillPattern(p []byte, k tier.Key, salt uint64) {
	fillPatternAt(p, k, salt, 0)
}

// fillPatternAt fills p with Pattern bytes starting at block offset off.
func fillPatternAt(p []byte, k tier.Key, salt uint64, off int64) {
	seed := keySeed(k) ^ (salt * 0x9e3779b97f4a7c15)
	// One 64-bit mix per 8-byte word (splitmix64 finaliser, public domain,
	// Steele et al. 2014), so offsets and seeds scatter well.
	var w [8]byte
	for i := 0; i < len(p); {
		pos := off + int64(i)
		word := uint64(pos / 8)
		binary.LittleEndian.PutUint64(w[:], mix64(seed+word*0xbf58476d1ce4e5b9))
		j := int(pos % 8)
		i += copy(p[i:], w[j:])
	}
}

// PatternAt returns the n bytes of Pattern(k, _, salt) starting at block
// offset off.
func PatternAt(k tier.Key, salt uint64, off int64, n int) []byte {
	p := make([]byte, n)
	fillPatternAt(p, k, salt, off)
	return p
}

func keySeed(k tier.Key) uint64 {
	h := uint64(14695981039346656037) // FNV-1a 64 offset basis
	for i := 0; i < len(k.Namespace); i++ {
		h ^= uint64(k.Namespace[i])
		h *= 1099511628211
	}
	h = mix64(h ^ k.Object)
	h = mix64(h ^ uint64(k.Index))
	return mix64(h ^ k.Gen)
}

func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// open opens h on a fresh directory and closes it when the test ends.
func open(t *testing.T, h Harness) (tier.Tier, string) {
	t.Helper()
	dir := t.TempDir()
	tr := h.Open(t, dir)
	t.Cleanup(func() { _ = tr.Close() })
	return tr, dir
}

// key returns a test key in namespace "ns".
func key(obj uint64, idx uint32, gen uint64) tier.Key {
	return tier.Key{Namespace: "ns", Object: obj, Index: idx, Gen: gen}
}

func mustPut(t testing.TB, tr tier.Tier, k tier.Key, data []byte) {
	t.Helper()
	if err := tr.Put(context.Background(), k, data); err != nil {
		t.Fatalf("Put(%v, %d bytes): %v", k, len(data), err)
	}
}

// checkBlock reads the whole block k and compares it with want.
func checkBlock(t testing.TB, tr tier.Tier, k tier.Key, want []byte) {
	t.Helper()
	got := make([]byte, len(want)+17) // room past the end: the count must be short
	n, err := tr.Get(context.Background(), k, got, 0)
	if err != nil {
		t.Fatalf("Get(%v): %v", k, err)
	}
	if n != len(want) {
		t.Fatalf("Get(%v) = %d bytes, want %d", k, n, len(want))
	}
	if i := firstDiff(got[:n], want); i >= 0 {
		t.Fatalf("Get(%v): byte %d = %#x, want %#x", k, i, got[i], want[i])
	}
}

func expectNotFound(t testing.TB, tr tier.Tier, k tier.Key) {
	t.Helper()
	p := make([]byte, 16)
	if n, err := tr.Get(context.Background(), k, p, 0); !errors.Is(err, tier.ErrNotFound) {
		t.Fatalf("Get(%v) = %d, %v; want ErrNotFound", k, n, err)
	}
	if _, err := tr.Stat(context.Background(), k); !errors.Is(err, tier.ErrNotFound) {
		t.Fatalf("Stat(%v) = %v; want ErrNotFound", k, err)
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// list returns the tier's Range listing as a map.
func list(t testing.TB, tr tier.Tier) map[tier.Key]int64 {
	t.Helper()
	m := map[tier.Key]int64{}
	err := tr.Range(context.Background(), func(k tier.Key, n int64) bool {
		if _, dup := m[k]; dup {
			t.Errorf("Range listed %v twice", k)
		}
		m[k] = n
		return true
	})
	if err != nil {
		t.Fatalf("Range: %v", err)
	}
	return m
}
