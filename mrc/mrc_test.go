package mrc

import (
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/ctxmem/ctxmemd/heat/sim"
	"github.com/ctxmem/ctxmemd/traces"
)

// exactDistances returns the LRU stack distance of every reference of
// blocks (-1 for a first reference), by brute force over a list.
func exactHits(blocks []uint64, c int) float64 {
	var stack []uint64
	hits := 0
	for _, b := range blocks {
		i := len(stack) - 1
		for ; i >= 0 && stack[i] != b; i-- {
		}
		if i >= 0 {
			if len(stack)-1-i < c {
				hits++
			}
			stack = append(stack[:i], stack[i+1:]...)
		}
		stack = append(stack, b)
	}
	return float64(hits) / float64(len(blocks))
}

// TestExactSmall: at rate 1 the curve is exact LRU at bucket edges.
func TestExactSmall(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var blocks []uint64
	for range 5000 {
		blocks = append(blocks, uint64(r.IntN(300)))
	}
	tr := New(Config{Rate: 1, MaxKeys: -1})
	for _, b := range blocks {
		tr.Observe(Hash64(b))
	}
	c := tr.Snapshot()
	for _, e := range c.Edges(BucketsPerOctave) {
		if e != math.Trunc(e) {
			continue // the edge splits integer distances: interpolation
		}
		want := exactHits(blocks, int(e))
		if got := c.HitRatio(e); math.Abs(got-want) > 1e-9 {
			t.Errorf("capacity %v: %v, want %v", e, got, want)
		}
	}
	if c.Keys != 300 || c.Refs != 5000 {
		t.Errorf("keys %d refs %d", c.Keys, c.Refs)
	}
}

// TestCancel: an Observe followed by Cancel leaves the curve as it was.
func TestCancel(t *testing.T) {
	a, b := New(Config{Rate: 1, MaxKeys: -1}), New(Config{Rate: 1, MaxKeys: -1})
	for i := range 2000 {
		k := Hash64(uint64(i % 97))
		a.Observe(k)
		b.Observe(k)
		if i%7 == 0 { // a probe: observed then cancelled
			p := Hash64(uint64(1000 + i%13))
			a.Observe(p)
			a.Cancel(p)
		}
	}
	ca, cb := a.Snapshot(), b.Snapshot()
	for _, e := range []float64{1, 10, 50, 96, 97, 200} {
		if ga, gb := ca.HitRatio(e), cb.HitRatio(e); math.Abs(ga-gb) > 1e-9 {
			t.Errorf("capacity %v: %v with cancelled probes, %v without", e, ga, gb)
		}
	}
	if ca.Refs != cb.Refs {
		t.Errorf("refs %d vs %d", ca.Refs, cb.Refs)
	}
}

// TestBounded: the fixed-size variant never tracks more than MaxKeys.
func TestBounded(t *testing.T) {
	tr := New(Config{MaxKeys: 100})
	for i := range 100000 {
		tr.Observe(Hash64(uint64(i)))
		if len(tr.keys) > 100 {
			t.Fatalf("%d keys tracked", len(tr.keys))
		}
	}
	c := tr.Snapshot()
	if c.Rate >= 0.01 || c.Keys != 100 || c.HitRatio(1e9) > 1e-9 {
		t.Errorf("rate %v keys %d hit %v", c.Rate, c.Keys, c.HitRatio(1e9))
	}
}

func TestConcurrent(t *testing.T) {
	s := NewSet(Config{MaxKeys: 256})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 5000 {
				s.Observe([]string{"a", "b"}[g%2], HashName(uint64(g), string(rune('a'+i%500))))
			}
		}()
	}
	wg.Wait()
	tot, nss := s.Snapshot()
	if tot.Refs != 20000 || len(nss) != 2 || nss[0].Refs != 10000 {
		t.Errorf("refs %d, %d namespaces", tot.Refs, len(nss))
	}
}

// Validation capacities (blocks).
var validationCaps = []int{1000, 5000, 10000, 20000, 50000, 100000}

// TestBundledTrace validates SHARDS against heat/sim's exact LRU on the
// whole bundled Mooncake trace (288,500 block references, 182,790
// blocks), under 8 hash salts (the sample is the salt's choice of keys):
// exact (rate 1) within 0.005 (the log buckets' interpolation),
// fixed-size 8192 keys (the daemon's default) within 0.02 under every
// salt. Fixed-rate 0.01 does not meet 0.02 on this trace (mean 0.030,
// worst 0.064 over the salts: about 1,800 sampled keys, and one block,
// the shared system prompt, is 4.2% of all references); it is held to
// 0.05 on average (docs/curves.md).
func TestBundledTrace(t *testing.T) {
	tr, err := sim.Load(traces.Bundled())
	if err != nil {
		t.Fatal(err)
	}
	exact := make([]float64, len(validationCaps))
	for i, c := range validationCaps {
		r, err := sim.Simulate(tr, c, "lru")
		if err != nil {
			t.Fatal(err)
		}
		exact[i] = r.HitRatio
	}
	salts := 8
	if testing.Short() {
		salts = 2
	}
	for _, v := range []struct {
		name      string
		cfg       Config
		max, mean float64
	}{
		{"exact", Config{Rate: 1, MaxKeys: -1}, 0.005, 0.005},
		{"fixed-size 8192", Config{Rate: 1, MaxKeys: 8192}, 0.02, 0.02},
		{"rate 0.01", Config{Rate: 0.01, MaxKeys: -1}, 0.1, 0.05},
	} {
		var sum float64
		n := salts
		if v.cfg.Rate == 1 && v.cfg.MaxKeys < 0 {
			n = 1 // the salt changes nothing
		}
		for salt := range uint64(n) {
			m := New(v.cfg)
			for _, b := range tr.Blocks {
				m.Observe(Hash64(b ^ salt*0x9e3779b97f4a7c15))
			}
			c := m.Snapshot()
			worst := 0.0
			for i, cp := range validationCaps {
				got := c.HitRatio(float64(cp))
				worst = max(worst, math.Abs(got-exact[i]))
				if salt == 0 {
					t.Logf("%-16s capacity %6d: SHARDS %.4f exact LRU %.4f (%+.4f)", v.name, cp, got, exact[i], got-exact[i])
				}
			}
			t.Logf("%-16s salt %d: refs %d, rate %.5f, keys %d, memory %d bytes: max |error| %.4f",
				v.name, salt, c.Refs, c.Rate, c.Keys, c.MemoryBytes, worst)
			if worst > v.max {
				t.Errorf("%s salt %d: max |error| %.4f > %v", v.name, salt, worst, v.max)
			}
			sum += worst
		}
		if mean := sum / float64(n); mean > v.mean {
			t.Errorf("%s: mean max |error| %.4f > %v", v.name, mean, v.mean)
		} else {
			t.Logf("%-16s mean over %d salts of max |error|: %.4f", v.name, n, mean)
		}
	}
}
