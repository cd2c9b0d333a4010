package sim

import (
	"slices"
	"testing"
)

func TestSyntheticDeterministic(t *testing.T) {
	for _, s := range SyntheticShapes() {
		a, err := Synthetic(s, 7)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := ParseSynthetic(s + ",7")
		c, _ := Synthetic(s, 8)
		if !slices.Equal(a.Blocks, b.Blocks) || !slices.Equal(a.Millis, b.Millis) || slices.Equal(a.Blocks, c.Blocks) {
			t.Errorf("%s: not deterministic in the seed", s)
		}
		if a.Requests == 0 || len(a.Blocks) != len(a.Depth) || a.Distinct() < 1000 {
			t.Errorf("%s: %d requests, %d refs, %d depths, %d distinct", s, a.Requests, len(a.Blocks), len(a.Depth), a.Distinct())
		}
	}
	for _, bad := range []string{"nope", "zipf,x", ""} {
		if _, err := ParseSynthetic(bad); err == nil {
			t.Errorf("ParseSynthetic(%q) succeeded", bad)
		}
	}
}

// robustTolerance is how far below max(LRU, ARC) the adaptive policy may
// fall: its shadows sample 1/8 of the keys, and two runs of the same
// policy on seeds 1 and 2 of a shape differ by about that much.
const robustTolerance = 0.005
