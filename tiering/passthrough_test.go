package tiering_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/internal/testenv"
	"github.com/ctxmem/ctxmemd/tiering"
	"github.com/ctxmem/ctxmemd/tiering/faulttier"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// TestPassthroughMemFile: an object opened for passthrough is served from
// its memory file: bytes the daemon wrote are in the file, bytes written
// to the file are the object's (size included) while it is open, are
// written back when the writer closes, survive a restart, and read back
// after the object's blocks were evicted and filled again.
func TestPassthroughMemFile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	fs := openFaultStack(t, dir, 8<<20, 0, false, nil)
	const bs = 64 << 10
	id, err := fs.store.Create("ns", bs, "file")
	if err != nil {
		t.Fatal(err)
	}
	first := data(21, 3*bs+100)
	if _, err := fs.store.WriteAt(ctx, id, first, 0); err != nil {
		t.Fatal(err)
	}
	flushWithin(t, fs.store, id, 5*time.Second)
	if _, err := fs.store.Demote(ctx, id); err != nil { // not resident: the open fills it
		t.Fatal(err)
	}
	pt, err := fs.store.OpenPassthrough(ctx, id, true)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(first)+10)
	n, err := pt.File.ReadAt(got, 0)
	if n != len(first) || !bytes.Equal(got[:n], first) {
		t.Fatalf("memory file holds %d bytes (%v); want the object's %d", n, err, len(first))
	}
	// A write through the file that extends it: the object's size follows
	// while it is open, its bytes once taken in.
	more := data(22, 2*bs)
	if _, err := pt.File.WriteAt(more, int64(len(first))); err != nil {
		t.Fatal(err)
	}
	want := append(append([]byte{}, first...), more...)
	if info, _ := fs.store.Stat(id); info.Size != int64(len(want)) {
		t.Fatalf("Stat while open: size %d; want %d", info.Size, len(want))
	}
	if _, err := fs.store.Demote(ctx, id); !errors.Is(err, tiering.ErrPinned) {
		t.Fatalf("Demote of an object open by passthrough = %v; want ErrPinned", err)
	}
	if err := fs.store.ClosePassthrough(id, true); err != nil {
		t.Fatal(err)
	}
	pt.File.Close()
	flushWithin(t, fs.store, id, 5*time.Second)
	if got := readAll(t, fs.store, id, len(want)+1); !bytes.Equal(got, want) {
		t.Fatal("daemon read after passthrough writes: wrong bytes")
	}
	// The daemon's writes land in the memory file too.
	patch := data(23, 4096)
	if _, err := fs.store.WriteAt(ctx, id, patch, bs); err != nil {
		t.Fatal(err)
	}
	copy(want[bs:], patch)
	// Evict, open again (filled from G3), check through the file.
	flushWithin(t, fs.store, id, 5*time.Second)
	if _, err := fs.store.Demote(ctx, id); err != nil {
		t.Fatal(err)
	}
	pt, err = fs.store.OpenPassthrough(ctx, id, false)
	if err != nil {
		t.Fatal(err)
	}
	got = make([]byte, len(want))
	if n, _ := pt.File.ReadAt(got, 0); n != len(want) || !bytes.Equal(got, want) {
		t.Fatal("memory file after eviction and refill: wrong bytes")
	}
	fs.store.ClosePassthrough(id, false)
	pt.File.Close()
	fs.close(t)
	fs.open(t, false)
	defer fs.close(t)
	if got := readAll(t, fs.store, id, len(want)+1); !bytes.Equal(got, want) {
		t.Fatal("after restart: wrong bytes")
	}
}

// TestPassthroughNotForExports: NBD exports are never served from a
// memory file.
func TestPassthroughNotForExports(t *testing.T) {
	fs := openFaultStack(t, t.TempDir(), 8<<20, 0, true, nil)
	defer fs.close(t)
	id := newExport(t, fs, 64<<10, 2)
	if _, err := fs.store.OpenPassthrough(context.Background(), id, false); !errors.Is(err, tiering.ErrNoPassthrough) {
		t.Fatalf("OpenPassthrough of an export = %v; want ErrNoPassthrough", err)
	}
}

// TestPassthroughMemFileCap: at most PassthroughMaxFiles objects keep a
// memory file, soon after (a trimmer goroutine, off the writer's and the
// opener's path); the least recently closed give theirs up (their G2 bytes
// move back to ordinary buffers and still read right), and with every
// memory file open a further object is refused (served by the daemon).
func TestPassthroughMemFileCap(t *testing.T) {
	ctx := context.Background()
	fs := openFaultStack(t, t.TempDir(), 8<<20, 0, false, func(c *tiering.Config) { c.PassthroughMaxFiles = 2 })
	defer fs.close(t)
	ids := make([]tiering.ObjectID, 5)
	for i := range ids {
		ids[i], _ = fs.store.Create("ns", 64<<10, "file")
		if _, err := fs.store.WriteAt(ctx, ids[i], data(uint64(30+i), 100<<10), 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		pt, err := fs.store.OpenPassthrough(ctx, id, false)
		if err != nil {
			t.Fatal(err)
		}
		fs.store.ClosePassthrough(id, false)
		pt.File.Close()
	}
	// Files closed less than a second ago are kept (go-fuse may still
	// hold them registered); once older, the next open trims them.
	time.Sleep(1100 * time.Millisecond)
	pt, err := fs.store.OpenPassthrough(ctx, ids[4], false)
	if err != nil {
		t.Fatal(err)
	}
	fs.store.ClosePassthrough(ids[4], false)
	pt.File.Close()
	testenv.Eventually(t, 5*time.Second, func() bool { return fs.store.Stats().PassthroughObjects <= 2 },
		"at most 2 objects keeping a memory file (the trim runs off the opener's path)")
	for i, id := range ids {
		if got := readAll(t, fs.store, id, 100<<10); !bytes.Equal(got, data(uint64(30+i), 100<<10)) {
			t.Fatalf("object %d: wrong bytes after its memory file was given up", i)
		}
	}
	// The two that kept theirs (the most recently closed) are opened: with
	// both open, an object without a memory file is refused one.
	a, err := fs.store.OpenPassthrough(ctx, ids[3], false)
	if err != nil {
		t.Fatal(err)
	}
	b, err := fs.store.OpenPassthrough(ctx, ids[4], false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.store.OpenPassthrough(ctx, ids[0], false); !errors.Is(err, tiering.ErrNoPassthrough) {
		t.Fatalf("third open with a cap of 2, both open: %v; want ErrNoPassthrough", err)
	}
	for _, x := range []struct {
		id tiering.ObjectID
		f  tiering.PassthroughInfo
	}{{ids[3], a}, {ids[4], b}} {
		fs.store.ClosePassthrough(x.id, false)
		x.f.File.Close()
	}
}

// TestMemFilesFromFirstWrite: with MemFiles a file object's G2 blocks are
// in its memory file from its first write, so the file a passthrough open
// hands out already holds the bytes written through the daemon.
func TestMemFilesFromFirstWrite(t *testing.T) {
	ctx := context.Background()
	fs := openFaultStack(t, t.TempDir(), 8<<20, 0, false, func(c *tiering.Config) { c.MemFiles = true })
	defer fs.close(t)
	id, _ := fs.store.Create("ns", 64<<10, "file")
	want := data(40, 200<<10)
	if _, err := fs.store.WriteAt(ctx, id, want, 0); err != nil {
		t.Fatal(err)
	}
	if n := fs.store.Stats().PassthroughObjects; n != 1 {
		t.Fatalf("%d objects with a memory file after the first write; want 1", n)
	}
	pt, err := fs.store.OpenPassthrough(ctx, id, false)
	if err != nil {
		t.Fatal(err)
	}
	defer pt.File.Close()
	defer fs.store.ClosePassthrough(id, false)
	got := make([]byte, len(want)+1)
	if n, _ := pt.File.ReadAt(got, 0); n != len(want) || !bytes.Equal(got[:n], want) {
		t.Fatalf("memory file: %d bytes; want the %d written", n, len(want))
	}
	if got := readAll(t, fs.store, id, len(want)); !bytes.Equal(got, want) {
		t.Fatal("daemon read: wrong bytes")
	}
}

// TestMemFilePromotionFailureKeepsInstalledBlock: two readers promote the
// same block of an object with a memory file (the same pages); the one
// whose read fails (its request interrupted) must not zero or punch the
// pages the other installed (it did: later readers got zeros).
func TestMemFilePromotionFailureKeepsInstalledBlock(t *testing.T) {
	ctx := context.Background()
	fs := openFaultStack(t, t.TempDir(), 8<<20, 0, false, func(c *tiering.Config) { c.MemFiles = true })
	defer fs.close(t)
	const bs = 64 << 10
	id, _ := fs.store.Create("ns", bs, "file")
	want := data(7, bs)
	if _, err := fs.store.WriteAt(ctx, id, want, 0); err != nil {
		t.Fatal(err)
	}
	flushWithin(t, fs.store, id, 5*time.Second)
	if _, err := fs.store.Demote(ctx, id); err != nil {
		t.Fatal(err)
	}
	gate := faulttier.NewGate()
	fs.g3.Inject(faulttier.Fault{Op: faulttier.Get, Times: 1, Gate: gate})
	actx, cancel := context.WithCancel(ctx)
	aerr := make(chan error, 1)
	go func() {
		_, err := fs.store.ReadAt(actx, id, make([]byte, bs), 0)
		aerr <- err
	}()
	<-gate.Arrived()
	// Reader B promotes and installs the block (same pages).
	got := make([]byte, bs)
	if n, err := fs.store.ReadAt(ctx, id, got, 0); err != nil || n != bs || !bytes.Equal(got, want) {
		t.Fatalf("reader B: %d %v eq=%v", n, err, bytes.Equal(got, want))
	}
	cancel() // reader A's request is interrupted
	t.Logf("reader A: %v", <-aerr)
	got = make([]byte, bs)
	if _, err := fs.store.ReadAt(ctx, id, got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		z := 0
		for _, c := range got {
			if c == 0 {
				z++
			}
		}
		t.Fatalf("reader C after A's failed promotion: wrong bytes (%d of %d zero)", z, bs)
	}
}

// TestPassthroughDiscardAndCorruptBlock: a TRIM of whole blocks of an
// object open by passthrough reads as zeros through the memory file too,
// the partial edges included; and an open that finds a block corrupt in
// every tier loses the object (ErrLost) without keeping a memory file.
func TestPassthroughDiscardAndCorruptBlock(t *testing.T) {
	ctx := context.Background()
	fs := openFaultStack(t, t.TempDir(), 8<<20, 0, false, func(c *tiering.Config) { c.MemFiles = true })
	defer fs.close(t)
	const bs = 64 << 10
	id, _ := fs.store.Create("ns", bs, "file")
	want := data(50, 5*bs)
	if _, err := fs.store.WriteAt(ctx, id, want, 0); err != nil {
		t.Fatal(err)
	}
	pt, err := fs.store.OpenPassthrough(ctx, id, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.store.Discard(ctx, id, bs/2, 3*bs); err != nil { // half of 0, all of 1-2, half of 3
		t.Fatal(err)
	}
	clear(want[bs/2 : bs/2+3*bs])
	got := make([]byte, len(want))
	if n, _ := pt.File.ReadAt(got, 0); n != len(want) || !bytes.Equal(got, want) {
		t.Fatal("memory file after a TRIM: not the object's bytes")
	}
	if got := readAll(t, fs.store, id, len(want)); !bytes.Equal(got, want) {
		t.Fatal("daemon read after a TRIM: wrong bytes")
	}
	fs.store.ClosePassthrough(id, false)
	pt.File.Close()

	bad, _ := fs.store.Create("ns", bs, "file")
	if _, err := fs.store.WriteAt(ctx, bad, data(51, 2*bs), 0); err != nil {
		t.Fatal(err)
	}
	flushWithin(t, fs.store, bad, 5*time.Second)
	if _, err := fs.store.Demote(ctx, bad); err != nil {
		t.Fatal(err)
	}
	before := fs.store.Stats().PassthroughObjects
	undo := fs.g3.Inject(faulttier.Fault{Op: faulttier.Get, Err: tier.ErrCorrupt})
	defer undo()
	if _, err := fs.store.OpenPassthrough(ctx, bad, false); !errors.Is(err, tiering.ErrLost) {
		t.Fatalf("OpenPassthrough of an object with a corrupt block = %v; want ErrLost", err)
	}
	if _, err := fs.store.Stat(bad); !errors.Is(err, tiering.ErrNotExist) {
		t.Fatalf("Stat of the lost object = %v; want ErrNotExist", err)
	}
	if n := fs.store.Stats().PassthroughObjects; n >= before {
		t.Fatalf("memory files %d after losing an object that had one (%d before)", n, before)
	}
}
