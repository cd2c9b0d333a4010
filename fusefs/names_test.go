package fusefs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/ctxmem/ctxmemd/catalog"
	"github.com/ctxmem/ctxmemd/hitratio"
	"github.com/ctxmem/ctxmemd/tiering"
)

// TestPathLookupDrop: the catalog's name service on a mount's tree.
func TestPathLookupDrop(t *testing.T) {
	m := mount(t, nil, Options{})
	names := catalog.NewNames(m.srv.Tree(), m.be, testLogger())
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
		ns, p, ok := names.Path(id)
		if !ok || ns != DefaultNamespace || p != f {
			t.Fatalf("Path(%d) = %q %q %v, want %q", id, ns, p, ok, f)
		}
		got, err := names.Lookup(DefaultNamespace, "/"+f)
		if err != nil || got != id {
			t.Fatalf("Lookup(%s) = %d, %v; want %d", f, got, err, id)
		}
	}
	if _, err := names.Lookup(DefaultNamespace, "sess/a"); !errors.Is(err, fs.ErrInvalid) {
		t.Fatalf("Lookup of a directory: %v", err)
	}
	if _, err := names.Lookup(DefaultNamespace, "sess/nope"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Lookup of a missing name: %v", err)
	}
	if _, err := names.Lookup("nope", "top"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Lookup in a missing namespace: %v", err)
	}
	// ".." stays inside the namespace; a name from the bus or an admin
	// client that would leave it (into the mount root, then another
	// namespace) is refused.
	if got, err := names.Lookup(DefaultNamespace, "sess/a/../../top"); err != nil || got != m.obj(filepath.Join(root, "top")) {
		t.Fatalf("Lookup with .. inside the namespace = %d, %v", got, err)
	}
	for _, p := range []string{"../" + DefaultNamespace + "/top", "sess/../../" + DefaultNamespace + "/top", ".."} {
		if _, err := names.Lookup(DefaultNamespace, p); !errors.Is(err, fs.ErrInvalid) {
			t.Fatalf("Lookup(%q) leaving the namespace: %v; want ErrInvalid", p, err)
		}
	}
	// A renamed file reports its new path.
	if err := os.Rename(filepath.Join(root, "top"), filepath.Join(root, "sess/moved")); err != nil {
		t.Fatal(err)
	}
	id := m.obj(filepath.Join(root, "sess/moved"))
	if _, p, ok := names.Path(id); !ok || p != "sess/moved" {
		t.Fatalf("Path after rename = %q %v", p, ok)
	}

	n, err := names.DropNamespace(context.Background(), DefaultNamespace)
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
	if _, err := names.DropNamespace(context.Background(), "nope"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("drop of a missing namespace: %v", err)
	}
}

// TestLookups: the mount counts KV lookups as package hitratio defines
// them — a stat of a missing name is one miss, and writing that name
// through a temporary file and rename adds none (the kernel's LOOKUPs
// before CREATE, MKDIR and a RENAME onto a new name are probes, not
// misses); an open for reading is a hit by the slowest tier the file
// needs; writes and truncating opens are neither.
func TestLookups(t *testing.T) {
	m := mount(t, nil, Options{}) // default timeouts: misses are never cached
	dir := m.ns("")
	if err := os.WriteFile(filepath.Join(dir, "have"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	base, _ := m.srv.Lookups()
	for i := range 5 {
		if _, err := os.Stat(filepath.Join(dir, fmt.Sprint("missing", i))); !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "have")); err != nil {
		t.Fatal(err)
	}
	// An engine's miss path: stat (counted above for missing0), mkdir,
	// write a temporary file, rename it into place, link and symlink.
	sub := filepath.Join(dir, "prefix")
	must(t, os.Mkdir(sub, 0o755))
	tmp := filepath.Join(sub, "blk.tmp")
	must(t, os.WriteFile(tmp, []byte("kv"), 0o644))
	// syscall.Rename: os.Rename stats the new name first, itself a
	// lookup of a missing name.
	must(t, syscall.Rename(tmp, filepath.Join(sub, "blk")))
	must(t, os.Link(filepath.Join(sub, "blk"), filepath.Join(sub, "blk2")))
	must(t, os.Symlink("blk", filepath.Join(sub, "blk3")))
	// A name looked up twice is two misses (not cached), and an engine
	// that stats a name and then writes it directly counts one.
	for range 2 {
		if _, err := os.Stat(filepath.Join(dir, "again")); !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "direct")); !os.IsNotExist(err) {
		t.Fatal(err)
	}
	must(t, os.WriteFile(filepath.Join(dir, "direct"), []byte("kv"), 0o644))
	// Rewriting an existing file is not a lookup.
	must(t, os.WriteFile(filepath.Join(dir, "have"), []byte("y"), 0o644))
	f, err := os.OpenFile(filepath.Join(dir, "have"), os.O_WRONLY, 0)
	must(t, err)
	f.Close()
	got, rows := m.srv.Lookups()
	if d := got.Misses - base.Misses; d != 8 {
		t.Errorf("misses %d, want 8", d)
	}
	if d := got.HitTotal() - base.HitTotal(); d != 0 {
		t.Errorf("hits %d before any read, want 0 (%v)", d, got.Hits)
	}
	// Reads: two from G2, one of a file with a block in G3.
	for range 2 {
		_, err := os.ReadFile(filepath.Join(sub, "blk"))
		must(t, err)
	}
	m.be.setTier(m.node(filepath.Join(dir, "have")).obj, 0, tiering.TierG3)
	_, err = os.ReadFile(filepath.Join(dir, "have"))
	must(t, err)
	got, rows = m.srv.Lookups()
	if got.Hits[hitratio.G2]-base.Hits[hitratio.G2] != 2 || got.Hits[hitratio.G3]-base.Hits[hitratio.G3] != 1 {
		t.Errorf("hits %v (base %v), want 2 G2 and 1 G3", got.Hits, base.Hits)
	}
	if m.srv.LookupMisses() != got.Misses {
		t.Errorf("LookupMisses %d, Lookups misses %d", m.srv.LookupMisses(), got.Misses)
	}
	if len(rows) != 1 || rows[0].Namespace != DefaultNamespace || rows[0].Misses != got.Misses || rows[0].HitTotal() != got.HitTotal() {
		t.Errorf("namespace rows %+v, total %+v", rows, got)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
