package sim

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/ctxmem/ctxmemd/traces"
)

// lines builds a trace of one request per block list, one second apart.
func lines(reqs ...[]uint64) string {
	var b strings.Builder
	for i, r := range reqs {
		ids := make([]string, len(r))
		for j, id := range r {
			ids[j] = fmt.Sprint(id)
		}
		fmt.Fprintf(&b, "{\"timestamp\": %d, \"input_length\": 1, \"hash_ids\": [%s]}\n", i*1000, strings.Join(ids, ", "))
	}
	return b.String()
}

func TestLoad(t *testing.T) {
	tr, err := Load(strings.NewReader("{\"timestamp\": 5, \"hash_ids\": [1, 2]}\n\n  \n{\"hash_ids\": [3]}"))
	if err != nil {
		t.Fatal(err)
	}
	if tr.Requests != 2 || fmt.Sprint(tr.Blocks) != "[1 2 3]" || fmt.Sprint(tr.Millis) != "[5 5 5]" {
		t.Fatalf("got %+v", tr)
	}
	if tr.Distinct() != 3 {
		t.Fatalf("Distinct = %d", tr.Distinct())
	}
	// The same lines gzip-compressed (recognised by the magic bytes).
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write([]byte("{\"timestamp\": 5, \"hash_ids\": [1, 2]}\n\n  \n{\"hash_ids\": [3]}"))
	zw.Close()
	if tz, err := Load(&z); err != nil || fmt.Sprint(tz.Blocks) != "[1 2 3]" || fmt.Sprint(tz.Millis) != "[5 5 5]" {
		t.Fatalf("gzip: got %+v, %v", tz, err)
	}
	for _, bad := range []string{"{\"hash_ids\": [1]}\nnot json\n", "{\"timestamp\": 1}\n"} {
		if _, err := Load(strings.NewReader(bad)); !errors.Is(err, ErrTrace) {
			t.Errorf("Load(%q) err = %v, want ErrTrace", bad, err)
		}
	}
	if _, err := Load(strings.NewReader("{\"hash_ids\": [1]}\nnot json\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("error does not name the line: %v", err)
	}
}

// TestTextbook checks LRU and OPT on Belady's classic example: references
// 1 2 3 4 1 2 5 1 2 3 4 5 with 3 frames give LRU 10 faults and OPT 7.
func TestTextbook(t *testing.T) {
	trace := lines([]uint64{1, 2, 3, 4, 1, 2, 5, 1, 2, 3, 4, 5})
	res, err := Run(strings.NewReader(trace), []int{3}, []string{"lru", "opt", "policy:order=lru,admit=off"})
	if err != nil {
		t.Fatal(err)
	}
	want := []int64{2, 5, 2}
	for i, r := range res {
		if r.Hits != want[i] || r.Refs != 12 || r.Capacity != 3 {
			t.Errorf("%s: %+v, want %d hits", r.Policy, r, want[i])
		}
	}
}

// TestPoliciesOnRandomTrace: OPT is an upper bound of every policy, no
// policy beats the compulsory-miss bound, and heat.Policy in LRU order
// without admission is exactly LRU.
func TestPoliciesOnRandomTrace(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
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
	bound := int64(len(tr.Blocks) - tr.Distinct())
	specs := append([]string{"policy:order=lru,admit=off", "policy:order=decay,halflife=30s", "wtinylfu:window=0.2"}, DefaultPolicies()...)
	for _, c := range []int{10, 100, 400} {
		hits := map[string]int64{}
		for _, s := range specs {
			r, err := Simulate(tr, c, s)
			if err != nil {
				t.Fatal(err)
			}
			hits[s] = r.Hits
		}
		for s, h := range hits {
			// lru-oracle may bypass, so only the compulsory bound holds for it.
			if (s != "lru-oracle" && h > hits["opt"]) || h > bound {
				t.Errorf("cap %d: %s has %d hits, OPT %d, bound %d", c, s, h, hits["opt"], bound)
			}
			if h == 0 {
				t.Errorf("cap %d: %s has no hits", c, s)
			}
		}
		if hits["policy:order=lru,admit=off"] != hits["lru"] {
			t.Errorf("cap %d: heat.Policy LRU %d hits, reference LRU %d", c, hits["policy:order=lru,admit=off"], hits["lru"])
		}
	}
}

// TestOPTMatchesNaive compares the heap-based OPT with a direct O(n·c)
// implementation of Belady's MIN.
func TestOPTMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for trial := range 20 {
		blocks := make([]uint64, 500)
		for i := range blocks {
			blocks[i] = uint64(rng.IntN(10 + trial*5))
		}
		for _, c := range []int{1, 3, 8, 20} {
			var naive int64
			resident := map[uint64]bool{}
			for i, b := range blocks {
				if resident[b] {
					naive++
					continue
				}
				if len(resident) >= c {
					far, farAt := uint64(0), -1
					for r := range resident {
						at := len(blocks) // never referenced again
						for j := i + 1; j < len(blocks); j++ {
							if blocks[j] == r {
								at = j
								break
							}
						}
						if at > farAt || (at == farAt && r < far) {
							far, farAt = r, at
						}
					}
					delete(resident, far)
				}
				resident[b] = true
			}
			if got := optHits(blocks, c); got != naive {
				t.Fatalf("trial %d cap %d: optHits %d, naive MIN %d", trial, c, got, naive)
			}
		}
	}
}

func TestRunErrors(t *testing.T) {
	trace := lines([]uint64{1, 2})
	for _, c := range []struct {
		caps     []int
		policies []string
	}{
		{[]int{0}, []string{"lru"}},
		{[]int{5}, []string{"nope"}},
		{[]int{5}, []string{"policy:order=fifo"}},
		{[]int{5}, []string{"policy:halflife=-1s"}},
		{[]int{5}, []string{"policy:colour=red"}},
		{[]int{5}, []string{"wtinylfu:window=2"}},
		{[]int{5}, []string{"opt:x=1"}},
		{[]int{5}, []string{"policy:admit"}},
	} {
		if _, err := Run(strings.NewReader(trace), c.caps, c.policies); !errors.Is(err, ErrPolicy) {
			t.Errorf("Run(%v, %v) err = %v, want ErrPolicy", c.caps, c.policies, err)
		}
	}
}

// loadMooncake loads the bundled Mooncake conversation trace (package
// traces), or the trace file $CTXMEM_TRACE (plain or gzip) when set.
func loadMooncake(t testing.TB) *Trace {
	if raceEnabled {
		// The replay is single-threaded; under the race detector it only
		// gets ten times slower.
		t.Skip("full-trace replay skipped under -race (single-threaded); run without -race")
	}
	p := os.Getenv("CTXMEM_TRACE")
	f, err := traces.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr, err := Load(f)
	if err != nil {
		t.Fatalf("%s: %v", traces.Name(p), err)
	}
	return tr
}

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

// BenchmarkMooncake replays the whole trace through the default policy at
// 10,000 blocks; refs/s is block references per second.
func BenchmarkMooncake(b *testing.B) {
	tr := loadMooncake(b)
	b.ResetTimer()
	for range b.N {
		if _, err := Simulate(tr, 10000, "policy"); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(tr.Blocks))*float64(b.N)/b.Elapsed().Seconds(), "refs/s")
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
