package tests

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxmem/ctxmemd/internal/testenv"
	"github.com/ctxmem/ctxmemd/tests/harness"
)

// TestE2EPassthrough: with passthrough on (the default as root on Linux
// 6.9+), reads of a G2-resident file send no READ to the daemon; a writer
// that opens the file while a reader holds it open in passthrough writes
// through passthrough too (no WRITE), and those bytes and the new size are
// what every reader sees, are written back, survive kill -9 after fsync,
// and read back right after the file's blocks were evicted from G2 and
// after a restart.
func TestE2EPassthrough(t *testing.T) {
	bin := needE2E(t)
	d := harness.Start(t, bin, harness.Options{DRAM: "48MiB", G3Size: "1GiB"})
	st := status(t, d)
	if !st.Passthrough.On {
		if strings.Contains(os.Getenv("CTXMEM_E2E_RUN_FLAGS"), "passthrough=false") {
			t.Skipf("passthrough off by CTXMEM_E2E_RUN_FLAGS: %s", st.Passthrough.Reason)
		}
		t.Fatalf("passthrough off as root on %s: %s", kernelRelease(), st.Passthrough.Reason)
	}
	path := filepath.Join(d.Namespace(), "kv-pt")
	first := boundedPattern(1, 3<<20)
	if err := os.WriteFile(path, first, 0o644); err != nil {
		t.Fatal(err)
	}
	before := status(t, d).Passthrough
	if got := readFile(t, path); !bytes.Equal(got, first) {
		t.Fatal("passthrough read: wrong bytes")
	}
	if got := readDirectT(t, path); !bytes.Equal(got, first) {
		t.Fatal("passthrough O_DIRECT read: wrong bytes")
	}
	if after := status(t, d).Passthrough; after.DaemonReads != before.DaemonReads {
		t.Fatalf("reads of a G2-resident file sent %d READ requests to the daemon; want 0", after.DaemonReads-before.DaemonReads)
	}

	// A reader holds the file open in passthrough; a writer then opens it
	// (the kernel takes only passthrough now), rewrites the head, extends
	// it, fsyncs.
	rd, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	head, tail := boundedPattern(2, 64<<10), boundedPattern(3, 1<<20+123)
	if _, err := w.WriteAt(head, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt(tail, int64(len(first))); err != nil {
		t.Fatal(err)
	}
	want := append(append(append([]byte{}, head...), first[len(head):]...), tail...)
	if fi, err := os.Stat(path); err != nil || fi.Size() != int64(len(want)) {
		t.Fatalf("stat by another open while the writer is open: %v, %v; want size %d", fi.Size(), err, len(want))
	}
	got := make([]byte, len(want)+10)
	if n, _ := rd.ReadAt(got, 0); n != len(want) || !bytes.Equal(got[:n], want) {
		t.Fatalf("the held reader sees %d bytes, not the writer's %d", n, len(want))
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	rd.Close()
	if after := status(t, d).Passthrough; after.DaemonWrites != before.DaemonWrites {
		t.Fatalf("writes through passthrough sent %d WRITE requests to the daemon; want 0", after.DaemonWrites-before.DaemonWrites)
	}

	d.Kill9()
	d.StartAgain()
	if got := readFile(t, path); !bytes.Equal(got, want) {
		t.Fatalf("after kill -9 following fsync: %d bytes, want the %d written through passthrough", len(got), len(want))
	}

	// Push the file's blocks out of G2 (48 MiB) with other files, then
	// read it again (the open fills its memory file from G3).
	for i := range 24 {
		if err := os.WriteFile(filepath.Join(d.Namespace(), "fill-"+string(rune('a'+i))), boundedPattern(10+i, 4<<20), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got := readFile(t, path); !bytes.Equal(got, want) {
		t.Fatal("after eviction: wrong bytes")
	}
	for i := range 24 {
		p := filepath.Join(d.Namespace(), "fill-"+string(rune('a'+i)))
		if got := readFile(t, p); !bytes.Equal(got, boundedPattern(10+i, 4<<20)) {
			t.Fatalf("%s: wrong bytes", p)
		}
	}
	d.Restart()
	if got := readFile(t, path); !bytes.Equal(got, want) {
		t.Fatal("after restart: wrong bytes")
	}
}

// status returns the daemon's status, waiting up to 20 s for its admin
// socket (it may listen a moment after the mount is live).
func status(t *testing.T, d *harness.Daemon) harness.Status {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := d.Status(context.Background())
		if err == nil {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func readDirectT(t *testing.T, p string) []byte {
	t.Helper()
	b, err := readDirect(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func kernelRelease() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return "?"
	}
	return unix.ByteSliceToString(u.Release[:])
}

// TestE2EPassthroughWrites: with passthrough_writes a file created and
// written by an engine sends no WRITE to the daemon; after fsync it
// survives kill -9, and a file closed without fsync is written back (its
// name may not survive a kill -9, its bytes are never wrong).
func TestE2EPassthroughWrites(t *testing.T) {
	bin := needE2E(t)
	d := harness.Start(t, bin, harness.Options{DRAM: "256MiB", G3Size: "1GiB", Extra: []string{"--passthrough-writes=true"}})
	if st := status(t, d); !st.Passthrough.On {
		if strings.Contains(os.Getenv("CTXMEM_E2E_RUN_FLAGS"), "passthrough=false") {
			t.Skipf("passthrough off by CTXMEM_E2E_RUN_FLAGS: %s", st.Passthrough.Reason)
		}
		t.Fatalf("passthrough off: %s", st.Passthrough.Reason)
	}
	before := status(t, d).Passthrough
	synced := filepath.Join(d.Namespace(), "synced")
	want := boundedPattern(7, 3<<20+4097)
	f, err := os.Create(synced)
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(want); off += 256 << 10 {
		if _, err := f.Write(want[off:min(off+256<<10, len(want))]); err != nil {
			t.Fatal(err)
		}
	}
	if fi, err := os.Stat(synced); err != nil || fi.Size() != int64(len(want)) {
		t.Fatalf("stat while the writer is open: %v, %v; want %d", fi.Size(), err, len(want))
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	closed := filepath.Join(d.Namespace(), "closed")
	want2 := boundedPattern(8, 1<<20)
	if err := os.WriteFile(closed, want2, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, synced); !bytes.Equal(got, want) {
		t.Fatal("read back before the kill: wrong bytes")
	}
	if after := status(t, d).Passthrough; after.DaemonWrites != before.DaemonWrites {
		t.Fatalf("%d WRITE requests reached the daemon; want 0", after.DaemonWrites-before.DaemonWrites)
	}
	testenv.Eventually(t, 20*time.Second, func() bool {
		st := status(t, d)
		var dirty int64
		fmt.Sscan(string(st.Stats["dirty_bytes"]), &dirty)
		return dirty == 0
	}, "closed file written back")
	d.Kill9()
	d.StartAgain()
	if got := readFile(t, synced); !bytes.Equal(got, want) {
		t.Fatal("fsync'd file after kill -9: wrong bytes")
	}
	// Its name was not fsync'd: it may be gone, but never wrong.
	if got, err := os.ReadFile(closed); err == nil && !bytes.Equal(got, want2) {
		t.Fatal("closed file after write-back and kill -9: wrong bytes")
	} else if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
}

// TestE2EPassthroughAfterMappedDirectOpen: a reader that opened a file
// while a writer had it open gets a direct-I/O open through the daemon;
// when it maps the file shared, the kernel puts the inode in cached I/O
// mode, which the daemon does not see. An open after the writer closed
// must still succeed (the kernel answers a passthrough open of an inode
// in cached mode with EIO; soak cycle 1205 of 2026-12-02) and read the
// file's bytes.
func TestE2EPassthroughAfterMappedDirectOpen(t *testing.T) {
	bin := needE2E(t)
	d := harness.Start(t, bin, harness.Options{DRAM: "64MiB", G3Size: "1GiB"})
	if !status(t, d).Passthrough.On {
		t.Skip("passthrough off")
	}
	path := filepath.Join(d.Namespace(), "kv-mapped")
	data := boundedPattern(7, 1<<20)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	r, err := os.Open(path) // a writer is open: direct I/O through the daemon
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	m, err := unix.Mmap(int(r.Fd()), 0, len(data), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatalf("mmap: %v", err)
	}
	defer unix.Munmap(m)
	if !bytes.Equal(m[:4096], data[:4096]) {
		t.Fatal("mapped bytes differ")
	}
	w.Close()
	time.Sleep(100 * time.Millisecond) // the writer's RELEASE reaches the daemon
	for i := range 3 {
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("open %d after the mapped direct open: %v", i, err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("open %d: wrong bytes", i)
		}
	}
}

// TestE2EPassthroughOpenRightAfterWriterClose: a file read at once after
// its writer closed it (a KV engine's put, then get) never fails to open.
// The writer is served through the daemon; its RELEASE may still be inside
// go-fuse when the reader's OPEN is answered by passthrough, and go-fuse
// drops a backing-id reference on every release, so without the mount's
// release fence the reader's backing id could be closed under it and the
// open fail with EIO (see fusefs/passthrough.go; TestE2EWorkloads/W2
// failed so 1 run in 6 under load). Four writers loop put, close, open and
// read on their own files, and every open must succeed with the bytes
// just written.
func TestE2EPassthroughOpenRightAfterWriterClose(t *testing.T) {
	bin := needE2E(t)
	d := harness.Start(t, bin, harness.Options{DRAM: "256MiB", G3Size: "1GiB"})
	if !status(t, d).Passthrough.On {
		t.Skip("passthrough off")
	}
	const rounds = 400
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				path := filepath.Join(d.Namespace(), fmt.Sprintf("w%d-kv%d", w, i%8))
				data := boundedPattern(w*rounds+i, 64<<10)
				if err := os.WriteFile(path, data, 0o644); err != nil {
					errs <- fmt.Errorf("put %s: %w", path, err)
					return
				}
				got, err := os.ReadFile(path)
				if err != nil {
					errs <- fmt.Errorf("round %d: open right after the writer closed %s: %w", i, path, err)
					return
				}
				if !bytes.Equal(got, data) {
					errs <- fmt.Errorf("round %d: %s: wrong bytes", i, path)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st := status(t, d)
	t.Logf("passthrough %v, READs served by the daemon %d (opens answered through it while a release was in flight, among others)", st.Passthrough.On, st.Passthrough.DaemonReads)
}
