package tests

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ctxmem/ctxmemd/tests/harness"
)

// TestE2ESmallChunkWrites writes files in 64 KiB and 4 KiB write() calls (as
// dd bs=64k or a Python loop does), so every 256 KiB block is written many
// times while write-back runs, with a G2 small enough that the blocks are
// evicted; then it reads every file back with O_DIRECT (past the page
// cache, from the daemon's tiers) and after a restart. A block whose older
// copy was stored over its newer one reads back wrong here.
func TestE2ESmallChunkWrites(t *testing.T) {
	bin := needE2E(t)
	d := harness.Start(t, bin, harness.Options{DRAM: "32MiB", G3Size: "512MiB", Extra: []string{"--g3-segment-size", "8MiB"}})
	dir := filepath.Join(d.Namespace(), "chunks")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	const files, size = 60, 3_000_000
	content := func(i int) []byte {
		r := rand.New(rand.NewPCG(uint64(i), 77))
		b := make([]byte, size)
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		return b
	}
	for i := 0; i < files; i++ {
		chunk := 64 << 10
		if i%2 == 1 {
			chunk = 4 << 10
		}
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("f%03d", i)))
		if err != nil {
			t.Fatal(err)
		}
		data := content(i)
		for off := 0; off < size; off += chunk {
			if _, err := f.Write(data[off:min(off+chunk, size)]); err != nil {
				t.Fatal(err)
			}
		}
		if i%3 == 0 {
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
		}
		f.Close()
	}
	verify := func(when string) {
		t.Helper()
		buf := alignedBuf(4 << 20)
		for i := 0; i < files; i++ {
			p := filepath.Join(dir, fmt.Sprintf("f%03d", i))
			fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECT, 0)
			if err != nil {
				t.Fatalf("%s: open %s: %v", when, p, err)
			}
			n, err := unix.Read(fd, buf)
			unix.Close(fd)
			if err != nil || n != size {
				t.Fatalf("%s: read %s: n=%d err=%v", when, p, n, err)
			}
			if want := content(i); !bytes.Equal(buf[:n], want) {
				off := 0
				for off < n && buf[off] == want[off] {
					off++
				}
				t.Fatalf("%s: %s: WRONG BYTES from offset %d", when, p, off)
			}
		}
	}
	verify("after writing")
	d.Restart()
	verify("after restart")
}

// alignedBuf returns a 4 KiB-aligned buffer of n bytes (O_DIRECT).
func alignedBuf(n int) []byte {
	b := make([]byte, n+4096)
	off := int(4096 - uintptr(unsafe.Pointer(&b[0]))%4096)
	return b[off%4096 : off%4096+n]
}
