package g3

import (
	"github.com/ctxmem/ctxmemd/internal/directio"

	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxmem/ctxmemd/tiering/tiertest"
)

// Benchmarks: 256 KiB blocks through the store ("g3") against a plain
// pwrite/pread loop on one preallocated, already-written file ("plain") in
// the same directory with the same I/O mode (O_DIRECT when the store uses
// it), as sub-benchmarks of one run so both see the same disk state.
// Compare the MB/s of the g3 and plain sub-benchmarks:
//
//	go test -run '^$' -bench . -benchtime 2s -count 5 ./tiering/g3

const (
	benchBlock  = 256 * kib
	benchRegion = 512 * mib // bytes cycled through by writers (= store capacity)
	benchHot    = 64 * mib  // bytes cycled through by readers
)

// benchPair sets up the store and the plain file (in one directory) and
// only then runs the two loops as sub-benchmarks, so neither runs while
// the device is still absorbing the other's setup writes.
func benchPair(b *testing.B, g3, plain func(b *testing.B, dir string) func(*testing.B)) {
	dir := b.TempDir()
	g3Loop := g3(b, filepath.Join(dir, "g3"))
	plainLoop := plain(b, dir)
	b.Run("g3", g3Loop)
	b.Run("plain", plainLoop)
}

func benchStore(b *testing.B, dir string) *Store {
	return openT(b, Options{Dir: dir, SegmentBytes: DefaultSegmentBytes, CapacityBytes: benchRegion})
}

// benchFile opens a size-byte file in dir, preallocated and written once
// (no unwritten extents), O_DIRECT where the directory takes it.
func benchFile(b *testing.B, dir string, size int64) (fd int, direct bool) {
	direct, err := probeDirect(dir)
	if err != nil {
		b.Fatal(err)
	}
	flags := unix.O_RDWR | unix.O_CREAT | unix.O_CLOEXEC
	if direct {
		flags |= unix.O_DIRECT
	}
	fd, err = unix.Open(filepath.Join(dir, "plain"), flags, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { unix.Close(fd) })
	if err := unix.Fallocate(fd, 0, 0, size); err != nil {
		b.Fatal(err)
	}
	buf := directio.AlignedAlloc(mib)
	for off := int64(0); off < size; off += mib {
		if err := directio.PwriteFull(fd, buf, off); err != nil {
			b.Fatal(err)
		}
	}
	return fd, direct
}

func fillStore(b *testing.B, s *Store) int {
	n := benchHot / benchBlock
	for i := range n {
		put(b, s, k(1, uint32(i)), benchBlock)
	}
	return n
}

func BenchmarkWrite256K(b *testing.B) {
	benchPair(b, func(b *testing.B, dir string) func(*testing.B) {
		s := benchStore(b, dir)
		data := tiertest.Pattern(k(0, 0), benchBlock, 0)
		return func(b *testing.B) {
			b.SetBytes(benchBlock)
			b.ResetTimer()
			for i := range b.N {
				if err := s.Put(context.Background(), k(1, uint32(i)), data); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(boolMetric(s.Direct()), "direct")
		}
	}, func(b *testing.B, dir string) func(*testing.B) {
		fd, direct := benchFile(b, dir, benchRegion)
		buf := directio.AlignedAlloc(benchBlock)
		return func(b *testing.B) {
			b.SetBytes(benchBlock)
			b.ResetTimer()
			for i := range b.N {
				if err := directio.PwriteFull(fd, buf, int64(i)*benchBlock%benchRegion); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(boolMetric(direct), "direct")
		}
	})
}

func BenchmarkRead256K(b *testing.B) {
	benchPair(b, func(b *testing.B, dir string) func(*testing.B) {
		s := benchStore(b, dir)
		n := fillStore(b, s)
		p := make([]byte, benchBlock)
		return func(b *testing.B) {
			b.SetBytes(benchBlock)
			b.ResetTimer()
			for i := range b.N {
				if _, err := s.Get(context.Background(), k(1, uint32(i%n)), p, 0); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(boolMetric(s.Direct()), "direct")
		}
	}, func(b *testing.B, dir string) func(*testing.B) {
		fd, direct := benchFile(b, dir, benchHot)
		buf := directio.AlignedAlloc(benchBlock)
		return func(b *testing.B) {
			b.SetBytes(benchBlock)
			b.ResetTimer()
			for i := range b.N {
				if err := directio.PreadFull(fd, buf, int64(i)*benchBlock%benchHot); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(boolMetric(direct), "direct")
		}
	})
}

// Parallel variants: 4 goroutines per CPU (queue depth for the device).

func BenchmarkWrite256KParallel(b *testing.B) {
	benchPair(b, func(b *testing.B, dir string) func(*testing.B) {
		s := benchStore(b, dir)
		data := tiertest.Pattern(k(0, 0), benchBlock, 0)
		var next atomic.Uint32
		return func(b *testing.B) {
			b.SetBytes(benchBlock)
			b.SetParallelism(4)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := s.Put(context.Background(), k(1, next.Add(1)), data); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
	}, func(b *testing.B, dir string) func(*testing.B) {
		fd, _ := benchFile(b, dir, benchRegion)
		var next atomic.Int64
		return func(b *testing.B) {
			b.SetBytes(benchBlock)
			b.SetParallelism(4)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				buf := directio.AlignedAlloc(benchBlock)
				for pb.Next() {
					if err := directio.PwriteFull(fd, buf, next.Add(1)*benchBlock%benchRegion); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
	})
}

func BenchmarkRead256KParallel(b *testing.B) {
	benchPair(b, func(b *testing.B, dir string) func(*testing.B) {
		s := benchStore(b, dir)
		n := uint32(fillStore(b, s))
		var next atomic.Uint32
		return func(b *testing.B) {
			b.SetBytes(benchBlock)
			b.SetParallelism(4)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				p := make([]byte, benchBlock)
				for pb.Next() {
					if _, err := s.Get(context.Background(), k(1, next.Add(1)%n), p, 0); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
	}, func(b *testing.B, dir string) func(*testing.B) {
		fd, _ := benchFile(b, dir, benchHot)
		var next atomic.Int64
		return func(b *testing.B) {
			b.SetBytes(benchBlock)
			b.SetParallelism(4)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				buf := directio.AlignedAlloc(benchBlock)
				for pb.Next() {
					if err := directio.PreadFull(fd, buf, next.Add(1)*benchBlock%benchHot); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
	})
}

func boolMetric(v bool) float64 {
	if v {
		return 1
	}
	return 0
}

// Interleaved variants: each iteration does one store op and one plain op
// and times them separately, so drift in the shared disk's speed hits both
// alike. They report MB/s of each side and g3/plain, the throughput ratio.

func BenchmarkInterleavedWrite256K(b *testing.B) {
	dir := b.TempDir()
	s := benchStore(b, filepath.Join(dir, "g3"))
	fd, _ := benchFile(b, dir, benchRegion)
	data := tiertest.Pattern(k(0, 0), benchBlock, 0)
	buf := directio.AlignedAlloc(benchBlock)
	copy(buf, data)
	var tg, tp time.Duration
	b.SetBytes(2 * benchBlock)
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		if err := s.Put(context.Background(), k(1, uint32(i)), data); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := directio.PwriteFull(fd, buf, int64(i)*benchBlock%benchRegion); err != nil {
			b.Fatal(err)
		}
		tp += time.Since(t1)
		tg += t1.Sub(t0)
	}
	reportPair(b, tg, tp)
}

func BenchmarkInterleavedRead256K(b *testing.B) {
	dir := b.TempDir()
	s := benchStore(b, filepath.Join(dir, "g3"))
	n := fillStore(b, s)
	fd, _ := benchFile(b, dir, benchHot)
	p := make([]byte, benchBlock)
	buf := directio.AlignedAlloc(benchBlock)
	var tg, tp time.Duration
	b.SetBytes(2 * benchBlock)
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		if _, err := s.Get(context.Background(), k(1, uint32(i%n)), p, 0); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := directio.PreadFull(fd, buf, int64(i%n)*benchBlock); err != nil {
			b.Fatal(err)
		}
		tp += time.Since(t1)
		tg += t1.Sub(t0)
	}
	reportPair(b, tg, tp)
}

// reportPair reports per-side MB/s and their ratio (store / plain).
func reportPair(b *testing.B, g3, plain time.Duration) {
	mbps := func(d time.Duration) float64 { return float64(b.N) * benchBlock / d.Seconds() / 1e6 }
	b.ReportMetric(mbps(g3), "g3-MB/s")
	b.ReportMetric(mbps(plain), "plain-MB/s")
	b.ReportMetric(plain.Seconds()/g3.Seconds(), "g3/plain")
}

// BenchmarkRecover4K times Open of a store holding 64 Ki blocks of 4 KiB
// (the many-small-files case of issue 17: the recovery scan reads every
// record header), with every segment but the newest sealed. The data is
// written once; every iteration opens and closes the store.
//
//	go test -run '^$' -bench BenchmarkRecover4K -benchtime 5x ./tiering/g3
func BenchmarkRecover4K(b *testing.B) {
	const n = 64 << 10
	dir := b.TempDir()
	opts := Options{Dir: dir, SegmentBytes: DefaultSegmentBytes, CapacityBytes: 4 << 30}
	s := openT(b, opts)
	data := tiertest.Pattern(k(0, 0), 4*kib, 0)
	for i := range n {
		if err := s.Put(context.Background(), k(uint64(1+i/4), uint32(i%4)), data); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		s, err := Open(opts)
		if err != nil {
			b.Fatal(err)
		}
		if got := s.Usage().Blocks; got != n {
			b.Fatalf("recovered %d blocks, want %d", got, n)
		}
		b.StopTimer()
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/1000, "ms/open")
}
