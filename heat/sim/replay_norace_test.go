//go:build !race

package sim

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// The replays of the bundled trace and of the synthetic traces are
// single-threaded and only get ten times slower under the race detector,
// so they are built only without it: make test runs this file in its plain
// pass (no test here appears as a SKIP in the -race pass).

// TestMooncakeTrace replays the Mooncake conversation trace at 5,000,
// 10,000 and 20,000 blocks through every default policy and prints the
// block hit ratios (go test -v). LRU and OPT must reproduce the published
// reference values, which validates the simulator; the default heat.Policy
// must beat LRU and LRU-2 at every size.
func TestMooncakeTrace(t *testing.T) {
	tr := loadMooncake(t)
	if tr.Requests != 12031 || len(tr.Blocks) != 288500 || tr.Distinct() != 182790 {
		t.Fatalf("unexpected trace: %d requests, %d refs, %d distinct", tr.Requests, len(tr.Blocks), tr.Distinct())
	}
	caps := DefaultCapacities()
	ref := map[string][]float64{
		"lru": {0.110, 0.211, 0.288},
		"opt": {0.341, 0.366, 0.366},
	}
	got := map[string][]float64{}
	var b strings.Builder
	fmt.Fprintf(&b, "%-20s", "policy \\ blocks")
	for _, c := range caps {
		fmt.Fprintf(&b, " %8d", c)
	}
	b.WriteString("\n")
	for _, p := range DefaultPolicies() {
		fmt.Fprintf(&b, "%-20s", p)
		for i, c := range caps {
			r, err := Simulate(tr, c, p)
			if err != nil {
				t.Fatal(err)
			}
			got[p] = append(got[p], r.HitRatio)
			fmt.Fprintf(&b, " %8.4f", r.HitRatio)
			if want, ok := ref[p]; ok && (r.HitRatio < want[i]-0.001 || r.HitRatio > want[i]+0.001) {
				t.Errorf("%s at %d blocks: %.4f, reference %.3f", p, c, r.HitRatio, want[i])
			}
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "%-20s", "policy / OPT")
	for i := range caps {
		fmt.Fprintf(&b, " %8.3f", got["policy"][i]/got["opt"][i])
	}
	t.Logf("block hit ratio, %d requests, %d block references:\n%s", tr.Requests, len(tr.Blocks), b.String())
	for i, c := range caps {
		if got["policy"][i] <= got["lru"][i] || got["policy"][i] <= got["lru2"][i] {
			t.Errorf("at %d blocks the default policy (%.4f) does not beat LRU (%.4f) and LRU-2 (%.4f)",
				c, got["policy"][i], got["lru"][i], got["lru2"][i])
		}
	}
}

// TestTwoTierMooncake: G2 hits do not depend on G3, G3 adds hits, and a
// stricter reuse threshold writes less to G3 and hits less in it.
func TestTwoTierMooncake(t *testing.T) {
	tr := loadMooncake(t)
	single, err := Simulate(tr, 5000, "policy")
	if err != nil {
		t.Fatal(err)
	}
	var prev TwoTierResult
	for i, m := range []int{0, 1, 2, 3} {
		r, err := SimulateTwoTier(tr, 5000, 20000, m)
		if err != nil {
			t.Fatal(err)
		}
		n := float64(r.Refs)
		t.Logf("G2 5000 + G3 20000, reuse threshold %d: G2 %.4f, G3 %.4f, total %.4f, G3 writes/ref %.3f",
			m, float64(r.G2Hits)/n, float64(r.G3Hits)/n, float64(r.G2Hits+r.G3Hits)/n, float64(r.G3Writes)/n)
		if r.G2Hits != single.Hits {
			t.Errorf("threshold %d: G2 hits %d, single-tier policy %d", m, r.G2Hits, single.Hits)
		}
		if r.G3Hits == 0 || r.G3Writes == 0 {
			t.Errorf("threshold %d: G3 unused: %+v", m, r)
		}
		if i > 0 && (r.G3Writes >= prev.G3Writes || r.G3Hits > prev.G3Hits) {
			t.Errorf("threshold %d: writes %d hits %d, threshold %d: writes %d hits %d",
				m, r.G3Writes, r.G3Hits, prev.ReuseMinCount, prev.G3Writes, prev.G3Hits)
		}
		prev = r
	}
	if _, err := SimulateTwoTier(tr, 0, 10, 1); !errors.Is(err, ErrPolicy) {
		t.Errorf("zero capacity: %v", err)
	}
}

// TestTiersMooncake: on the Mooncake trace, G2 5,000 over G3 20,000
// blocks, SimulateTiers reproduces SimulateTwoTier for the default policy,
// and G3 adds hits for every default policy (go test -v prints them).
func TestTiersMooncake(t *testing.T) {
	tr := loadMooncake(t)
	want, err := SimulateTwoTier(tr, 5000, 20000, 1)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-20s %14s %17s %10s\n", "policy", "served from G2", "found in any tier", "G3 writes")
	for _, p := range DefaultPolicies() {
		r, err := SimulateTiers(tr, 5000, 20000, p)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%-20s %14.4f %17.4f %10d\n", p, r.G2HitRatio(), r.AnyTierHitRatio(), r.G3Writes)
		if p == "policy" && (r.G2Hits != want.G2Hits || r.G3Hits != want.G3Hits || r.G3Writes != want.G3Writes) {
			t.Errorf("policy: %+v, SimulateTwoTier %+v", r, want)
		}
		if r.G3Hits == 0 {
			t.Errorf("%s: no G3 hits", p)
		}
	}
	t.Logf("G2 5000 + G3 20000 blocks, %d references:\n%s", len(tr.Blocks), b.String())
}

// TestAdaptiveRobust is the robustness property: on every synthetic shape,
// at 1%, 5%, 20% and 50% of the distinct blocks, the adaptive policy's hit
// ratio is at least max(LRU, ARC) - robustTolerance. Known exceptions
// against ARC, where it is only required to match LRU (see the log): "mix"
// (the workload changes phase under the policy; ARC is 0.011 ahead at 20%)
// and "zipf" (0.0051 behind ARC at 20%, as the decay order itself).
func TestAdaptiveRobust(t *testing.T) {
	var b strings.Builder
	fmt.Fprintf(&b, "%-8s %6s %6s  %7s %7s %7s %7s\n", "shape", "cap%", "blocks", "lru", "arc", "policy", "adapt")
	for _, shape := range SyntheticShapes() {
		tr, err := Synthetic(shape, 1)
		if err != nil {
			t.Fatal(err)
		}
		d := tr.Distinct()
		for _, pct := range []int{1, 5, 20, 50} {
			c := max(d*pct/100, 1)
			hr := map[string]float64{}
			for _, p := range []string{"lru", "arc", "policy", "adaptive"} {
				r, err := Simulate(tr, c, p)
				if err != nil {
					t.Fatal(err)
				}
				hr[p] = r.HitRatio
			}
			fmt.Fprintf(&b, "%-8s %5d%% %6d  %7.4f %7.4f %7.4f %7.4f\n", shape, pct, c, hr["lru"], hr["arc"], hr["policy"], hr["adaptive"])
			floor := max(hr["lru"], hr["arc"])
			if shape == "mix" || shape == "zipf" {
				floor = hr["lru"]
			}
			if hr["adaptive"] < floor-robustTolerance {
				t.Errorf("%s at %d blocks: adaptive %.4f < floor %.4f - %.3f", shape, c, hr["adaptive"], floor, robustTolerance)
			}
		}
	}
	t.Logf("block hit ratio on synthetic traces (seed 1):\n%s", b.String())
}

// densityTolerance is how far below max(LRU, ARC) the density policy may
// fall on a synthetic shape: it picks victims from random samples, and
// its worst shortfall on seed 1 is 0.0009 (recency at 1% of the distinct
// blocks).
const densityTolerance = 0.002

// TestDensityRobust is issue 14's robustness property for the density
// and arbiter policies: on every synthetic shape, at 1%, 5% and 20% of the
// distinct blocks, each one's hit ratio is at least max(LRU, ARC) -
// densityTolerance, with no exceptions. (At 50% too, docs/tiering.md; left
// out here because the scan shape's 500,000-block caches make it slow.)
func TestDensityRobust(t *testing.T) {
	robust := []string{"density", "arbiter"}
	shapes := SyntheticShapes()
	rows := make([]string, len(shapes)) // one table block per shape
	// The shapes run in parallel (the replays are single-threaded).
	t.Run("shapes", func(t *testing.T) {
		for si, shape := range shapes {
			t.Run(shape, func(t *testing.T) {
				t.Parallel()
				tr, err := Synthetic(shape, 1)
				if err != nil {
					t.Fatal(err)
				}
				var b strings.Builder
				d := tr.Distinct()
				for _, pct := range []int{1, 5, 20} {
					c := max(d*pct/100, 1)
					hr := map[string]float64{}
					for _, p := range append([]string{"lru", "arc"}, robust...) {
						r, err := Simulate(tr, c, p)
						if err != nil {
							t.Fatal(err)
						}
						hr[p] = r.HitRatio
					}
					fmt.Fprintf(&b, "%-8s %5d%% %6d  %7.4f %7.4f", shape, pct, c, hr["lru"], hr["arc"])
					floor := max(hr["lru"], hr["arc"])
					for _, p := range robust {
						fmt.Fprintf(&b, " %8.4f", hr[p])
						if hr[p] < floor-densityTolerance {
							t.Errorf("%s at %d blocks: %s %.4f < max(LRU, ARC) %.4f - %.3f", shape, c, p, hr[p], floor, densityTolerance)
						}
					}
					b.WriteString("\n")
				}
				rows[si] = b.String()
			})
		}
	})
	var b strings.Builder
	fmt.Fprintf(&b, "%-8s %6s %6s  %7s %7s", "shape", "cap%", "blocks", "lru", "arc")
	for _, p := range robust {
		fmt.Fprintf(&b, " %8s", p)
	}
	b.WriteString("\n" + strings.Join(rows, ""))
	t.Logf("block hit ratio on synthetic traces (seed 1):\n%s", b.String())
}

// TestDensityMooncake pins the density policy's figures on the bundled
// trace (docs/tiering.md), with and without the depth feature, and the
// arbiter's: above LRU and ARC at 5,000, 10,000 and 20,000 blocks.
func TestDensityMooncake(t *testing.T) {
	tr := loadMooncake(t)
	want := map[string][]float64{
		"density":           {0.1669, 0.2350, 0.2984},
		"density:depth=off": {0.1500, 0.2282, 0.2949},
		"arbiter":           {0.1711, 0.2345, 0.3032},
	}
	for p, w := range want {
		for i, c := range DefaultCapacities() {
			r, err := Simulate(tr, c, p)
			if err != nil {
				t.Fatal(err)
			}
			if r.HitRatio < w[i]-0.001 || r.HitRatio > w[i]+0.001 {
				t.Errorf("%s at %d blocks: %.4f, documented %.4f", p, c, r.HitRatio, w[i])
			}
			for _, other := range []string{"lru", "arc"} {
				o, err := Simulate(tr, c, other)
				if err != nil {
					t.Fatal(err)
				}
				if r.HitRatio <= o.HitRatio {
					t.Errorf("%s at %d blocks: %.4f, %s %.4f", p, c, r.HitRatio, other, o.HitRatio)
				}
			}
		}
	}
}
