package nbd

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/catalog"
	"github.com/ctxmem/ctxmemd/internal/testchild"
)

// The crash tests run the server in a child process (this test binary
// again, in role "crash-serve": see TestMain), kill it with SIGKILL and
// start a new one on the same directories.

const crashExportSize = 16 << 20

// crashServe is the child's body: it serves export "disk" from a store in
// $NBD_CRASH_DIR on $NBD_CRASH_SOCK until killed.
func crashServe(t testing.TB) {
	dir, sock := os.Getenv("NBD_CRASH_DIR"), os.Getenv("NBD_CRASH_SOCK")
	st := openStore(t, dir, 64<<20)
	srv, err := NewServer(context.Background(), st, []Export{{Name: "disk", Size: crashExportSize, BlockSize: 16 << 10}},
		Options{StateDir: dir, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := Listen("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("ready\n")
	_ = srv.Serve(context.Background(), ln) // until SIGKILL
}

// startChild starts a server process on dir and waits until it listens.
func startChild(t *testing.T, dir, sock string) *testchild.Child {
	t.Helper()
	c := testchild.Start(t, "crash-serve", "NBD_CRASH_DIR="+dir, "NBD_CRASH_SOCK="+sock)
	c.Expect(t, "ready", 60*time.Second)
	return c
}

// TestKill9AfterFlush: bytes written and flushed through NBD read back
// after the daemon is killed with SIGKILL and restarted on the same
// directories.
func TestKill9AfterFlush(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(t.TempDir(), "s.sock")
	child := startChild(t, dir, sock)
	r := &running{sock: sock}

	a := pattern(31, 3<<20)
	c := structuredClient(t, r, "disk")
	if rep := c.do(cmdWrite, 0, 1<<20, uint32(len(a)), a); rep.errno != 0 {
		t.Fatal(rep.errno)
	}
	if rep := c.do(cmdFlush, 0, 0, 0, nil); rep.errno != 0 {
		t.Fatal(rep.errno)
	}
	b := pattern(32, 64<<10)
	if rep := c.do(cmdWrite, cmdFlagFUA, 8<<20, uint32(len(b)), b); rep.errno != 0 {
		t.Fatal(rep.errno)
	}
	child.Kill9()

	child = startChild(t, dir, sock)
	c = structuredClient(t, r, "disk")
	if got := c.do(cmdRead, 0, 1<<20, uint32(len(a)), nil).readData(t, 1<<20, len(a)); !bytes.Equal(got, a) {
		t.Fatal("flushed bytes lost after kill -9")
	}
	if got := c.do(cmdRead, 0, 8<<20, uint32(len(b)), nil).readData(t, 8<<20, len(b)); !bytes.Equal(got, b) {
		t.Fatal("FUA write lost after kill -9")
	}
	child.Kill9()
}

// TestKill9WithUnflushedWrites: a kill -9 right after writes that were
// never flushed may lose those writes, but never what an earlier FLUSH
// made durable (DESIGN.md: NBD exports are not cache).
func TestKill9WithUnflushedWrites(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(t.TempDir(), "s.sock")
	child := startChild(t, dir, sock)
	r := &running{sock: sock}

	a := pattern(41, 1<<20)
	c := structuredClient(t, r, "disk")
	if rep := c.do(cmdWrite, 0, 0, uint32(len(a)), a); rep.errno != 0 {
		t.Fatal(rep.errno)
	}
	if rep := c.do(cmdFlush, 0, 0, 0, nil); rep.errno != 0 {
		t.Fatal(rep.errno)
	}
	for i := 0; i < 64; i++ { // unflushed writes, then SIGKILL at once
		c.send(cmdWrite, 0, uint64(100+i), uint64(4<<20+i*(64<<10)), 64<<10, pattern(uint64(i), 64<<10))
	}
	for i := 0; i < 64; i++ {
		c.recv()
	}
	child.Kill9()

	before, err := catalog.LoadExports(dir)
	if err != nil {
		t.Fatal(err)
	}

	child = startChild(t, dir, sock)
	c = structuredClient(t, r, "disk")
	got := c.do(cmdRead, 0, 0, uint32(len(a)), nil).readData(t, 0, len(a))
	child.Kill9()
	if bytes.Equal(got, a) {
		return
	}
	after, err := catalog.LoadExports(dir)
	if err != nil {
		t.Fatal(err)
	}
	if after.Exports["disk"].ID != before.Exports["disk"].ID {
		t.Fatalf("store dropped NBD object %d at restart; flushed bytes lost", before.Exports["disk"].ID)
	}
	t.Fatal("flushed bytes lost after kill -9 with later unflushed writes in flight")
}

// TestKill9AfterInPlaceRewrites: 4 KiB rewrites into blocks that are
// already whole (held back by age, not stored per write) are durable once
// flushed, and a kill -9 with later rewrites still held back loses at most
// those later, unflushed rewrites: every 4 KiB unit reads back as the
// flushed bytes or, for a unit rewritten after the FLUSH, as the new ones.
func TestKill9AfterInPlaceRewrites(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(t.TempDir(), "s.sock")
	child := startChild(t, dir, sock)
	r := &running{sock: sock}

	const unit = 4 << 10
	flushed := pattern(51, 1<<20)
	c := structuredClient(t, r, "disk")
	if rep := c.do(cmdWrite, 0, 0, uint32(len(flushed)), flushed); rep.errno != 0 {
		t.Fatal(rep.errno)
	}
	if rep := c.do(cmdFlush, 0, 0, 0, nil); rep.errno != 0 {
		t.Fatal(rep.errno)
	}
	// Rewrites in place, one unit in every other 16 KiB block, then FLUSH.
	for off := 4 << 10; off < len(flushed); off += 32 << 10 {
		p := pattern(uint64(1000+off), unit)
		copy(flushed[off:], p)
		if rep := c.do(cmdWrite, 0, uint64(off), unit, p); rep.errno != 0 {
			t.Fatal(rep.errno)
		}
	}
	if rep := c.do(cmdFlush, 0, 0, 0, nil); rep.errno != 0 {
		t.Fatal(rep.errno)
	}
	// Later rewrites, never flushed (held back for seconds), then SIGKILL.
	later := map[int][]byte{}
	for off := 8 << 10; off < len(flushed); off += 48 << 10 {
		p := pattern(uint64(5000+off), unit)
		later[off] = p
		if rep := c.do(cmdWrite, 0, uint64(off), unit, p); rep.errno != 0 {
			t.Fatal(rep.errno)
		}
	}
	child.Kill9()

	child = startChild(t, dir, sock)
	c = structuredClient(t, r, "disk")
	got := c.do(cmdRead, 0, 0, uint32(len(flushed)), nil).readData(t, 0, len(flushed))
	child.Kill9()
	for off := 0; off < len(flushed); off += unit {
		g, want := got[off:off+unit], flushed[off:off+unit]
		if bytes.Equal(g, want) {
			continue
		}
		if p, ok := later[off]; ok && bytes.Equal(g, p) {
			continue // an unflushed rewrite that happened to be stored
		}
		t.Fatalf("unit at %d after kill -9: neither the flushed bytes nor a later write", off)
	}
}
