package tiering

import (
	"context"
	"slices"
	"testing"
	"time"
)

// BenchmarkG2Lookup measures a 4 KiB ReadAt of a G2-resident block through
// the whole core (object lookup, block lookup, heat/policy update, copy),
// reporting p50/p99 latency in ns. Run: go test -run '^$' -bench G2Lookup ./tiering/
func BenchmarkG2Lookup(b *testing.B) {
	ctx := context.Background()
	s, err := Open(ctx, Config{DataDir: b.TempDir(), G2Bytes: 512 << 20, G3: newMemTier("G3", 0)})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const files = 256
	ids := make([]ObjectID, files)
	data := pattern(1, 256<<10)
	for i := range ids {
		ids[i], _ = s.Create("ns", 256<<10, "file")
		if _, err := s.WriteAt(ctx, ids[i], data, 0); err != nil {
			b.Fatal(err)
		}
	}
	buf := make([]byte, 4096)
	lat := make([]time.Duration, 0, b.N)
	b.SetBytes(4096)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := ids[i%files]
		off := int64((i*7919)%64) * 4096
		t0 := time.Now()
		if _, err := s.ReadAt(ctx, id, buf, off); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
	if st := s.Stats(); st.BlockHits[TierG2] < int64(b.N) {
		b.Fatalf("only %d of %d reads hit G2", st.BlockHits[TierG2], b.N)
	}
}

// BenchmarkG2Write measures a 256 KiB WriteAt of a new object into G2
// (write-back to an in-memory lower tier runs concurrently).
func BenchmarkG2Write(b *testing.B) {
	ctx := context.Background()
	s, err := Open(ctx, Config{DataDir: b.TempDir(), G2Bytes: 256 << 20, G3: newMemTier("G3", 0)})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	data := pattern(2, 256<<10)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id, _ := s.Create("ns", 256<<10, "file")
		if _, err := s.WriteAt(ctx, id, data, 0); err != nil {
			b.Fatal(err)
		}
		if i%64 == 63 {
			b.StopTimer()
			for _, o := range s.Objects() {
				s.Delete(ctx, o.ID)
			}
			b.StartTimer()
		}
	}
}

// BenchmarkMemFill fills fresh 256 KiB memory files, as a KV file's first
// write does, through the mapping (page faults) and by pwrite (g2block.fill).
func BenchmarkMemFill(b *testing.B) {
	data := make([]byte, 256<<10)
	for _, mode := range []string{"mapping", "pwrite"} {
		b.Run(mode, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for i := 0; b.Loop(); i++ {
				m, err := newMemFile(ObjectID(i))
				if err != nil {
					b.Fatal(err)
				}
				if err := m.grow(int64(len(data))); err != nil {
					b.Fatal(err)
				}
				mp, err := m.mapped(int64(len(data)))
				if err != nil {
					b.Fatal(err)
				}
				g := &g2block{buf: mp[:len(data)], mf: m}
				if mode == "mapping" {
					copy(g.buf, data)
				} else if err := g.fill(0, data); err != nil {
					b.Fatal(err)
				}
				m.close()
			}
		})
	}
}

// BenchmarkG3WriteBack measures a 256 KiB file written and flushed to G3
// (an in-memory tier, so the core's own cost shows: write-back, the
// bounded put's copy and goroutine, the record). Run:
// go test -run '^$' -bench G3WriteBack ./tiering/
func BenchmarkG3WriteBack(b *testing.B) {
	ctx := context.Background()
	s, err := Open(ctx, Config{DataDir: b.TempDir(), G2Bytes: 256 << 20, G3: newMemTier("G3", 0)})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	data := pattern(3, 256<<10)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id, _ := s.Create("ns", 256<<10, "file")
		if _, err := s.WriteAt(ctx, id, data, 0); err != nil {
			b.Fatal(err)
		}
		if err := s.Flush(ctx, id); err != nil {
			b.Fatal(err)
		}
		if i%64 == 63 {
			b.StopTimer()
			for _, o := range s.Objects() {
				s.Delete(ctx, o.ID)
			}
			b.StartTimer()
		}
	}
}
