package fusefs

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestWritebackCache: in writeback-cache mode writes are buffered by the
// kernel and reach the store at fsync or close; quota errors surface there.
func TestWritebackCache(t *testing.T) {
	m := mount(t, nil, Options{WritebackCache: true,
		Namespaces: []Namespace{{Name: "q", Mode: 0o777, QuotaBytes: 1 << 20}}})
	p := filepath.Join(m.mnt, "q", "f")
	data := pattern(3, 512<<10)
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.be.data(m.obj(p)); !bytes.Equal(got, data) {
		t.Fatal("store content after fsync")
	}
	f.Close()
	if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back: %v", err)
	}
	g, err := os.Create(filepath.Join(m.mnt, "q", "g"))
	if err != nil {
		t.Fatal(err)
	}
	_, werr := g.Write(make([]byte, 768<<10))
	serr := g.Sync()
	cerr := g.Close()
	if !errors.Is(werr, syscall.EDQUOT) && !errors.Is(serr, syscall.EDQUOT) && !errors.Is(cerr, syscall.EDQUOT) {
		t.Fatalf("write past the quota: write %v, fsync %v, close %v; want EDQUOT from one of them", werr, serr, cerr)
	}
}
