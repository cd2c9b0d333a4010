package pool

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxmem/ctxmemd/internal/clock"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

const (
	kib = 1 << 10
	mib = 1 << 20
)

// newFakeClock is the tests' settable clock (shared by leasers and
// writers, or one per simulated host).
func newFakeClock() *clock.Fake { return clock.NewFake(time.Unix(1_700_000_000, 0)) }

// place is where a test pool lives and how it is opened.
type place struct {
	name     string
	dir      string
	buffered bool
}

// places returns a t.TempDir() on the work tree's ext4 (O_DIRECT, which
// enforces alignment) and a directory in /dev/shm opened buffered (tmpfs
// on this kernel accepts O_DIRECT, so the buffered path is forced there).
func places(t *testing.T) []place {
	ps := []place{{name: "tempdir", dir: t.TempDir()}}
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		d, err := os.MkdirTemp("/dev/shm", "pooltest")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		ps = append(ps, place{name: "shm-buffered", dir: d, buffered: true})
	}
	return ps
}

// newPool formats a pool of n extents of es bytes in dir and opens it.
func newPool(t testing.TB, dir string, buffered bool, n int, es int64) (*Pool, string) {
	t.Helper()
	path := filepath.Join(dir, "pool.img")
	if _, err := Format(path, FormatOptions{ExtentSize: es, Size: DataStart + int64(n)*es, Buffered: buffered}); err != nil {
		t.Fatal(err)
	}
	return openPool(t, path, buffered), path
}

// openPool opens another handle on path (a second simulated host).
func openPool(t testing.TB, path string, buffered bool) *Pool {
	t.Helper()
	p, err := Open(path, OpenOptions{Buffered: buffered})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if buffered && p.Mode() != ModeBuffered {
		t.Fatalf("mode %v, want buffered", p.Mode())
	}
	return p
}

func newWriter(t testing.TB, p *Pool, l Leaser, opts WriterOptions) *Writer {
	t.Helper()
	w, err := NewWriter(context.Background(), p, l, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func key(ns string, obj uint64, idx uint32, gen uint64) tier.Key {
	return tier.Key{Namespace: ns, Object: obj, Index: idx, Gen: gen}
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// tamper overwrites bytes of the file at off (buffered, then fsync, so an
// O_DIRECT reader sees it).
func tamper(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

// readFile reads n bytes of the file at off.
func readFile(t *testing.T, path string, off int64, n int) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	return b
}

// flip inverts one byte of the file at off.
func flip(t *testing.T, path string, off int64) {
	t.Helper()
	b := readFile(t, path, off, 1)
	b[0] ^= 0xff
	tamper(t, path, off, b)
}

// mustMiss asserts that Get of (k, loc) fails with want and leaves dst
// untouched.
func mustMiss(t *testing.T, r *Reader, k tier.Key, loc Location, want error) {
	t.Helper()
	dst := make([]byte, loc.Length+10)
	for i := range dst {
		dst[i] = 0xA5
	}
	n, err := r.Get(context.Background(), k, loc, dst)
	if !errors.Is(err, want) {
		t.Fatalf("Get(%v, %v) = %d, %v; want %v", k, loc, n, err, want)
	}
	if n != 0 {
		t.Fatalf("Get(%v, %v) returned n=%d with error", k, loc, n)
	}
	for i, c := range dst {
		if c != 0xA5 {
			t.Fatalf("Get(%v, %v) failed but wrote dst[%d]", k, loc, i)
		}
	}
}

// mustGet asserts that Get of (k, loc) returns exactly want.
func mustGet(t *testing.T, r *Reader, k tier.Key, loc Location, want []byte) {
	t.Helper()
	dst := make([]byte, len(want)+7)
	n, err := r.Get(context.Background(), k, loc, dst)
	if err != nil {
		t.Fatalf("Get(%v, %v): %v", k, loc, err)
	}
	if n != len(want) || string(dst[:n]) != string(want) {
		t.Fatalf("Get(%v, %v) = %d bytes, differ from the %d written", k, loc, n, len(want))
	}
}

// failDirectOpen is an openFunc for a file system that refuses O_DIRECT.
func failDirectOpen(path string, flags int, perm uint32) (int, error) {
	if flags&unix.O_DIRECT != 0 {
		return -1, unix.EINVAL
	}
	return unix.Open(path, flags, perm)
}
