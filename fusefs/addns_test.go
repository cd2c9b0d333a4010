package fusefs

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

func TestAddNamespaceLive(t *testing.T) {
	m := mount(t, nil, Options{})
	p := filepath.Join(m.mnt, "live")
	// A lookup before it exists leaves a negative dentry in the kernel
	// (cached for an hour): AddNamespace must drop it.
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stat before adding: %v", err)
	}
	ns := Namespace{Name: "live", UID: 1234, GID: 5678, Mode: 0o770, QuotaBytes: 1 << 20, BlockSize: 64 << 10, ModelID: "m"}
	if err := m.srv.AddNamespace(ns); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(p)
	if err != nil {
		t.Fatalf("stat after adding: %v", err)
	}
	sys := st.Sys().(*syscall.Stat_t)
	if !st.IsDir() || st.Mode().Perm() != 0o770 || sys.Uid != 1234 || sys.Gid != 5678 {
		t.Fatalf("new namespace: mode %v uid %d gid %d", st.Mode(), sys.Uid, sys.Gid)
	}
	ents, err := os.ReadDir(m.mnt)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{DefaultNamespace, "live"}) {
		t.Fatalf("ls of the mount root: %v", names)
	}
	var root syscall.Stat_t
	if err := syscall.Stat(m.mnt, &root); err != nil || root.Nlink != 4 {
		t.Fatalf("root nlink %d (%v), want 4", root.Nlink, err)
	}
	// Files work, with the namespace's block size and quota.
	f := filepath.Join(p, "kv")
	if err := os.WriteFile(f, pattern(3, 300<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(f); err != nil || !bytes.Equal(got, pattern(3, 300<<10)) {
		t.Fatalf("read back: %d bytes, %v", len(got), err)
	}
	if info, err := m.be.Stat(m.obj(f)); err != nil || info.BlockSize != 64<<10 || info.Namespace != "live" {
		t.Fatalf("object: %+v %v", info, err)
	}
	if err := os.WriteFile(filepath.Join(p, "big"), make([]byte, 1<<20), 0o644); !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("write past the quota: %v, want EDQUOT", err)
	}
	got := m.srv.Namespaces()
	if len(got) != 2 || got[1].Name != "live" || got[1].BlockSize != 64<<10 || got[1].QuotaBytes != 1<<20 {
		t.Fatalf("Namespaces() = %+v", got)
	}

	// Refusals change nothing.
	if err := m.srv.AddNamespace(Namespace{Name: "live"}); !errors.Is(err, ErrNamespaceExists) {
		t.Fatalf("adding it twice: %v", err)
	}
	if err := m.srv.AddNamespace(Namespace{Name: DefaultNamespace}); !errors.Is(err, ErrNamespaceExists) {
		t.Fatalf("adding the default namespace: %v", err)
	}
	for _, bad := range []Namespace{{Name: "a/b"}, {Name: ".."}, {Name: "x", BlockSize: 3 << 10}, {Name: "y", QuotaBytes: -1}, {Name: "z", Mode: 0o10000}} {
		if err := m.srv.AddNamespace(bad); err == nil {
			t.Fatalf("AddNamespace(%+v) accepted", bad)
		}
	}
	if n := len(m.srv.Namespaces()); n != 2 {
		t.Fatalf("%d namespaces after refused adds", n)
	}

	// Recorded: a restart that declares it serves its files again.
	m.stop()
	m.opts.Namespaces = []Namespace{{Name: DefaultNamespace, Mode: DefaultNamespaceMode}, ns}
	m.start()
	if got, err := os.ReadFile(f); err != nil || !bytes.Equal(got, pattern(3, 300<<10)) {
		t.Fatalf("after restart: %d bytes, %v", len(got), err)
	}
	// A restart without it keeps its files unserved; adding it back live
	// with the same identity serves them again (a new user's run: it
	// needed a restart), with their quota usage.
	id := m.obj(f)
	sub := filepath.Join(p, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(f, filepath.Join(sub, "kv2")); err != nil {
		t.Fatal(err)
	}
	m.stop()
	m.opts.Namespaces = nil
	m.start()
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("undeclared namespace served: %v", err)
	}
	if !m.be.exists(id) {
		t.Fatal("files of an undeclared namespace deleted")
	}
	if err := m.srv.AddNamespace(ns); err != nil {
		t.Fatalf("adding a recorded namespace back live: %v", err)
	}
	for _, name := range []string{f, filepath.Join(sub, "kv2")} {
		if got, err := os.ReadFile(name); err != nil || !bytes.Equal(got, pattern(3, 300<<10)) {
			t.Fatalf("%s after adding back: %d bytes, %v", name, len(got), err)
		}
	}
	var fst syscall.Stat_t
	if err := syscall.Stat(f, &fst); err != nil || fst.Nlink != 2 {
		t.Fatalf("kv links %d (%v), want 2", fst.Nlink, err)
	}
	if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o770 || st.Sys().(*syscall.Stat_t).Nlink != 3 {
		t.Fatalf("namespace dir after adding back: %v %v", st, err)
	}
	if err := os.WriteFile(filepath.Join(p, "big"), make([]byte, 800<<10), 0o644); !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("write past the quota with the kept file counted: %v, want EDQUOT", err)
	}
	_ = os.Remove(filepath.Join(p, "big"))
	if err := os.WriteFile(filepath.Join(sub, "new"), pattern(4, 10<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	// What it holds now survives a restart that declares it.
	m.stop()
	m.opts.Namespaces = []Namespace{{Name: DefaultNamespace, Mode: DefaultNamespaceMode}, ns}
	m.start()
	if got, err := os.ReadFile(filepath.Join(sub, "new")); err != nil || !bytes.Equal(got, pattern(4, 10<<10)) {
		t.Fatalf("new file after restart: %d bytes, %v", len(got), err)
	}
	// Another identity cannot be added live: a restart serves it empty.
	m.stop()
	m.opts.Namespaces = nil
	m.start()
	other := ns
	other.ModelID = "m2"
	if err := m.srv.AddNamespace(other); !errors.Is(err, ErrNeedsRestart) {
		t.Fatalf("adding a recorded namespace with another identity live: %v, want ErrNeedsRestart", err)
	}
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("refused namespace served: %v", err)
	}
	if !m.be.exists(id) {
		t.Fatal("files of a refused namespace deleted")
	}
}

func TestAddNamespaceAfterUnmount(t *testing.T) {
	m := mount(t, nil, Options{})
	srv := m.srv
	m.stop()
	if err := srv.AddNamespace(Namespace{Name: "late"}); !errors.Is(err, ErrUnmounted) {
		t.Fatalf("AddNamespace after unmount: %v, want ErrUnmounted", err)
	}
}
