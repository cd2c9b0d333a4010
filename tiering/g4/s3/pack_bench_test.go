package s3_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/g4"
	"github.com/ctxmem/ctxmemd/tiering/g4/s3"
	"github.com/ctxmem/ctxmemd/tiering/g4/s3/s3test"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// BenchmarkPackedSink compares, against one versitygw in one run, the G4
// layouts of the tier: one object per block (Put) and packs (PutPack, the
// core's Sink). It sinks CTXMEM_PACK_BENCH_MIB (default 1024) MiB of
// 256 KiB blocks per layout, as 64 MiB objects handed over in pack-size
// batches (the way Sink calls PutPack), and reports the PUTs per GiB the
// store sent; then it times, over 50 runs each (p50, p99), the restore of
// one 8 MiB file (32 blocks, sunk as an object of its own) and the read
// of one 256 KiB block:
//
//   - file8M-object: for reference, the file as one 8 MiB block object
//     (one GET; what one object per file gives);
//   - block-seq: per-block objects, one Get per block in order (the core's
//     ReadAt today);
//   - pack-seq: packed, one Get per block in order (the core's ReadAt:
//     the tier's read-ahead fetches windows of 2, 4, 8, 16 blocks);
//   - pack-run: packed, one GetBlocks for the file (the whole pack: one
//     GET, header included);
//   - pack-run-cold: as pack-run on a tier reopened before every run (no
//     header cached: still one GET);
//   - pack-run-part: one GetBlocks of the first 8 MiB of a 64 MiB object
//     (a part of a pack: one ranged GET, the header cached);
//   - read256K-block / read256K-pack: one Get of one block.
//
// Run it with
//
//	go test -run '^$' -bench BenchmarkPackedSink -benchtime 1x ./tiering/g4/s3/
func BenchmarkPackedSink(b *testing.B) {
	const bs = 256 << 10
	mib := 1024
	if v := os.Getenv("CTXMEM_PACK_BENCH_MIB"); v != "" {
		var err error
		if mib, err = strconv.Atoi(v); err != nil || mib < 64 {
			b.Fatalf("CTXMEM_PACK_BENCH_MIB=%q: want a number of MiB >= 64", v)
		}
	}
	srv := s3test.StartServer(b)
	blocksPerObj := (64 << 20) / bs
	objs := mib / 64
	data := benchData(64 << 20)
	key := func(obj, i int) tier.Key {
		return tier.Key{Namespace: "kv", Object: uint64(obj + 1), Index: uint32(i), Gen: 1}
	}
	block := func(i int) []byte { return data[i*bs : (i+1)*bs] }
	type layout struct {
		name  string
		store *s3.Store
		tr    *g4.Tier
	}
	open := func(name string, opts g4.TierOptions) layout {
		st := newStore(b, serverOptions(srv, "packbench/"+name))
		tr, err := g4.NewTier(context.Background(), st, opts)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { tr.Close() })
		return layout{name, st, tr}
	}
	perBlock := open("block", g4.TierOptions{PackSize: -1})
	packed := open("pack", g4.TierOptions{})
	for _, l := range []layout{perBlock, packed} {
		before := l.store.RequestCounts()
		t0 := time.Now()
		batch := max(l.tr.PackBlocks("kv", bs), 1)
		for o := range objs {
			for first := 0; first < blocksPerObj; first += batch {
				n := min(batch, blocksPerObj-first)
				keys := make([]tier.Key, n)
				blocks := make([][]byte, n)
				for i := range n {
					keys[i], blocks[i] = key(o, first+i), block(first+i)
				}
				if got, err := l.tr.PutPack(bg, keys, blocks); err != nil || got != n {
					b.Fatalf("%s: PutPack = %d, %v", l.name, got, err)
				}
			}
		}
		took := time.Since(t0)
		after := l.store.RequestCounts()
		gib := float64(mib) / 1024
		b.Logf("%s: sank %d MiB in %v: %d PUTs (%.0f per GiB), %d DELETEs, %.0f MB/s", l.name, mib, took.Round(time.Millisecond),
			after.Put-before.Put, float64(after.Put-before.Put)/gib, after.Delete-before.Delete, float64(mib<<20)/took.Seconds()/1e6)
		b.ReportMetric(float64(after.Put-before.Put)/gib, l.name+"-PUTs/GiB")
	}

	// The 8 MiB file restored: an object of its own (one pack).
	const runs = 50
	const fileBlocks = (8 << 20) / bs
	const file = 1000
	want := data[:8<<20]
	for _, l := range []layout{perBlock, packed} {
		keys := make([]tier.Key, fileBlocks)
		blocks := make([][]byte, fileBlocks)
		for i := range keys {
			keys[i], blocks[i] = key(file, i), block(i)
		}
		if got, err := l.tr.PutPack(bg, keys, blocks); err != nil || got != fileBlocks {
			b.Fatalf("%s: PutPack = %d, %v", l.name, got, err)
		}
	}
	measure := func(name string, st *s3.Store, prep func(), run func(p []byte) error, check []byte) {
		p := make([]byte, len(check))
		lat := make([]time.Duration, 0, runs)
		var gets int64
		for range runs {
			clear(p)
			if prep != nil {
				prep() // untimed, its requests uncounted
			}
			before := st.RequestCounts()
			t0 := time.Now()
			if err := run(p); err != nil {
				b.Fatalf("%s: %v", name, err)
			}
			lat = append(lat, time.Since(t0))
			gets += st.RequestCounts().Get - before.Get
			if !bytes.Equal(p, check) {
				b.Fatalf("%s: bytes differ", name)
			}
		}
		slices.Sort(lat)
		ms := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) / 1000 }
		b.Logf("%-16s p50 %6.2f ms  p99 %6.2f ms  %4.1f GETs/run", name, ms(0.5), ms(0.99), float64(gets)/runs)
		b.ReportMetric(ms(0.5), name+"-p50-ms")
	}
	seq := func(tr *g4.Tier) func(p []byte) error {
		return func(p []byte) error {
			for i := range fileBlocks {
				if n, err := tr.Get(bg, key(file, i), p[i*bs:(i+1)*bs], 0); err != nil || n != bs {
					return fmt.Errorf("Get %d = %d, %v", i, n, err)
				}
			}
			return nil
		}
	}
	run := func(obj int, tr func() *g4.Tier) func(p []byte) error {
		keys := make([]tier.Key, fileBlocks)
		for i := range keys {
			keys[i] = key(obj, i)
		}
		return func(p []byte) error {
			bufs := make([][]byte, fileBlocks)
			for i := range bufs {
				bufs[i] = p[i*bs : (i+1)*bs]
			}
			_, err := tr().GetBlocks(bg, keys, bufs)
			return err
		}
	}
	// Reference: the file as one 8 MiB block object (one GET).
	whole := open("file", g4.TierOptions{MaxBlockSize: 8 << 20})
	if err := whole.tr.Put(bg, key(file, 0), want); err != nil {
		b.Fatal(err)
	}
	measure("file8M-object", whole.store, nil, func(p []byte) error {
		_, err := whole.tr.Get(bg, key(file, 0), p, 0)
		return err
	}, want)
	measure("block-seq", perBlock.store, nil, seq(perBlock.tr), want)
	measure("pack-seq", packed.store, nil, seq(packed.tr), want)
	measure("pack-run", packed.store, nil, run(file, func() *g4.Tier { return packed.tr }), want)
	measure("pack-run-part", packed.store, nil, run(0, func() *g4.Tier { return packed.tr }), want)
	var cold *g4.Tier
	reopen := func() {
		if cold != nil {
			cold.Close()
		}
		var err error
		if cold, err = g4.NewTier(context.Background(), packed.store, g4.TierOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	measure("pack-run-cold", packed.store, reopen, run(file, func() *g4.Tier { return cold }), want)
	cold.Close()
	one := func(tr *g4.Tier) func(p []byte) error {
		return func(p []byte) error {
			if n, err := tr.Get(bg, key(1, 7), p, 0); err != nil || n != bs {
				return fmt.Errorf("Get = %d, %v", n, err)
			}
			return nil
		}
	}
	measure("read256K-block", perBlock.store, nil, one(perBlock.tr), block(7))
	measure("read256K-pack", packed.store, nil, one(packed.tr), block(7))
}
