package s3_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/tiering"
	"github.com/ctxmem/ctxmemd/tiering/g3"
	"github.com/ctxmem/ctxmemd/tiering/g4"
	"github.com/ctxmem/ctxmemd/tiering/g4/s3"
	"github.com/ctxmem/ctxmemd/tiering/g4/s3/s3test"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// BenchmarkPackedSink compares, against one versitygw in one run, the G4
// layouts of the tier: one object per block (Put, PackSize -1) and packs
// (PutPack, the core's Sink). It sinks CTXMEM_PACK_BENCH_MIB (default
// 1024) MiB of 256 KiB blocks per layout, as 64 MiB objects handed over in
// pack-size batches (the way Sink calls PutPack), and reports the PUTs per
// GiB the store sent. Then, in CTXMEM_PACK_BENCH_ROUNDS (default 5)
// interleaved rounds of 10 runs per case (every case runs once per round,
// in turn, so drift of the shared machine hits all of them), it times:
//
//   - core8M-block / core8M-pack: the restore of an 8 MiB file (32 blocks
//     of 256 KiB) through the core: tiering.Store.ReadAt in 1 MiB reads
//     (FUSE's largest) of a file the core sank to G4 (Sink; before every
//     run, untimed, Sink again drops its G2 and G3 copies, no PUT);
//   - core256K-block / core256K-pack: one 256 KiB block (block 7) of that
//     file read through the core the same way;
//   - file8M-object: for reference, the file as one 8 MiB block object
//     read with one Get (what one object per file gives);
//   - tier8M-pack-run: one GetBlocks of the packed file (the tier alone);
//   - tier256K-block / tier256K-pack: one Get of one block (the tier
//     alone);
//   - store256K-range: the same block's bytes read from its own object
//     with a ranged GET (the store alone): what a Range costs the
//     server, pack or not (versitygw's posix backend sends whole objects
//     with sendfile, ranges through a buffered copy).
//
// It reports each case's p50 and p99 over all rounds, its GETs and bytes
// received per run, and the ratios pack/block of the p50s measured in
// this run. CTXMEM_VERSITYGW_IO_BUFFER sets the server's read buffer
// (package s3test), on which the cost of a ranged GET depends;
// CTXMEM_S3_BENCH_ENDPOINT measures another S3 server instead
// (s3test.StartBenchServer).
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
	rounds := 5
	if v := os.Getenv("CTXMEM_PACK_BENCH_ROUNDS"); v != "" {
		var err error
		if rounds, err = strconv.Atoi(v); err != nil || rounds < 1 {
			b.Fatalf("CTXMEM_PACK_BENCH_ROUNDS=%q: want a number >= 1", v)
		}
	}
	srv := s3test.StartBenchServer(b)
	if srv.External {
		b.Logf("external S3 server %s (%s), bucket %s", srv.Endpoint, s3test.EnvBenchEndpoint, srv.Bucket)
	} else if v := srv.IOBuffer(); v != "" {
		b.Logf("versitygw posix --io-buffer-size %s", v)
	} else {
		b.Logf("versitygw posix --io-buffer-size: default (1 MiB)")
	}
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

	// The 8 MiB file: an object of its own (one pack), for the tier-level
	// cases.
	const runs = 10
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
	// Reference: the file as one 8 MiB block object (one GET).
	whole := open("file", g4.TierOptions{MaxBlockSize: 8 << 20})
	if err := whole.tr.Put(bg, key(file, 0), want); err != nil {
		b.Fatal(err)
	}
	// The cores: G2 of 256 MiB, a G3 of their own, G4 a tier of the
	// layout under a prefix of its own (a core deletes the blocks it does
	// not know from its G4).
	type core struct {
		st    *tiering.Store
		id    tiering.ObjectID
		store *s3.Store
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	openCore := func(name string, opts g4.TierOptions) core {
		l := open(name, opts)
		dir := b.TempDir()
		g3s, err := g3.Open(g3.Options{Dir: filepath.Join(dir, "g3"), Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		st, err := tiering.Open(bg, tiering.Config{DataDir: dir, G2Bytes: 256 << 20, G3: g3s, G4: l.tr, Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { st.Close() })
		id, err := st.Create("kv", bs, "file")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := st.WriteAt(bg, id, want, 0); err != nil {
			b.Fatal(err)
		}
		if _, err := st.Sink(bg, id); err != nil {
			b.Fatal(err)
		}
		return core{st, id, l.store}
	}
	coreBlock, corePack := openCore("core-block", g4.TierOptions{PackSize: -1}), openCore("core-pack", g4.TierOptions{})
	sink := func(c core) func() {
		return func() {
			if _, err := c.st.Sink(bg, c.id); err != nil {
				b.Fatal(err)
			}
		}
	}
	coreRead := func(c core, off int64) func(p []byte) error {
		return func(p []byte) error {
			for pos := 0; pos < len(p); pos += 1 << 20 {
				q := p[pos:min(pos+1<<20, len(p))]
				if n, err := c.st.ReadAt(bg, c.id, q, off+int64(pos)); err != nil || n != len(q) {
					return fmt.Errorf("ReadAt %d = %d, %v", off+int64(pos), n, err)
				}
			}
			return nil
		}
	}
	getRun := func(tr *g4.Tier) func(p []byte) error {
		keys := make([]tier.Key, fileBlocks)
		for i := range keys {
			keys[i] = key(file, i)
		}
		return func(p []byte) error {
			bufs := make([][]byte, fileBlocks)
			for i := range bufs {
				bufs[i] = p[i*bs : (i+1)*bs]
			}
			_, err := tr.GetBlocks(bg, keys, bufs)
			return err
		}
	}
	one := func(tr *g4.Tier) func(p []byte) error {
		return func(p []byte) error {
			if n, err := tr.Get(bg, key(0, 7), p, 0); err != nil || n != bs {
				return fmt.Errorf("Get = %d, %v", n, err)
			}
			return nil
		}
	}
	// The bytes of block 7 in its own object, read with a ranged GET
	// (header skipped): what a range costs the server, pack or not.
	blockName := perBlock.tr.ObjectName(key(0, 7))
	attrs, err := perBlock.store.Head(bg, blockName)
	if err != nil {
		b.Fatal(err)
	}
	rangeOfBlock := func(p []byte) error {
		rc, err := perBlock.store.GetRange(bg, blockName, attrs.Size-bs, bs)
		if err != nil {
			return err
		}
		defer rc.Close()
		if _, err := io.ReadFull(rc, p); err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, rc)
		return err
	}
	type bcase struct {
		name  string
		store *s3.Store
		prep  func() // untimed, its requests uncounted
		run   func(p []byte) error
		check []byte
		lat   []time.Duration
		gets  int64
		recv  int64 // response body bytes
	}
	cases := []*bcase{
		{name: "core8M-block", store: coreBlock.store, prep: sink(coreBlock), run: coreRead(coreBlock, 0), check: want},
		{name: "core8M-pack", store: corePack.store, prep: sink(corePack), run: coreRead(corePack, 0), check: want},
		{name: "core256K-block", store: coreBlock.store, prep: sink(coreBlock), run: coreRead(coreBlock, 7*bs), check: block(7)},
		{name: "core256K-pack", store: corePack.store, prep: sink(corePack), run: coreRead(corePack, 7*bs), check: block(7)},
		{name: "file8M-object", store: whole.store, run: func(p []byte) error {
			_, err := whole.tr.Get(bg, key(file, 0), p, 0)
			return err
		}, check: want},
		{name: "tier8M-pack-run", store: packed.store, run: getRun(packed.tr), check: want},
		{name: "tier256K-block", store: perBlock.store, run: one(perBlock.tr), check: block(7)},
		{name: "tier256K-pack", store: packed.store, run: one(packed.tr), check: block(7)},
		{name: "store256K-range", store: perBlock.store, run: rangeOfBlock, check: block(7)},
	}
	for range rounds {
		for _, c := range cases {
			p := make([]byte, len(c.check))
			for range runs {
				clear(p)
				if c.prep != nil {
					c.prep()
				}
				before := c.store.RequestStats()
				t0 := time.Now()
				if err := c.run(p); err != nil {
					b.Fatalf("%s: %v", c.name, err)
				}
				c.lat = append(c.lat, time.Since(t0))
				after := c.store.RequestStats()
				c.gets += int64(after.Get - before.Get)
				c.recv += int64(after.BytesReceived - before.BytesReceived)
				if !bytes.Equal(p, c.check) {
					b.Fatalf("%s: bytes differ", c.name)
				}
			}
		}
	}
	p50 := map[string]float64{}
	for _, c := range cases {
		slices.Sort(c.lat)
		ms := func(q float64) float64 { return float64(c.lat[int(q*float64(len(c.lat)-1))].Microseconds()) / 1000 }
		p50[c.name] = ms(0.5)
		b.Logf("%-16s p50 %6.2f ms  p99 %6.2f ms  %4.1f GETs/run  %6.0f KiB received/run", c.name, ms(0.5), ms(0.99),
			float64(c.gets)/float64(len(c.lat)), float64(c.recv)/1024/float64(len(c.lat)))
		b.ReportMetric(ms(0.5), c.name+"-p50-ms")
	}
	for _, r := range [][2]string{{"core8M-pack", "core8M-block"}, {"core8M-pack", "file8M-object"},
		{"core256K-pack", "core256K-block"}, {"tier256K-pack", "tier256K-block"}, {"store256K-range", "tier256K-block"}} {
		b.Logf("%s / %s = %.2f", r[0], r[1], p50[r[0]]/p50[r[1]])
		b.ReportMetric(p50[r[0]]/p50[r[1]], r[0]+"/"+r[1])
	}
}
