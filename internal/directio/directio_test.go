package directio

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestAlignedPoolAndFullIO(t *testing.T) {
	var p BufPool
	for _, n := range []int{1, PageSize, PageSize + 1, 3 << 20, 20 << 20} {
		b := p.Get(n)
		if len(b) != n || !IsAligned(b) {
			t.Fatalf("Get(%d): len %d aligned %v", n, len(b), IsAligned(b))
		}
		p.Put(b)
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	a, b := bytes.Repeat([]byte{1}, 5000), bytes.Repeat([]byte{2}, 3000)
	if err := PwritevFull(fd, [][]byte{a, b}, 100); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 8000)
	if err := PreadFull(fd, got, 100); err != nil || !bytes.Equal(got, append(a, b...)) {
		t.Fatalf("read back: %v", err)
	}
	x, y := make([]byte, 4000), make([]byte, 4000)
	if err := PreadvFull(fd, [][]byte{x, y}, 100); err != nil || !bytes.Equal(append(x, y...), got) {
		t.Fatalf("readv: %v", err)
	}
	if err := PreadFull(fd, make([]byte, 10), 8095); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("read past EOF: %v", err)
	}
	if err := PwriteFull(fd, []byte("z"), 0); err != nil {
		t.Fatal(err)
	}
}
