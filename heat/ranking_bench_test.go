package heat

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
)

// rkTouchBatch is the number of Touch calls per BenchmarkRankingTouch op,
// so that short -benchtime Nx runs still measure many touches.
const rkTouchBatch = 4096

// BenchmarkRankingTouch: Touch of a tracked key picked at random among
// keys (cache misses included). One op is rkTouchBatch touches; ns/touch
// and cpu-ns/touch are per Touch. A report runs every 256 ops (~1M
// touches) outside the timer, as the sidecar's would, so the dirty list
// stays bounded.
func BenchmarkRankingTouch(b *testing.B) {
	for _, keys := range []int{1 << 16, 1 << 20} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			r, _ := NewRanking[uint64](RankingConfig{})
			now := t0
			for k := range keys {
				r.Touch(uint64(k), now)
			}
			r.Hottest(64, now, nil)
			rng := rand.New(rand.NewPCG(1, 2))
			ids := make([]uint64, 1<<16)
			for i := range ids {
				ids[i] = rng.Uint64N(uint64(keys))
			}
			b.ReportAllocs()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			b.ResetTimer()
			c0 := threadCPU()
			j := 0
			for i := range b.N {
				for range rkTouchBatch {
					now = now.Add(time.Microsecond)
					r.Touch(ids[j&(len(ids)-1)], now)
					j++
				}
				if i%256 == 255 {
					b.StopTimer()
					r.Hottest(64, now, nil)
					b.StartTimer()
				}
			}
			cpu := threadCPU() - c0 // includes the few reports
			b.StopTimer()
			touches := float64(b.N) * rkTouchBatch
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/touches, "ns/touch")
			if cpu > 0 {
				b.ReportMetric(float64(cpu.Nanoseconds())/touches, "cpu-ns/touch")
			}
		})
	}
}

// BenchmarkRankingReport1M: 1,000,000 tracked keys; each op touches
// 10,000 keys (1 %; uniform, Zipf s=1.1, or uniform with Gain 100 so that
// every touched key is the hottest and joins D) over one simulated second,
// outside the timer, then builds one report: Hottest(64) + Coldest(256,
// minIdle 0). ns/op is the report alone (wall time: on a loaded machine an
// upper bound on its CPU time; per-thread rusage is too coarse for one
// report). touch-ns is per Touch, hist-ns one Histogram call (not part of
// the report), merged/report is |D|, the dirty keys Hottest merged, and
// B/key is the heap held by the Ranking per key after the first report.
func BenchmarkRankingReport1M(b *testing.B) {
	const keys, touches = 1_000_000, 10_000
	for _, mode := range []string{"uniform", "zipf", "gain100"} {
		b.Run(mode, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 1))
			pick := func() uint64 { return rng.Uint64N(keys) }
			if mode == "zipf" {
				z := rand.NewZipf(rng, 1.1, 1, keys-1)
				pick = z.Uint64
			}
			var cfg RankingConfig
			if mode == "gain100" { // worst case: every touch rises above the floor
				cfg.Gain = MaxScore
			}
			var m0, m1 runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&m0)
			r, err := NewRanking[uint64](cfg)
			if err != nil {
				b.Fatal(err)
			}
			// 1M keys first touched over the last 1000 s.
			now := t0
			for k := range keys {
				r.Touch(uint64(k), now)
				now = now.Add(time.Millisecond)
			}
			hot := r.Hottest(64, now, make([]Ranked[uint64], 0, 64)) // merges all 1M dirty keys
			cold := make([]Ranked[uint64], 0, 256)
			runtime.GC()
			runtime.ReadMemStats(&m1)

			var touchT, histT time.Duration
			merged := 0
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				w := time.Now()
				for range touches {
					now = now.Add(time.Second / touches)
					r.Touch(pick(), now)
				}
				touchT += time.Since(w)
				r.mu.Lock()
				merged += len(r.dirty)
				r.mu.Unlock()
				b.StartTimer()

				hot = r.Hottest(64, now, hot[:0])
				cold = r.Coldest(256, now, 0, nil, cold[:0])

				b.StopTimer()
				w = time.Now()
				r.Histogram(now)
				histT += time.Since(w)
				b.StartTimer()
			}
			b.StopTimer()
			if len(hot) != 64 || len(cold) != 256 {
				b.Fatalf("report sizes %d, %d", len(hot), len(cold))
			}
			if r.rescans != 0 {
				b.Fatalf("%d full rescans, want 0", r.rescans)
			}
			n := float64(b.N)
			b.ReportMetric(float64(m1.HeapAlloc-m0.HeapAlloc)/keys, "B/key")
			b.ReportMetric(float64(touchT.Nanoseconds())/(n*touches), "touch-ns")
			b.ReportMetric(float64(histT.Nanoseconds())/n, "hist-ns")
			b.ReportMetric(float64(merged)/n, "merged/report")
		})
	}
}
