package poolkv

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/fabric/pool"
)

// benchIndex returns an Index whose cache holds n entries (applied as the
// watcher would: the benchmark measures the cache, not the bus) and their
// names.
func benchIndex(n int) (*Index, []name) {
	x := NewIndex(nil, nil)
	names := make([]name, n)
	for i := range n {
		e := entry(fmt.Sprintf("ns%d", i%8), fmt.Sprintf("models/m%d/layer%d/kv%06d", i%50, i%32, i),
			loc(uint32(i%1024), 1<<20, 1), loc(uint32((i+1)%1024), 2<<20, 1))
		e.V = Version
		names[i] = name{e.Namespace, e.Path}
		x.live.putWatched(FileKey(e.Namespace, e.Path), uint64(i+1), e)
	}
	return x, names
}

// BenchmarkLookup: Lookup of an existing entry among 100k (the FUSE lookup
// path), one goroutine, a different entry each time (cache-cold).
func BenchmarkLookup(b *testing.B) {
	x, names := benchIndex(100_000)
	b.ResetTimer()
	i := 0
	for b.Loop() {
		nm := names[i%len(names)]
		if _, ok := x.Lookup(nm.ns, nm.path); !ok {
			b.Fatal("miss")
		}
		i += 7919
	}
}

// BenchmarkLookupHot: Lookup of one entry among 100k, again and again
// (its map slot and strings stay in the CPU cache, as when the kernel
// looks up the same name repeatedly).
func BenchmarkLookupHot(b *testing.B) {
	x, names := benchIndex(100_000)
	nm := names[12345]
	ns, path := string([]byte(nm.ns)), string([]byte(nm.path)) // not the cached strings
	for b.Loop() {
		if _, ok := x.Lookup(ns, path); !ok {
			b.Fatal("miss")
		}
	}
}

// BenchmarkLookupParallel: the same from GOMAXPROCS goroutines.
func BenchmarkLookupParallel(b *testing.B) {
	x, names := benchIndex(100_000)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			nm := names[i%len(names)]
			if _, ok := x.Lookup(nm.ns, nm.path); !ok {
				b.Fatal("miss")
			}
			i += 7919
		}
	})
}

// BenchmarkHasDir: HasDir among 100k entries.
func BenchmarkHasDir(b *testing.B) {
	x, _ := benchIndex(100_000)
	for b.Loop() {
		if !x.HasDir("ns3", "models/m3") {
			b.Fatal("miss")
		}
	}
}

// BenchmarkAcquireRelease: one Acquire + Release round trip against an
// embedded NATS server (in-process connection), 64 extents.
func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	_, kv, _ := busWithBuckets(b)
	l := NewLeases(kv, 64, "a", LeaseOptions{TTL: time.Minute})
	for b.Loop() {
		le, err := l.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx, le); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAcquireFull: Acquire when the first 60 of 64 extents from the
// cursor are held (the whole-bucket read path), plus its Release.
func BenchmarkAcquireFull(b *testing.B) {
	ctx := context.Background()
	_, kv, _ := busWithBuckets(b)
	l := NewLeases(kv, 64, "a", LeaseOptions{TTL: time.Minute})
	for range 60 {
		if _, err := l.Acquire(ctx); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		l.mu.Lock()
		l.cursor = 0 // start among the held extents
		l.mu.Unlock()
		le, err := l.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx, le); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPublish: Publish of a 64-block entry (one KV put, local apply).
func BenchmarkPublish(b *testing.B) {
	ctx := context.Background()
	_, _, kv := busWithBuckets(b)
	x := NewIndex(kv, nil)
	blocks := make([]pool.Location, 64)
	for i := range blocks {
		blocks[i] = loc(uint32(i%4), int64(i+1)<<20, 1)
	}
	i := 0
	for b.Loop() {
		if err := x.Publish(ctx, entry("ns", fmt.Sprintf("f%d", i%1000), blocks...)); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
