package sharing

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ctxmem/ctxmemd/fabric/g35"
	"github.com/ctxmem/ctxmemd/fabric/pool"
	"github.com/ctxmem/ctxmemd/fabric/poolkv"
	"github.com/ctxmem/ctxmemd/internal/testenv"
	"github.com/ctxmem/ctxmemd/sidecar/bus"
	"github.com/ctxmem/ctxmemd/tiering"
)

// names is a Files over a map (the catalog's part in these tests).
type names struct {
	mu sync.Mutex
	m  map[tiering.ObjectID][2]string
}

func (n *names) Path(id tiering.ObjectID) (string, string, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	p, ok := n.m[id]
	return p[0], p[1], ok
}

// host is one simulated host: a store over its pool tier, the cluster's
// index and a running Sharer.
type host struct {
	st    *tiering.Store
	sh    *Sharer
	files *names
}

// cluster is a pool file, an in-process NATS server with the pool
// buckets, and hosts made by add.
type cluster struct {
	t      *testing.T
	path   string
	leases *pool.MemLeases
	index  jetstream.KeyValue
	emb    *bus.Embedded
}

func newCluster(t *testing.T) *cluster {
	path := filepath.Join(t.TempDir(), "pool.img")
	if _, err := pool.Format(path, pool.FormatOptions{Size: 16 << 20, ExtentSize: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	emb, err := bus.StartEmbedded(bus.EmbeddedOptions{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emb.Shutdown)
	nc, err := bus.Connect(bus.Options{Embedded: emb, Name: t.Name(), Log: slog.New(slog.DiscardHandler)}, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, index, err := poolkv.EnsureBuckets(ctx, js, "t", 1)
	if err != nil {
		t.Fatal(err)
	}
	return &cluster{t: t, path: path, leases: pool.NewMemLeases(15, pool.MemLeaseOptions{}), index: index, emb: emb}
}

// add starts host name; eager turns on eager sharing.
func (c *cluster) add(name string, eager bool) *host {
	t := c.t
	ctx, cancel := context.WithCancel(context.Background())
	p, err := pool.Open(c.path, pool.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := pool.NewWriter(ctx, p, c.leases.Leaser(name), pool.WriterOptions{Host: name})
	if err != nil {
		t.Fatal(err)
	}
	tr := g35.New(p, w, g35.Options{})
	log := slog.New(slog.DiscardHandler)
	st, err := tiering.Open(ctx, tiering.Config{DataDir: t.TempDir(), G2Bytes: 16 << 20, G35: tr, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	idx := poolkv.NewIndex(c.index, log)
	sh, err := New(Config{Host: name, Store: st, Tier: tr, Index: idx, Eager: eager, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	h := &host{st: st, sh: sh, files: &names{m: map[tiering.ObjectID][2]string{}}}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = idx.Run(ctx) }()
	go func() { defer wg.Done(); _ = sh.Run(ctx, h.files) }()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		st.Close()
		tr.Close()
	})
	select {
	case <-idx.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("index not loaded")
	}
	return h
}

// write creates ns/path on h with b, closes it (Expedite) and waits until
// it is written back.
func (h *host) write(t *testing.T, ns, path string, b []byte) tiering.ObjectID {
	t.Helper()
	ctx := context.Background()
	id, err := h.st.Create(ns, 4096, "file")
	if err != nil {
		t.Fatal(err)
	}
	h.files.mu.Lock()
	h.files.m[id] = [2]string{ns, path}
	h.files.mu.Unlock()
	if _, err := h.st.WriteAt(ctx, id, b, 0); err != nil {
		t.Fatal(err)
	}
	h.st.Expedite(id)
	if err := h.st.Flush(ctx, id); err != nil {
		t.Fatal(err)
	}
	return id
}

// waitImport imports ns/path on h as soon as the owner's share reaches
// h's index (up to 10 s) and returns the new object.
func (h *host) waitImport(t *testing.T, ns, path string) tiering.ObjectID {
	t.Helper()
	var id tiering.ObjectID
	testenv.Eventually(t, 10*time.Second, func() bool {
		got, _, ok, err := h.sh.Import(context.Background(), ns, path)
		if err != nil {
			t.Fatal(err)
		}
		id = got
		return ok
	}, "%s/%s never imported: the share did not reach this host", ns, path)
	return id
}

func (h *host) read(t *testing.T, id tiering.ObjectID, n int) []byte {
	t.Helper()
	got := make([]byte, n)
	if k, err := h.st.ReadAt(context.Background(), id, got, 0); err != nil || k != n {
		t.Fatalf("read object %d: %d bytes, %v", id, k, err)
	}
	return got
}

func pattern(seed byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// TestEagerShareImportAndWithdraw: a file stored on an eager host is
// shared without being asked; another host imports it by name and reads
// the same bytes from the pool; deleting it on the owner withdraws the
// index entry, so a later lookup elsewhere misses instead of importing
// blocks that are being reused.
func TestEagerShareImportAndWithdraw(t *testing.T) {
	c := newCluster(t)
	a, b := c.add("a", true), c.add("b", false)
	want := pattern(3, 3*4096+17)
	id := a.write(t, "kv", "p/blk0", want)

	testenv.Eventually(t, 10*time.Second, func() bool { return a.sh.Stats().EagerShared == 1 },
		"eager share of a stored file: %+v", a.sh.Stats())
	if st := a.sh.Stats(); st.EagerShareNs <= 0 || st.EagerWaitNs < 0 {
		t.Fatalf("eager share times not counted: %+v", st)
	}
	var imported tiering.ObjectID
	testenv.Eventually(t, 10*time.Second, func() bool {
		got, size, ok, err := b.sh.Import(context.Background(), "kv", "p/blk0")
		if err != nil {
			t.Fatal(err)
		}
		if ok && size != int64(len(want)) {
			t.Fatalf("imported size %d, want %d", size, len(want))
		}
		imported = got
		return ok
	}, "host b never saw the share")
	if got := b.read(t, imported, len(want)); !bytes.Equal(got, want) {
		t.Fatal("imported bytes differ from the owner's")
	}
	if _, _, ok, _ := a.sh.Import(context.Background(), "kv", "p/blk0"); ok {
		t.Fatal("the owner imported its own file")
	}
	if !b.sh.HasDir("kv", "p") {
		t.Fatal("HasDir of the shared file's directory is false")
	}

	if err := a.st.Delete(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		_, _, ok, _ := b.sh.Import(context.Background(), "kv", "p/blk0")
		return !ok
	}, "the entry of a deleted file was not withdrawn")

	notes := map[NoteKind]int{}
	for len(a.sh.Notes()) > 0 {
		notes[(<-a.sh.Notes()).Kind]++
	}
	if notes[NoteShared] != 1 {
		t.Fatalf("owner notes %v; want one NoteShared", notes)
	}
}

// TestShareWithoutEagerWaitsForTheCommand: without eager sharing a stored
// file is shared only by Share (the scheduler's command), and a forced
// share of a file whose only copies are in the pool is refused.
func TestShareWithoutEagerWaitsForTheCommand(t *testing.T) {
	c := newCluster(t)
	a, b := c.add("a", false), c.add("b", false)
	want := pattern(9, 2*4096)
	id := a.write(t, "kv", "q/blk0", want)
	time.Sleep(200 * time.Millisecond) // what an eager sharer would have needed
	if _, _, ok, _ := b.sh.Import(context.Background(), "kv", "q/blk0"); ok {
		t.Fatal("shared without eager sharing or a command")
	}
	if n, err := a.sh.Share(context.Background(), id, "kv", "q/blk0", false); err != nil || n != 2 {
		t.Fatalf("share: %d blocks, %v; want 2", n, err)
	}
	imported := b.waitImport(t, "kv", "q/blk0")
	// Not read yet, so its blocks are only in the pool.
	if _, err := b.sh.Share(context.Background(), imported, "kv", "q/blk0", true); !errors.Is(err, tiering.ErrInvalid) {
		t.Fatalf("a forced share of an import whose blocks are only in the pool: %v; want ErrInvalid", err)
	}
	if got := b.read(t, imported, len(want)); !bytes.Equal(got, want) {
		t.Fatal("imported bytes differ")
	}
	if st := a.sh.Stats(); st.Shares != 1 || st.EagerShared != 0 {
		t.Fatalf("owner stats %+v", st)
	}
}

// TestStaleRecordWithdrawsTheEntryAfterTheImportIsLost: a corrupt pool
// record makes the importing host's file lost (never wrong bytes) and its
// index entry is withdrawn by the record's location, whichever of the
// store's lost event and the pool's stale event the sharer sees first, so
// the next lookup misses instead of importing the bad record again.
func TestStaleRecordWithdrawsTheEntryAfterTheImportIsLost(t *testing.T) {
	c := newCluster(t)
	a, b := c.add("a", false), c.add("b", false)
	want := pattern(11, 4096)
	id := a.write(t, "kv", "s/blk0", want)
	if _, err := a.sh.Share(context.Background(), id, "kv", "s/blk0", false); err != nil {
		t.Fatal(err)
	}
	imported := b.waitImport(t, "kv", "s/blk0")
	e, ok := b.sh.cfg.Index.Lookup("kv", "s/blk0")
	if !ok || len(e.Blocks) != 1 {
		t.Fatalf("entry %+v", e)
	}
	// Flip a payload byte of the record (its header is the first 4 KiB).
	f, err := os.OpenFile(c.path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	one := make([]byte, 1)
	off := e.Blocks[0].Offset + 4096 + 100
	if _, err := f.ReadAt(one, off); err != nil {
		t.Fatal(err)
	}
	one[0] ^= 0xff
	if _, err := f.WriteAt(one, off); err != nil {
		t.Fatal(err)
	}
	f.Close()
	got := make([]byte, len(want))
	if _, err := b.st.ReadAt(context.Background(), imported, got, 0); err == nil && !bytes.Equal(got, want) {
		t.Fatal("WRONG BYTES from a corrupt pool record")
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		_, ok := b.sh.cfg.Index.Lookup("kv", "s/blk0")
		return !ok
	}, "the entry pointing at the corrupt record was not withdrawn")
	if st := b.sh.Stats(); st.Stale == 0 {
		t.Fatalf("stats %+v: no stale record counted", st)
	}
	var stale bool
	for len(b.sh.Notes()) > 0 {
		n := <-b.sh.Notes()
		stale = stale || (n.Kind == NoteStale && n.Namespace == "kv" && n.Path == "s/blk0")
	}
	if !stale {
		t.Fatal("no NoteStale for the withdrawn entry")
	}
}

// TestEagerShareWithTheBusDown: with the index's bus gone, an eager share
// fails within its deadline and is counted as skipped; the file stays
// readable on its host and nothing waits without bound.
func TestEagerShareWithTheBusDown(t *testing.T) {
	c := newCluster(t)
	a := c.add("a", true)
	c.emb.Shutdown()
	want := pattern(21, 2*4096)
	id := a.write(t, "kv", "d/blk0", want)
	testenv.Eventually(t, 20*time.Second, func() bool { return a.sh.Stats().EagerSkipped == 1 },
		"eager share with the bus down not given up: %+v", a.sh.Stats())
	if st := a.sh.Stats(); st.EagerShared != 0 || st.Shares != 0 {
		t.Fatalf("stats %+v: shared with no index to publish in", st)
	}
	if got := a.read(t, id, len(want)); !bytes.Equal(got, want) {
		t.Fatal("the file's own bytes changed")
	}
}
