package heat

import (
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
)

// cpuTimer reports the benchmark's CPU time per op ("cpu-ns/op", from the
// OS thread's rusage) next to wall time, which on a shared machine
// includes time spent waiting for a CPU. Call the returned func when done.
func cpuTimer(b *testing.B) func() {
	runtime.LockOSThread()
	b.ResetTimer()
	c0 := threadCPU()
	return func() {
		c := threadCPU() - c0
		b.StopTimer()
		runtime.UnlockOSThread()
		if c > 0 {
			b.ReportMetric(float64(c.Nanoseconds())/float64(b.N), "cpu-ns/op")
		}
	}
}

// blockKey has the shape of tier.Key, the key the tiering core uses.
type blockKey struct {
	Namespace string
	Object    uint64
	Index     uint32
	Gen       uint64
}

func BenchmarkTrackerTouch(b *testing.B) {
	tr, _ := NewTracker[uint64](TrackerConfig{})
	const keys = 1 << 16
	now := t0
	defer cpuTimer(b)()
	for i := range b.N {
		tr.Touch(uint64(i)&(keys-1), now.Add(time.Duration(i)))
	}
}

func BenchmarkTrackerScore(b *testing.B) {
	tr, _ := NewTracker[uint64](TrackerConfig{})
	const keys = 1 << 16
	for k := range uint64(keys) {
		tr.Touch(k, t0)
	}
	defer cpuTimer(b)()
	for i := range b.N {
		tr.Score(uint64(i)&(keys-1), t0.Add(time.Second))
	}
}

func BenchmarkLRU2Touch(b *testing.B) {
	l := NewLRU2[uint64]()
	const keys = 1 << 16
	defer cpuTimer(b)()
	for i := range b.N {
		l.Touch(uint64(i*7919)&(keys-1), t0.Add(time.Duration(i)))
	}
}

func BenchmarkSketchIncrement(b *testing.B) {
	s := NewSketch(1<<16, 0)
	defer cpuTimer(b)()
	for i := range b.N {
		s.Increment(uint64(i))
	}
}

func BenchmarkSketchEstimate(b *testing.B) {
	s := NewSketch(1<<16, 0)
	for i := range 1 << 16 {
		s.Increment(uint64(i))
	}
	defer cpuTimer(b)()
	for i := range b.N {
		s.Estimate(uint64(i))
	}
}

// benchCycle runs one placement decision per iteration, as the core does
// for a reference: Access; on a miss ShouldAdmit, Victim, Remove, Insert.
// The cache holds capacity keys; references are Zipf over 8×capacity keys.
func benchCycle[K comparable](b *testing.B, order Order, key func(uint64) K) {
	const capacity = 1 << 16
	p, err := NewPolicy[K](PolicyConfig{Capacity: capacity, Order: order})
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	z := rand.NewZipf(rng, 1.05, 1, 8*capacity-1)
	const n = 1 << 20
	ids := make([]uint64, n)
	for i := range ids {
		ids[i] = z.Uint64()
	}
	keys := make([]K, n)
	for i, id := range ids {
		keys[i] = key(id)
	}
	step := func(i int) {
		k, h := keys[i&(n-1)], Mix64(ids[i&(n-1)])
		now := t0.Add(time.Duration(i) * time.Microsecond)
		if p.Access(k, h, now) {
			return
		}
		if p.Len() >= capacity {
			if !p.ShouldAdmit(h, now) {
				return
			}
			v, _ := p.Victim()
			p.Remove(v)
		}
		p.Insert(k, h, now)
	}
	for i := range 4 * capacity { // warm up to a full cache
		step(i)
	}
	done := cpuTimer(b)
	c0 := threadCPU()
	for i := range b.N {
		step(i)
	}
	if c := threadCPU() - c0; c > 0 {
		b.ReportMetric(float64(b.N)/c.Seconds(), "decisions/cpu-s")
	}
	done()
}

func BenchmarkPolicyCycle(b *testing.B) {
	id := func(x uint64) uint64 { return x }
	b.Run("decay/uint64", func(b *testing.B) { benchCycle(b, OrderDecay, id) })
	b.Run("lru2/uint64", func(b *testing.B) { benchCycle(b, OrderLRU2, id) })
	b.Run("decay/tierkey", func(b *testing.B) {
		benchCycle(b, OrderDecay, func(x uint64) blockKey {
			return blockKey{Namespace: "llama-70b", Object: x >> 4, Index: uint32(x & 15), Gen: 1}
		})
	})
}

// BenchmarkAdaptiveDecision is one eviction decision of AdaptivePolicy as
// the core makes it on a miss with a full cache: Access (counting the
// reference and, for 1 key in 8, the shadow replay), ShouldAdmit, Victim,
// Remove and Insert, at 100,000 resident keys over a 10x larger key space.
func BenchmarkAdaptiveDecision(b *testing.B) {
	p, err := NewAdaptivePolicy[uint64](PolicyConfig{Capacity: decisionKeys})
	if err != nil {
		b.Fatal(err)
	}
	benchDecision(b, p)
}

// BenchmarkDecayDecision is BenchmarkAdaptiveDecision for the default
// Policy (OrderDecay), for comparison.
func BenchmarkDecayDecision(b *testing.B) {
	p, err := NewPolicy[uint64](PolicyConfig{Capacity: decisionKeys})
	if err != nil {
		b.Fatal(err)
	}
	benchDecision(b, p)
}

// BenchmarkDensityDecision is BenchmarkAdaptiveDecision for DensityPolicy
// (with the depth feature).
func BenchmarkDensityDecision(b *testing.B) {
	p, err := NewDensityPolicy[uint64](PolicyConfig{Capacity: decisionKeys}, func(k uint64) int { return int(k % 40) })
	if err != nil {
		b.Fatal(err)
	}
	benchDecision(b, p)
}

// BenchmarkArbiterDecision is BenchmarkAdaptiveDecision for ArbiterPolicy
// (with the depth feature).
func BenchmarkArbiterDecision(b *testing.B) {
	p, err := NewArbiterPolicy[uint64](PolicyConfig{Capacity: decisionKeys}, func(k uint64) int { return int(k % 40) })
	if err != nil {
		b.Fatal(err)
	}
	benchDecision(b, p)
}

// decisionKeys is the resident count of the Decision benchmarks.
const decisionKeys = 100000

// benchDecision fills p with decisionKeys keys, then times references to
// a 10x larger key space (a miss in nine cases of ten).
func benchDecision(b *testing.B, p Placer[uint64]) {
	const n = decisionKeys
	now := time.Unix(0, 0)
	for i := range uint64(n) {
		p.Access(i, Mix64(i), now)
		p.Insert(i, Mix64(i), now)
	}
	b.ReportAllocs()
	done := cpuTimer(b)
	for i := range b.N {
		k := uint64(n + i%(9*n))
		now = now.Add(time.Millisecond)
		replayRef(p, k, Mix64(k), n, now)
	}
	done()
}

// BenchmarkStatePerBlock reports each policy's heap bytes per resident
// block once full (100,000 blocks with uint64 keys, ghosts included).
func BenchmarkStatePerBlock(b *testing.B) {
	const n = 100000
	cases := []struct {
		name string
		mk   func() Placer[uint64]
	}{
		{"decay", func() Placer[uint64] { p, _ := NewPolicy[uint64](PolicyConfig{Capacity: n}); return p }},
		{"adaptive", func() Placer[uint64] { p, _ := NewAdaptivePolicy[uint64](PolicyConfig{Capacity: n}); return p }},
		{"density", func() Placer[uint64] {
			p, _ := NewDensityPolicy[uint64](PolicyConfig{Capacity: n}, func(k uint64) int { return int(k % 40) })
			return p
		}},
		{"arbiter", func() Placer[uint64] {
			p, _ := NewArbiterPolicy[uint64](PolicyConfig{Capacity: n}, func(k uint64) int { return int(k % 40) })
			return p
		}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			var per float64
			for range b.N {
				var m0, m1 runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&m0)
				p := c.mk()
				now := time.Unix(0, 0)
				for i := range uint64(3 * n) { // fill, then evict n blocks into the ghosts
					drive(p, i, n, now)
				}
				runtime.GC()
				runtime.ReadMemStats(&m1)
				per = float64(m1.HeapAlloc-m0.HeapAlloc) / n
				runtime.KeepAlive(p)
			}
			b.ReportMetric(per, "bytes/block")
		})
	}
}
