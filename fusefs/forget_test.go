package fusefs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/internal/testenv"
)

// TestKernelFilesBound: with Options.KernelFiles, creating many more
// files than the bound leaves about the bound looked up in the kernel:
// the rest were invalidated and forgotten (go-fuse's Inode freed). Every
// file still reads its own bytes by path afterwards (a fresh LOOKUP), a
// file held open is never invalidated, and without a bound nothing is.
func TestKernelFilesBound(t *testing.T) {
	const limit, files = 200, 2000
	m := mount(t, nil, Options{KernelFiles: limit})
	dir := filepath.Join(m.ns(""), "kv")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	held, err := os.Create(filepath.Join(dir, "held"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	content := func(i int) []byte { return []byte(fmt.Sprintf("block %d of the bound test\n", i)) }
	for i := range files {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%05d", i)), content(i), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		return m.srv.KernelEntries().Files <= limit
	}, "files looked up in the kernel down to the bound of %d", limit)
	ke := m.srv.KernelEntries()
	t.Logf("after %d creates: %+v", files, ke)
	if ke.Invalidated < files-limit || ke.Forgotten < files-limit {
		t.Fatalf("%+v: want at least %d entries invalidated and forgotten", ke, files-limit)
	}
	if n := m.node(held.Name()); n == nil || n.kflags&kRef == 0 {
		t.Fatal("the file held open was forgotten")
	}
	if _, err := held.Write([]byte("still writable")); err != nil {
		t.Fatalf("write to the held file: %v", err)
	}
	for i := range files {
		got, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("f%05d", i)))
		if err != nil || !bytes.Equal(got, content(i)) {
			t.Fatalf("f%05d after the reclaim: %q, %v", i, got, err)
		}
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		return m.srv.KernelEntries().Files <= limit
	}, "back within the bound after reading every file")

	free := mount(t, nil, Options{})
	for i := range 500 {
		if err := os.WriteFile(filepath.Join(free.ns(""), fmt.Sprintf("g%d", i)), content(i), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if ke := free.srv.KernelEntries(); ke.Invalidated != 0 || ke.Files < 500 {
		t.Fatalf("without a bound: %+v; want 500 files looked up, none invalidated", ke)
	}
}
