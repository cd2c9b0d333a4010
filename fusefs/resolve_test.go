package fusefs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestPathLookupDrop(t *testing.T) {
	m := mount(t, nil, Options{})
	root := m.ns("")
	if err := os.MkdirAll(filepath.Join(root, "sess/a"), 0o755); err != nil {
		t.Fatal(err)
	}
	files := []string{"sess/a/blk0", "sess/a/blk1", "top"}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(root, f), pattern(3, 10_000), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range files {
		id := m.obj(filepath.Join(root, f))
		ns, p, ok := m.srv.Path(id)
		if !ok || ns != DefaultNamespace || p != f {
			t.Fatalf("Path(%d) = %q %q %v, want %q", id, ns, p, ok, f)
		}
		got, err := m.srv.Lookup(DefaultNamespace, "/"+f)
		if err != nil || got != id {
			t.Fatalf("Lookup(%s) = %d, %v; want %d", f, got, err, id)
		}
	}
	if _, err := m.srv.Lookup(DefaultNamespace, "sess/a"); !errors.Is(err, fs.ErrInvalid) {
		t.Fatalf("Lookup of a directory: %v", err)
	}
	if _, err := m.srv.Lookup(DefaultNamespace, "sess/nope"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Lookup of a missing name: %v", err)
	}
	if _, err := m.srv.Lookup("nope", "top"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Lookup in a missing namespace: %v", err)
	}
	// A renamed file reports its new path.
	if err := os.Rename(filepath.Join(root, "top"), filepath.Join(root, "sess/moved")); err != nil {
		t.Fatal(err)
	}
	id := m.obj(filepath.Join(root, "sess/moved"))
	if _, p, ok := m.srv.Path(id); !ok || p != "sess/moved" {
		t.Fatalf("Path after rename = %q %v", p, ok)
	}

	n, err := m.srv.DropNamespace(context.Background(), DefaultNamespace)
	if err != nil || n != 3 {
		t.Fatalf("DropNamespace = %d, %v; want 3 files", n, err)
	}
	for _, f := range []string{"sess/a/blk0", "sess/a/blk1", "sess/moved"} {
		if _, err := os.Stat(filepath.Join(root, f)); !os.IsNotExist(err) {
			t.Fatalf("%s after drop: %v", f, err)
		}
	}
	if st, err := os.Stat(filepath.Join(root, "sess/a")); err != nil || !st.IsDir() {
		t.Fatalf("directories must stay: %v", err)
	}
	m.be.mu.Lock()
	left := len(m.be.objs)
	m.be.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d objects left in the backend after drop", left)
	}
	if _, err := m.srv.DropNamespace(context.Background(), "nope"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("drop of a missing namespace: %v", err)
	}
}

// TestLookupMisses: names a namespace does not hold are counted (issue 16
// item 4: the real misses of a KV cache), names it holds are not.
func TestLookupMisses(t *testing.T) {
	m := mount(t, nil, Options{NegativeTimeout: -1})
	if err := os.WriteFile(filepath.Join(m.ns(""), "have"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := m.srv.LookupMisses()
	for i := range 5 {
		if _, err := os.Stat(filepath.Join(m.ns(""), fmt.Sprint("missing", i))); !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(m.ns(""), "have")); err != nil {
		t.Fatal(err)
	}
	if got := m.srv.LookupMisses() - before; got != 5 {
		t.Fatalf("lookup misses %d, want 5", got)
	}
}
