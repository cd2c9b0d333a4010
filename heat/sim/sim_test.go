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
