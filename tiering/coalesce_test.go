package tiering_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/tiering"
	"github.com/ctxmem/ctxmemd/tiering/faulttier"
)

// TestWriteBackCoalesces: a block written in 16 pieces is stored once
// (write-back waits until it has not been written for WriteBackDelay);
// Flush does not wait for the delay; a block left alone is stored by
// itself; Expedite queues a held-back block at once.
func TestWriteBackCoalesces(t *testing.T) {
	ctx := context.Background()
	fs := openFaultStack(t, t.TempDir(), 8<<20, 0, false, func(c *tiering.Config) { c.WriteBackDelay = time.Hour })
	defer fs.close(t)
	const bs = 64 << 10
	id, err := fs.store.Create("ns", bs, "file")
	if err != nil {
		t.Fatal(err)
	}
	want := data(3, bs-4096) // not a full block: a full one is stored at once
	for off := 0; off < len(want); off += 4096 {
		if _, err := fs.store.WriteAt(ctx, id, want[off:off+4096], int64(off)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond)
	if n := fs.g3.Calls(faulttier.Put); n != 0 {
		t.Fatalf("%d G3 puts while the block is held back; want 0", n)
	}
	flushWithin(t, fs.store, id, 5*time.Second) // an hour's delay: Flush expedites
	if n := fs.g3.Calls(faulttier.Put); n != 1 {
		t.Fatalf("%d G3 puts for one block written in 15 pieces; want 1", n)
	}
	if got := readAll(t, fs.store, id, len(want)); !bytes.Equal(got, want) {
		t.Fatal("wrong bytes after a coalesced write-back")
	}

	// Expedite (a file's last writer closed it) queues it at once.
	id2, _ := fs.store.Create("ns", bs, "file")
	if _, err := fs.store.WriteAt(ctx, id2, data(4, 4096), 0); err != nil {
		t.Fatal(err)
	}
	fs.store.Expedite(id2)
	waitClean(t, fs.store, id2, 5*time.Second)

	// A full block is stored at once, without Flush or Expedite.
	id3, _ := fs.store.Create("ns", bs, "file")
	if _, err := fs.store.WriteAt(ctx, id3, data(5, bs), 0); err != nil {
		t.Fatal(err)
	}
	waitClean(t, fs.store, id3, 5*time.Second)
}

// TestWriteBackDelayExpires: with a short delay a held-back block is
// stored by itself once it has not been written for that long.
func TestWriteBackDelayExpires(t *testing.T) {
	ctx := context.Background()
	fs := openFaultStack(t, t.TempDir(), 8<<20, 0, false, func(c *tiering.Config) { c.WriteBackDelay = 20 * time.Millisecond })
	defer fs.close(t)
	id, _ := fs.store.Create("ns", 64<<10, "file")
	if _, err := fs.store.WriteAt(ctx, id, data(6, 4096), 0); err != nil {
		t.Fatal(err)
	}
	waitClean(t, fs.store, id, 5*time.Second)
}

// waitClean waits until object id has no dirty block.
func waitClean(t *testing.T, s *tiering.Store, id tiering.ObjectID, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		info, err := s.Stat(id)
		if err != nil {
			t.Fatal(err)
		}
		if !info.Dirty {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("object %d still dirty after %v", id, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
