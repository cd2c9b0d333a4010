package poolkv

import (
	"context"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/ctxmem/ctxmemd/fabric/pool"
	"github.com/ctxmem/ctxmemd/internal/testenv"
)

// runIndex starts x.Run until the test ends and waits for Ready.
func runIndex(t *testing.T, x *Index) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := x.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	select {
	case <-x.Ready():
	case <-time.After(15 * time.Second):
		t.Fatal("index not ready")
	}
}

func loc(extent uint32, off int64, epoch uint64) pool.Location {
	return pool.Location{Extent: extent, Offset: off, Length: 4096, Epoch: epoch}
}

func entry(ns, path string, blocks ...pool.Location) FileEntry {
	return FileEntry{Namespace: ns, Path: path, Size: int64(len(blocks)) * 4096, BlockSize: 4096,
		Owner: "a", Object: 7, Gen: 3, Blocks: blocks, Published: 1_700_000_000_000_000_000}
}

// lookupEq reports whether x holds exactly want for its name.
func lookupEq(x *Index, want FileEntry) bool {
	got, ok := x.Lookup(want.Namespace, want.Path)
	want.V = Version
	return ok && reflect.DeepEqual(got, want)
}

func extentPaths(x *Index, e uint32) string {
	var s []string
	for _, f := range x.ByExtent(e) {
		s = append(s, f.Namespace+":"+f.Path)
	}
	return strings.Join(s, ",")
}

// TestIndexPropagation: two hosts (two connections, two Indexes) on one
// bucket; what one publishes or removes the other sees through its watch,
// and the secondary maps follow.
func TestIndexPropagation(t *testing.T) {
	ctx := context.Background()
	emb, _, kv1 := busWithBuckets(t)
	kv2 := mustKV(t, connect(t, emb, ""), kv1.Bucket())
	// One entry exists before either index starts.
	pre := entry("ns1", "pre/x", loc(9, 1<<20, 1))
	if err := NewIndex(kv1, nil).Publish(ctx, pre); err != nil {
		t.Fatal(err)
	}
	x1, x2 := NewIndex(kv1, nil), NewIndex(kv2, nil)
	x1.resync, x2.resync = time.Hour, time.Hour // test the watch itself, not its repair
	runIndex(t, x1)
	runIndex(t, x2)
	if !lookupEq(x1, pre) || !lookupEq(x2, pre) || x2.Len() != 1 {
		t.Fatalf("initial load: %v %v", x1.Len(), x2.Len())
	}

	a := entry("ns1", "m/llama/a", loc(1, 1<<20, 10), pool.Location{}, loc(2, 2<<20, 11))
	b := entry("ns1", "m/llama/b", loc(1, 3<<20, 10))
	c := entry("ns2", "m/c", loc(2, 4<<20, 11))
	for _, e := range []FileEntry{a, b, c} {
		if err := x1.Publish(ctx, e); err != nil {
			t.Fatal(err)
		}
		if !lookupEq(x1, e) { // the publisher sees it at once
			t.Fatalf("publisher does not see %s", e.Path)
		}
	}
	testenv.Eventually(t, 15*time.Second, func() bool {
		return lookupEq(x2, a) && lookupEq(x2, b) && lookupEq(x2, c) && x2.Len() == 4
	}, "x2 to see three publishes")
	for _, x := range []*Index{x1, x2} {
		for _, d := range []struct {
			ns, dir string
			want    bool
		}{{"ns1", "m", true}, {"ns1", "m/llama", true}, {"ns1", "m/llama/a", false}, {"ns1", "m/ll", false},
			{"ns1", "", true}, {"ns2", "m", true}, {"ns2", "m/llama", false}, {"ns3", "", false}, {"ns1", "pre", true}} {
			if got := x.HasDir(d.ns, d.dir); got != d.want {
				t.Errorf("HasDir(%q, %q) = %v", d.ns, d.dir, got)
			}
		}
		if got := extentPaths(x, 1); got != "ns1:m/llama/a,ns1:m/llama/b" {
			t.Errorf("ByExtent(1) = %s", got)
		}
		if got := extentPaths(x, 2); got != "ns1:m/llama/a,ns2:m/c" {
			t.Errorf("ByExtent(2) = %s", got)
		}
		if got := extentPaths(x, 0); got != "" { // a's zero Location is not extent 0
			t.Errorf("ByExtent(0) = %s", got)
		}
	}

	// The other host republishes a (new generation, blocks moved to
	// extent 3) and removes b.
	a2 := a
	a2.Gen, a2.Owner, a2.Blocks = 4, "b", []pool.Location{loc(3, 1<<20, 12)}
	if err := x2.Publish(ctx, a2); err != nil {
		t.Fatal(err)
	}
	if err := x2.Remove(ctx, "ns1", "m/llama/b"); err != nil {
		t.Fatal(err)
	}
	if _, ok := x2.Lookup("ns1", "m/llama/b"); ok {
		t.Fatal("remover still sees b")
	}
	testenv.Eventually(t, 15*time.Second, func() bool {
		_, hasB := x1.Lookup("ns1", "m/llama/b")
		return lookupEq(x1, a2) && !hasB && x1.Len() == 3
	}, "x1 to see the update and the removal")
	for _, x := range []*Index{x1, x2} {
		if got := extentPaths(x, 1); got != "" {
			t.Errorf("ByExtent(1) after move and removal = %s", got)
		}
		if got := extentPaths(x, 2); got != "ns2:m/c" {
			t.Errorf("ByExtent(2) = %s", got)
		}
		if got := extentPaths(x, 3); got != "ns1:m/llama/a" {
			t.Errorf("ByExtent(3) = %s", got)
		}
		if !x.HasDir("ns1", "m/llama") {
			t.Error("m/llama gone while a is in it")
		}
	}
	// Removing the last entry below a directory removes the directory;
	// a purge (by an operator, say) acts as a delete.
	if err := x1.Remove(ctx, "ns1", "m/llama/a"); err != nil {
		t.Fatal(err)
	}
	if err := kv1.Purge(ctx, FileKey("ns2", "m/c")); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 15*time.Second, func() bool { return x2.Len() == 1 }, "x2 to see the removal and the purge")
	testenv.Eventually(t, 15*time.Second, func() bool { return x1.Len() == 1 }, "x1 to see the purge")
	for _, x := range []*Index{x1, x2} {
		if x.HasDir("ns1", "m") || x.HasDir("ns1", "m/llama") || x.HasDir("ns2", "") || !x.HasDir("ns1", "") {
			t.Error("directories not released")
		}
		if got := extentPaths(x, 3) + extentPaths(x, 2); got != "" {
			t.Errorf("ByExtent after removals = %s", got)
		}
		if !lookupEq(x, pre) {
			t.Error("pre lost")
		}
	}
	// The caller's slice is not aliased by the cache.
	d := entry("ns1", "d", loc(5, 1<<20, 13))
	if err := x1.Publish(ctx, d); err != nil {
		t.Fatal(err)
	}
	d.Blocks[0].Extent = 6
	if got := extentPaths(x1, 5); got != "ns1:d" {
		t.Errorf("ByExtent(5) = %s", got)
	}
	if got, _ := x1.Lookup("ns1", "d"); got.Blocks[0].Extent != 5 {
		t.Errorf("cache aliases the published slice: %v", got.Blocks)
	}
	if err := x1.Publish(ctx, FileEntry{Namespace: "ns1"}); err == nil {
		t.Error("Publish without a path succeeded")
	}
}

// TestIndexMalformed: values that are not index entries are skipped and
// logged, never crash the watcher; a valid entry overwritten by garbage is
// dropped; later valid updates still arrive.
func TestIndexMalformed(t *testing.T) {
	ctx := context.Background()
	_, _, kv := busWithBuckets(t)
	log, buf := newLog()
	x := NewIndex(kv, log)
	x.resync = time.Hour // test the watch itself, not its repair
	good := entry("ns", "dir/good", loc(1, 1<<20, 1))
	victim := entry("ns", "dir/victim", loc(2, 1<<20, 1))
	for _, e := range []FileEntry{good, victim} {
		if err := x.Publish(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	wrongKey, _ := encodeEntry(entry("ns", "elsewhere", loc(3, 1<<20, 1)))
	v99, _ := msgpack.Marshal(map[string]any{"v": 99, "ns": "ns", "p": "v99"})
	noPath, _ := encodeEntry(FileEntry{Namespace: "ns"})
	badBlocks, _ := msgpack.Marshal(map[string]any{"v": 1, "ns": "ns", "p": "bb", "b": "nope"})
	bad := map[string][]byte{
		FileKey("ns", "garbage"):  []byte("\xc1\xc1 not msgpack"),
		FileKey("ns", "empty"):    nil,
		FileKey("ns", "wrongkey"): wrongKey,
		FileKey("ns", "v99"):      v99,
		FileKey("ns", "nopath"):   noPath,
		FileKey("ns", "bb"):       badBlocks,
		"not-an-index-key":        []byte("x"),
	}
	put := func() {
		for k, v := range bad {
			if _, err := kv.Put(ctx, k, v); err != nil {
				t.Fatal(err)
			}
		}
	}
	put() // before the initial load
	runIndex(t, x)
	if x.Len() != 2 || !lookupEq(x, good) || !lookupEq(x, victim) {
		t.Fatalf("after initial load: Len %d", x.Len())
	}
	put() // and as updates
	if _, err := kv.Put(ctx, FileKey("ns", "dir/victim"), []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	late := entry("ns", "late", loc(4, 1<<20, 2))
	if _, err := kv.Put(ctx, FileKey("ns", "late"), mustEntry(t, late)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 15*time.Second, func() bool { return lookupEq(x, late) }, "the late entry")
	if _, ok := x.Lookup("ns", "dir/victim"); ok || x.Len() != 2 || !lookupEq(x, good) {
		t.Fatalf("after garbage updates: Len %d", x.Len())
	}
	if x.ByExtent(2) != nil && len(x.ByExtent(2)) != 0 {
		t.Fatalf("ByExtent(2) = %v after its entry was overwritten by garbage", x.ByExtent(2))
	}
	if _, ok := x.Lookup("ns", "elsewhere"); ok {
		t.Fatal("entry under a wrong key accepted")
	}
	if n := strings.Count(buf.String(), "malformed pool index value skipped"); n < 2*len(bad)+1 {
		t.Fatalf("%d malformed values logged, want %d:\n%s", n, 2*len(bad)+1, buf)
	}
}

func mustEntry(t *testing.T, e FileEntry) []byte {
	t.Helper()
	b, err := encodeEntry(e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestIndexRestart: the NATS server restarts on the same store; clients
// reconnect over TCP, the cache serves meanwhile, and the watcher recovers
// and sees later updates and removals.
func TestIndexRestart(t *testing.T) {
	ctx := context.Background()
	dir, addr := t.TempDir(), freePort(t)
	emb := startBus(t, dir, addr)
	t.Cleanup(func() { emb.Shutdown() }) // after the clients and indexes stop
	url := "nats://" + addr
	_, kv1 := buckets(t, connect(t, emb, url))
	kv2 := mustKV(t, connect(t, emb, url), kv1.Bucket())
	x1 := NewIndex(kv1, nil)
	log, buf := newLog()
	x2 := NewIndex(kv2, log)
	x2.resync = 200 * time.Millisecond
	runIndex(t, x2)
	before := entry("ns", "before", loc(1, 1<<20, 1))
	gone := entry("ns", "gone", loc(1, 2<<20, 1))
	for _, e := range []FileEntry{before, gone} {
		if err := x1.Publish(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 15*time.Second, func() bool { return x2.Len() == 2 }, "x2 to see the first entries")

	emb.Shutdown()
	if !lookupEq(x2, before) { // the cache serves while the bus is down
		t.Fatal("cache lost during the outage")
	}
	emb = startBus(t, dir, addr)

	after := entry("ns", "sub/after", loc(2, 1<<20, 2))
	retry := func(what string, f func(context.Context) error) {
		t.Helper()
		var err error
		testenv.Eventually(t, 15*time.Second, func() bool {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			err = f(cctx)
			return err == nil
		}, "%s", what)
	}
	t0 := time.Now()
	retry("publish after restart", func(c context.Context) error { return x1.Publish(c, after) })
	retry("remove after restart", func(c context.Context) error { return x1.Remove(c, "ns", "gone") })
	t.Logf("publish and remove took %v after the restart", time.Since(t0))
	testenv.Eventually(t, 15*time.Second, func() bool {
		_, hasGone := x2.Lookup("ns", "gone")
		return lookupEq(x2, after) && !hasGone && x2.Len() == 2
	}, "x2 to see updates after the restart")
	t.Logf("x2 caught up %v after the restart", time.Since(t0))
	if !x2.HasDir("ns", "sub") || extentPaths(x2, 2) != "ns:sub/after" || extentPaths(x2, 1) != "ns:before" {
		t.Fatalf("secondary maps after restart: %v %q %q", x2.HasDir("ns", "sub"), extentPaths(x2, 2), extentPaths(x2, 1))
	}
	// A third index started now loads the state from the restarted server.
	x3 := NewIndex(kv1, nil)
	runIndex(t, x3)
	if x3.Len() != 2 || !lookupEq(x3, after) || !lookupEq(x3, before) {
		t.Fatalf("fresh index after restart: Len %d", x3.Len())
	}
	t.Logf("x2 log:\n%s", buf)
}

// TestCacheOrdering checks the rules that merge local writes with the
// watcher's in-order stream.
func TestCacheOrdering(t *testing.T) {
	e := func(gen uint64) FileEntry { f := entry("ns", "a/b", loc(1, 1<<20, 1)); f.Gen = gen; return f }
	k := FileKey("ns", "a/b")
	gen := func(c *cache) uint64 {
		if cd := c.byName[name{"ns", "a/b"}]; cd != nil {
			return cd.e.Gen
		}
		return 0
	}
	c := newCache()
	c.putLocal(k, 10, e(10))   // our publish, watcher behind
	c.putWatched(k, 8, e(8))   // an older put arrives: ignored
	c.putWatched(k, 10, e(10)) // our own arrives
	if gen(c) != 10 {
		t.Fatalf("gen %d", gen(c))
	}
	c.delWatched(k, 11) // someone removes it
	c.putLocal(k, 9, e(9))
	if gen(c) != 0 {
		t.Fatal("a local publish the watcher already passed resurrected the entry")
	}
	c.putWatched(k, 12, e(12))
	c.delLocal(k)              // our remove, marker not seen yet
	c.putWatched(k, 13, e(13)) // older than our marker: skipped
	if gen(c) != 0 {
		t.Fatal("watched put before our delete marker resurrected the entry")
	}
	c.delWatched(k, 14)        // our marker
	c.putWatched(k, 15, e(15)) // a later publish by another host
	if gen(c) != 15 {
		t.Fatalf("gen %d after delete + put", gen(c))
	}
	c.delLocal(k)
	c.putLocal(k, 20, e(20)) // republished locally before the marker came back
	c.delWatched(k, 19)      // our marker: older than the republish
	if gen(c) != 20 {
		t.Fatalf("gen %d: our own older marker removed a newer publish", gen(c))
	}
	c.dropWatched(k, 21)
	if gen(c) != 0 || len(c.dirs) != 0 || len(c.extents) != 0 || len(c.byKey) != 0 {
		t.Fatalf("state after drop: %+v", c)
	}
}

func TestEnsureBuckets(t *testing.T) {
	ctx := context.Background()
	emb := startBus(t, t.TempDir(), "")
	defer emb.Shutdown()
	js, err := jetstream.New(connect(t, emb, ""))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // idempotent
		l, i, err := EnsureBuckets(ctx, js, "c-1", 0)
		if err != nil {
			t.Fatal(err)
		}
		if l.Bucket() != "ctxmem_c-1_pool_leases" || i.Bucket() != "ctxmem_c-1_pool_index" {
			t.Fatalf("buckets %s %s", l.Bucket(), i.Bucket())
		}
		for _, kv := range []jetstream.KeyValue{l, i} {
			st, err := kv.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			cfg := st.(*jetstream.KeyValueBucketStatus).Config()
			if cfg.History != 1 || cfg.Storage != jetstream.FileStorage || cfg.Replicas != 1 || cfg.TTL != 0 {
				t.Fatalf("%s config %+v", kv.Bucket(), cfg)
			}
		}
	}
	for _, bad := range []string{"", "a.b", "a b", strings.Repeat("x", 65)} {
		if _, _, err := EnsureBuckets(ctx, js, bad, 1); err == nil {
			t.Errorf("cluster %q accepted", bad)
		}
	}
	if err := validToken("ok_Name-9"); err != nil {
		t.Error(err)
	}
}
