package sim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// zipfTrace is a random trace of 800 requests of 1 to 12 Zipf-distributed
// blocks out of 3,000.
func zipfTrace(t *testing.T, seed uint64) *Trace {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed+1))
	z := rand.NewZipf(rng, 1.2, 4, 3000)
	var reqs [][]uint64
	for range 800 {
		r := make([]uint64, 1+rng.IntN(12))
		for j := range r {
			r[j] = z.Uint64()
		}
		reqs = append(reqs, r)
	}
	tr, err := Load(strings.NewReader(lines(reqs...)))
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func tierSpecs() []string {
	return append([]string{"policy:order=lru,admit=off", "policy:order=decay,halflife=30s", "policy:reuse=0",
		"wtinylfu:window=0.2"}, DefaultPolicies()...)
}

// TestTiersWithoutG3MatchSimulate: with no G3, SimulateTiers is Simulate,
// for every policy (the online policies' lookup+insert split and the
// offline tiers reproduce the single-cache replay exactly).
func TestTiersWithoutG3MatchSimulate(t *testing.T) {
	tr := zipfTrace(t, 31)
	for _, c := range []int{1, 10, 100, 400} {
		for _, p := range tierSpecs() {
			one, err := Simulate(tr, c, p)
			if err != nil {
				t.Fatal(err)
			}
			two, err := SimulateTiers(tr, c, 0, p)
			if err != nil {
				t.Fatal(err)
			}
			if two.G2Hits != one.Hits || two.G3Hits != 0 || two.G3Writes != 0 || two.Refs != one.Refs {
				t.Errorf("cap %d %s: SimulateTiers %+v, Simulate %d hits", c, p, two, one.Hits)
			}
		}
	}
}

// TestTiersPolicyIsSimulateTwoTier: for heat.Policy, SimulateTiers is the
// existing two-Policy model, reuse threshold included.
func TestTiersPolicyIsSimulateTwoTier(t *testing.T) {
	tr := zipfTrace(t, 41)
	for _, g := range [][2]int{{10, 40}, {50, 200}, {200, 100}} {
		for _, m := range []int{0, 1, 2, 3} {
			want, err := SimulateTwoTier(tr, g[0], g[1], m)
			if err != nil {
				t.Fatal(err)
			}
			spec := fmt.Sprintf("policy:reuse=%d", m)
			if m == 1 {
				spec = "policy" // the default threshold
			}
			got, err := SimulateTiers(tr, g[0], g[1], spec)
			if err != nil {
				t.Fatal(err)
			}
			if got.G2Hits != want.G2Hits || got.G3Hits != want.G3Hits || got.G3Writes != want.G3Writes {
				t.Errorf("G2 %d G3 %d %s: %+v, SimulateTwoTier %+v", g[0], g[1], spec, got, want)
			}
		}
	}
}

// TestTiersInvariants: G2 does not depend on G3, G3 adds hits without
// beating the compulsory-miss bound, the ratios follow the counts, and
// OPT in both tiers does at least as well as OPT in G2 alone.
func TestTiersInvariants(t *testing.T) {
	tr := zipfTrace(t, 51)
	bound := int64(len(tr.Blocks) - tr.Distinct())
	for _, p := range tierSpecs() {
		alone, err := SimulateTiers(tr, 50, 0, p)
		if err != nil {
			t.Fatal(err)
		}
		r, err := SimulateTiers(tr, 50, 400, p)
		if err != nil {
			t.Fatal(err)
		}
		if r.G2Hits != alone.G2Hits {
			t.Errorf("%s: G2 hits %d with G3, %d without", p, r.G2Hits, alone.G2Hits)
		}
		if r.G3Hits == 0 || r.G3Writes == 0 {
			t.Errorf("%s: G3 unused: %+v", p, r)
		}
		if r.G2Hits+r.G3Hits > bound || r.Misses() != r.Refs-r.G2Hits-r.G3Hits || r.Misses() < 0 {
			t.Errorf("%s: %+v, compulsory bound %d hits", p, r, bound)
		}
		if r.AnyTierHitRatio() < r.G2HitRatio() || r.G2HitRatio() != float64(r.G2Hits)/float64(r.Refs) ||
			r.AnyTierHitRatio() != float64(r.G2Hits+r.G3Hits)/float64(r.Refs) {
			t.Errorf("%s: ratios %.4f %.4f for %+v", p, r.G2HitRatio(), r.AnyTierHitRatio(), r)
		}
	}
	if (TierResult{}).G2HitRatio() != 0 || (TierResult{}).AnyTierHitRatio() != 0 {
		t.Error("empty result has a ratio")
	}
}

// TestTiersByHand: LRU and OPT, G2 1 block over G3 2 blocks, on
// 1 2 3 1 2 3 (worked through in the comments).
func TestTiersByHand(t *testing.T) {
	tr, err := Load(strings.NewReader(lines([]uint64{1, 2, 3, 1, 2, 3})))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		policy         string
		g2, g3, writes int64
	}{
		// LRU: 1, 2, 3 miss, each victim written (1, 2, then 3 evicting
		// 2); 1 hits in G3; 2 misses (its victim 1 is in G3); 3 hits in
		// G3 and victim 2 is written again.
		{"lru", 0, 2, 4},
		// OPT: victims 1 and 2 written; 1 hits in G3 and victim 3
		// replaces 1 (never used again); 2 and 3 hit in G3; victim 1,
		// never used again, is not written.
		{"opt", 0, 3, 3},
	} {
		r, err := SimulateTiers(tr, 1, 2, c.policy)
		if err != nil {
			t.Fatal(err)
		}
		if r.Refs != 6 || r.G2Hits != c.g2 || r.G3Hits != c.g3 || r.G3Writes != c.writes {
			t.Errorf("%s: %+v, want G2 %d G3 %d writes %d", c.policy, r, c.g2, c.g3, c.writes)
		}
	}
}

func TestTiersErrors(t *testing.T) {
	tr := zipfTrace(t, 61)
	for _, c := range []struct {
		g2, g3 int
		policy string
	}{
		{0, 10, "lru"}, {10, -1, "lru"}, {10, 10, "nope"}, {10, 10, "opt:x=1"},
		{10, 10, "policy:reuse=-1"}, {10, 10, "policy:reuse=x"}, {10, 10, "wtinylfu:window=2"},
	} {
		if _, err := SimulateTiers(tr, c.g2, c.g3, c.policy); !errors.Is(err, ErrPolicy) {
			t.Errorf("SimulateTiers(%d, %d, %q) err = %v, want ErrPolicy", c.g2, c.g3, c.policy, err)
		}
	}
	for _, p := range tierSpecs() {
		if err := CheckPolicy(p); err != nil {
			t.Errorf("CheckPolicy(%q) = %v", p, err)
		}
	}
	if err := CheckPolicy("lru:x=1"); !errors.Is(err, ErrPolicy) {
		t.Errorf("CheckPolicy(lru:x=1) = %v", err)
	}
}

// TestTiersHugeCapacity: a tier larger than the trace behaves as one that
// holds exactly its distinct blocks (and does not allocate for its nominal
// size).
func TestTiersHugeCapacity(t *testing.T) {
	tr := zipfTrace(t, 71)
	n := tr.Distinct()
	for _, p := range tierSpecs() {
		for _, g := range [][2]int{{1 << 40, 0}, {1 << 40, 1 << 40}, {20, 1 << 40}} {
			huge, err := SimulateTiers(tr, g[0], g[1], p)
			if err != nil {
				t.Fatal(err)
			}
			want, err := SimulateTiers(tr, min(g[0], n), min(g[1], n), p)
			if err != nil {
				t.Fatal(err)
			}
			if huge.G2 != g[0] || huge.G3 != g[1] || huge.G2Hits != want.G2Hits || huge.G3Hits != want.G3Hits ||
				huge.G3Writes != want.G3Writes {
				t.Errorf("%s %v: %+v, at the trace's distinct blocks %+v", p, g, huge, want)
			}
		}
	}
}
