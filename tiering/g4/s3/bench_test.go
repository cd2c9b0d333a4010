package s3_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/ctxmem/ctxmemd/tiering/g4"
	"github.com/ctxmem/ctxmemd/tiering/g4/s3"
	"github.com/ctxmem/ctxmemd/tiering/g4/s3/s3test"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// benchData returns n random bytes.
func benchData(n int) []byte {
	r := rand.New(rand.NewPCG(uint64(n), 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// BenchmarkThroughput compares Put and Get of whole 256 KiB and 8 MiB
// objects through the G4 tier on the S3 store (block header, CRC32C,
// buffered retryable PUT, verified GET) with a bare minio-go
// PutObject/GetObject loop on the same versitygw in the same run. Each
// iteration does one tier operation and one bare operation, timed
// separately (paired, so drift of the shared machine hits both), and
// reports tier-MB/s, minio-MB/s and tier/minio (throughput ratio; 1.0 =
// no overhead).
//
//	go test -run '^$' -bench BenchmarkThroughput -benchtime 100x ./tiering/g4/s3/
func BenchmarkThroughput(b *testing.B) {
	srv := s3test.StartServer(b)
	store := newStore(b, serverOptions(srv, "bench"))
	tr, err := g4.NewTier(context.Background(), store, g4.TierOptions{MaxBlockSize: 8 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close()
	bare := srv.Client()
	const keys = 16
	for _, size := range []int{256 << 10, 8 << 20} {
		data := benchData(size)
		label := fmt.Sprintf("%dKiB", size>>10)
		key := func(i int) tier.Key {
			return tier.Key{Namespace: "bench", Object: uint64(size), Index: uint32(i % keys), Gen: 1}
		}
		bareKey := func(i int) string { return fmt.Sprintf("bare/%d/%d", size, i%keys) }
		pair := func(b *testing.B, tierOp, bareOp func(i int)) {
			var tierT, bareT time.Duration
			for i := range b.N {
				t0 := time.Now()
				tierOp(i)
				t1 := time.Now()
				bareOp(i)
				tierT += t1.Sub(t0)
				bareT += time.Since(t1)
			}
			mbs := func(d time.Duration) float64 { return float64(size) * float64(b.N) / d.Seconds() / 1e6 }
			b.ReportMetric(mbs(tierT), "tier-MB/s")
			b.ReportMetric(mbs(bareT), "minio-MB/s")
			b.ReportMetric(bareT.Seconds()/tierT.Seconds(), "tier/minio")
			b.ReportMetric(float64(tierT.Microseconds())/float64(b.N), "tier-µs/op")
			b.ReportMetric(float64(bareT.Microseconds())/float64(b.N), "minio-µs/op")
		}
		b.Run("Put/"+label, func(b *testing.B) {
			pair(b, func(i int) {
				if err := tr.Put(bg, key(i), data); err != nil {
					b.Fatal(err)
				}
			}, func(i int) {
				if _, err := bare.PutObject(bg, srv.Bucket, bareKey(i), bytes.NewReader(data), int64(size), minio.PutObjectOptions{}); err != nil {
					b.Fatal(err)
				}
			})
		})
		for i := range keys { // every key exists for the reads
			if err := tr.Put(bg, key(i), data); err != nil {
				b.Fatal(err)
			}
			if _, err := bare.PutObject(bg, srv.Bucket, bareKey(i), bytes.NewReader(data), int64(size), minio.PutObjectOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		p := make([]byte, size)
		b.Run("Get/"+label, func(b *testing.B) {
			pair(b, func(i int) {
				if n, err := tr.Get(bg, key(i), p, 0); err != nil || n != size {
					b.Fatal(n, err)
				}
			}, func(i int) {
				obj, err := bare.GetObject(bg, srv.Bucket, bareKey(i), minio.GetObjectOptions{})
				if err != nil {
					b.Fatal(err)
				}
				if n, err := io.ReadFull(obj, p); err != nil || n != size {
					b.Fatal(n, err)
				}
				obj.Close()
			})
		})
	}
}

// layout is one way to store a KV file of fileSize bytes in G4.
type layout struct {
	name  string
	store *s3.Store          // counts the layout's requests
	setup func(b *testing.B) // stores one file
	// restore reads the whole file back, verified, into p.
	restore func(b *testing.B, p []byte)
}

// BenchmarkRestoreLayouts measures, per object layout, the requests per
// GiB written (counted by the store's transport while storing one 8 MiB
// file, times 128) and the latency of restoring one 8 MiB file (p50/p99
// over b.N restores, GETs per restore counted). Run it with
//
//	go test -run '^$' -bench BenchmarkRestoreLayouts -benchtime 100x ./tiering/g4/s3/
//
// Layouts:
//   - block256K-seq / -par8: the G4 tier as built, one object per 256 KiB
//     block (32 objects), read one after another / 8 at a time;
//   - block4M-seq: one object per 4 MiB block (tier.MaxBlockSize);
//   - file8M: the whole file as one object (one tier block of 8 MiB);
//   - packed64M: the file as an 8 MiB range of a 64 MiB segment object
//     holding 8 files, one ranged GET plus a CRC32C over the range.
func BenchmarkRestoreLayouts(b *testing.B) {
	const fileSize = 8 << 20
	srv := s3test.StartServer(b)
	data := benchData(fileSize)
	var layouts []layout
	tierLayout := func(name string, block int, par int) {
		store := newStore(b, serverOptions(srv, "layout/"+name))
		tr, err := g4.NewTier(context.Background(), store, g4.TierOptions{MaxBlockSize: max(block, tier.MaxBlockSize)})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { tr.Close() })
		n := fileSize / block
		key := func(i int) tier.Key { return tier.Key{Namespace: "kv", Object: 1, Index: uint32(i), Gen: 1} }
		layouts = append(layouts, layout{
			name: name, store: store,
			setup: func(b *testing.B) {
				for i := range n {
					if err := tr.Put(bg, key(i), data[i*block:(i+1)*block]); err != nil {
						b.Fatal(err)
					}
				}
			},
			restore: func(b *testing.B, p []byte) {
				var wg sync.WaitGroup
				sem := make(chan struct{}, par)
				for i := range n {
					sem <- struct{}{}
					wg.Add(1)
					go func() {
						defer func() { <-sem; wg.Done() }()
						if got, err := tr.Get(bg, key(i), p[i*block:(i+1)*block], 0); err != nil || got != block {
							b.Error(got, err)
						}
					}()
				}
				wg.Wait()
			},
		})
	}
	tierLayout("block256K-seq", 256<<10, 1)
	tierLayout("block256K-par8", 256<<10, 8)
	tierLayout("block4M-seq", 4<<20, 1)
	tierLayout("file8M", 8<<20, 1)
	{
		const files = 8
		store := newStore(b, serverOptions(srv, "layout/packed64M"))
		seg := bytes.Repeat(data, files) // 64 MiB: 8 files of 8 MiB
		want := tier.Checksum(data)
		layouts = append(layouts, layout{
			name: "packed64M", store: store,
			setup: func(b *testing.B) {
				if err := store.Put(bg, "seg/0", bytes.NewReader(seg), int64(len(seg)), nil); err != nil {
					b.Fatal(err)
				}
			},
			restore: func(b *testing.B, p []byte) {
				rc, err := store.GetRange(bg, "seg/0", 3*fileSize, fileSize)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(rc, p); err != nil {
					b.Fatal(err)
				}
				rc.Close()
				if tier.Checksum(p) != want {
					b.Fatal("packed range CRC mismatch")
				}
			},
		})
	}
	for _, l := range layouts {
		st := l.store
		before := st.RequestStats()
		l.setup(b)
		wr := diff(st.RequestStats(), before)
		// The packed segment holds 8 files; per GiB it is 16 segments.
		perGiB := float64(wr.Put+wr.Post) * float64(1<<30) / float64(fileSize)
		if l.name == "packed64M" {
			perGiB /= 8
		}
		b.Run(l.name, func(b *testing.B) {
			p := make([]byte, fileSize)
			lat := make([]time.Duration, 0, b.N)
			before := st.RequestStats()
			for range b.N {
				t0 := time.Now()
				l.restore(b, p)
				lat = append(lat, time.Since(t0))
			}
			rd := diff(st.RequestStats(), before)
			if !bytes.Equal(p, data) {
				b.Fatal("restored file differs")
			}
			slices.Sort(lat)
			ms := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) / 1000 }
			b.ReportMetric(ms(0.50), "p50-ms")
			b.ReportMetric(ms(0.99), "p99-ms")
			b.ReportMetric(float64(rd.Get)/float64(b.N), "GETs/restore")
			b.ReportMetric(perGiB, "writes/GiB")
		})
	}
}
