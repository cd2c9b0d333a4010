package tiering_test

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/internal/clock"
	"github.com/ctxmem/ctxmemd/internal/testenv"
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

// TestWriteBackHoldsInPlaceRewrites: a block already whole in G2 (an NBD
// export block) rewritten in 4 KiB pieces, each further apart than the idle
// delay, is stored once after rewriteMaxAge, not once per write (each time
// whole: 16x the bytes at 64 KiB blocks), and its bytes are the last ones.
func TestWriteBackHoldsInPlaceRewrites(t *testing.T) {
	ctx := context.Background()
	const delay = 5 * time.Millisecond // rewriteMaxAge x delay = 500 ms
	fs := openFaultStack(t, t.TempDir(), 8<<20, 0, false, func(c *tiering.Config) { c.WriteBackDelay = delay })
	defer fs.close(t)
	const bs = 64 << 10
	id, err := fs.store.CreateWith("ns", bs, tiering.CreateOptions{Kind: tiering.KindNBD, Durability: tiering.DurabilityDevice})
	if err != nil {
		t.Fatal(err)
	}
	want := data(7, bs)
	if _, err := fs.store.WriteAt(ctx, id, want, 0); err != nil {
		t.Fatal(err)
	}
	waitClean(t, fs.store, id, 5*time.Second) // written whole: stored at once
	before := fs.g3.Calls(faulttier.Put)
	start := time.Now()
	for i, off := range []int{8 << 10, 32 << 10, 4 << 10, 60 << 10, 0, 16 << 10, 44 << 10, 12 << 10} {
		p := data(uint64(20+i), 4096)
		copy(want[off:], p)
		if _, err := fs.store.WriteAt(ctx, id, p, int64(off)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * delay) // idle longer than the delay between writes
	}
	waitClean(t, fs.store, id, 5*time.Second) // stored by age, no Flush
	puts := fs.g3.Calls(faulttier.Put) - before
	if time.Since(start) < 400*time.Millisecond && puts != 1 {
		t.Fatalf("%d G3 puts for 8 rewrites of one whole block within its hold; want 1", puts)
	}
	if puts > 2 {
		t.Fatalf("%d G3 puts for 8 rewrites of one whole block; want 1 (2 if the machine stalled past the hold)", puts)
	}
	if got := readAll(t, fs.store, id, bs); !bytes.Equal(got, want) {
		t.Fatal("wrong bytes after coalesced in-place rewrites")
	}
}

// TestWriteBackWatermarkReleasesOldest: past half the dirty bound the
// oldest held-back blocks are stored (about the excess), the newest stay
// held, and dirty bytes settle near the watermark instead of every new
// dirty block being stored at once.
func TestWriteBackWatermarkReleasesOldest(t *testing.T) {
	ctx := context.Background()
	fs := openFaultStack(t, t.TempDir(), 8<<20, 0, false, func(c *tiering.Config) {
		c.WriteBackDelay = time.Hour // only the watermark (or Flush) stores
		c.DirtyBytes = 2 << 20       // watermark 1 MiB
	})
	defer fs.close(t)
	const bs = 64 << 10
	const n = 24 // 1.5 MiB of dirty blocks: 0.5 MiB over the watermark
	ids := make([]tiering.ObjectID, n)
	for i := range ids {
		id, err := fs.store.CreateWith("ns", bs, tiering.CreateOptions{Kind: tiering.KindNBD, Durability: tiering.DurabilityDevice})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
		if _, err := fs.store.WriteAt(ctx, id, data(uint64(i), bs), 0); err != nil {
			t.Fatal(err)
		}
		waitClean(t, fs.store, id, 5*time.Second)
	}
	for _, id := range ids {
		if _, err := fs.store.WriteAt(ctx, id, data(99, 4096), 4096); err != nil {
			t.Fatal(err)
		}
	}
	waitClean(t, fs.store, ids[0], 5*time.Second) // the oldest is stored
	deadline := time.Now().Add(5 * time.Second)
	for fs.store.Stats().DirtyBytes > 1<<20 {
		if time.Now().After(deadline) {
			t.Fatalf("dirty bytes %d still over the 1 MiB watermark", fs.store.Stats().DirtyBytes)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if info, err := fs.store.Stat(ids[n-1]); err != nil || !info.Dirty {
		t.Fatalf("newest rewritten block: dirty=%v err=%v; want still held back under the watermark", info.Dirty, err)
	}
	for _, id := range ids {
		flushWithin(t, fs.store, id, 5*time.Second)
		want := data(uint64(slices.Index(ids, id)), bs)
		copy(want[4096:], data(99, 4096))
		if got := readAll(t, fs.store, id, bs); !bytes.Equal(got, want) {
			t.Fatalf("object %d: wrong bytes after watermark write-back", id)
		}
	}
}

// TestWriteBackDelayOnAFakeClock: the hold-back runs on the core's clock
// (Config.Clock): a block written under an hour's WriteBackDelay stays
// dirty through 50 minutes of fake time however long the test waits, and
// is stored once the fake clock passes the hour, without sleeping for it.
func TestWriteBackDelayOnAFakeClock(t *testing.T) {
	ctx := context.Background()
	fake := clock.NewFake(time.Unix(1_700_000_000, 0))
	fs := openFaultStack(t, t.TempDir(), 8<<20, 0, false, func(c *tiering.Config) {
		c.WriteBackDelay = time.Hour
		c.Clock = fake
	})
	defer fs.close(t)
	id, _ := fs.store.Create("ns", 64<<10, "file")
	if _, err := fs.store.WriteAt(ctx, id, data(7, 4096), 0); err != nil {
		t.Fatal(err)
	}
	for range 5 { // 50 minutes
		fake.Advance(10 * time.Minute)
		time.Sleep(20 * time.Millisecond) // room for a wrong release to happen
		if info, _ := fs.store.Stat(id); !info.Dirty {
			t.Fatalf("stored after %v of fake time; held back for an hour", fake.Since(time.Unix(1_700_000_000, 0)))
		}
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		fake.Advance(time.Minute)
		info, _ := fs.store.Stat(id)
		return !info.Dirty
	}, "still dirty at %v of fake time", fake.Since(time.Unix(1_700_000_000, 0)))
	if el := fake.Since(time.Unix(1_700_000_000, 0)); el < time.Hour {
		t.Fatalf("stored at %v of fake time", el)
	}
}
