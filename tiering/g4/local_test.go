package g4_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/g4"
	"github.com/ctxmem/ctxmemd/tiering/g4/storetest"
	"github.com/ctxmem/ctxmemd/tiering/tier"

	"github.com/ctxmem/ctxmemd/internal/testenv"
)

var bg = context.Background()

func newLocal(t testing.TB, dir string) *g4.Local {
	t.Helper()
	l, err := g4.NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestLocalConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) g4.ObjectStore { return newLocal(t, t.TempDir()) })
}

func TestLocalPathsStayInRoot(t *testing.T) {
	root := t.TempDir()
	l := newLocal(t, filepath.Join(root, "store"))
	names := []string{"x", ".a", "..a/b", "a/...", "%2E%2E/x", "a\\..\\..\\b", "é/ü", "sp ace/+", "a/%/b"}
	for i, n := range names {
		p, err := l.Path(n)
		if err != nil {
			t.Fatalf("Path(%q): %v", n, err)
		}
		if !strings.HasPrefix(p, l.Root()+string(filepath.Separator)) || filepath.Clean(p) != p {
			t.Fatalf("Path(%q) = %q escapes or is not clean under %q", n, p, l.Root())
		}
		storetest.MustPut(t, l, n, storetest.Data(i, 10), nil)
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("object %q not at Path %q: %v", n, p, err)
		}
	}
	// Nothing was written beside the store's root.
	ents, _ := os.ReadDir(root)
	if len(ents) != 1 || ents[0].Name() != "store" {
		t.Fatalf("entries beside the root: %v", ents)
	}
	// Plain names stay readable on disk.
	if p, _ := l.Path("blocks/ns-1/00ff/0001"); p != filepath.Join(l.Root(), "blocks", "ns-1", "00ff", "0001@") {
		t.Fatalf("Path of a plain name = %q", p)
	}
	for _, n := range []string{"../x", "a/../../x", "/etc/passwd", ".."} {
		if _, err := l.Path(n); !errors.Is(err, g4.ErrInvalid) {
			t.Fatalf("Path(%q) = %v; want ErrInvalid", n, err)
		}
	}
	if _, err := l.Path(strings.Repeat("é", 100)); !errors.Is(err, g4.ErrInvalid) {
		t.Fatalf("Path of a segment too long for a file name = %v; want ErrInvalid", err)
	}
}

// gateReader yields head, then waits for release before yielding tail.
type gateReader struct {
	head, tail []byte
	reached    chan struct{} // closed when head has been read
	release    chan struct{}
	stage      int
}

func (g *gateReader) Read(p []byte) (int, error) {
	switch g.stage {
	case 0:
		n := copy(p, g.head)
		g.head = g.head[n:]
		if len(g.head) == 0 {
			g.stage = 1
		}
		return n, nil
	case 1:
		close(g.reached)
		<-g.release
		g.stage = 2
		fallthrough
	case 2:
		if len(g.tail) == 0 {
			return 0, io.EOF
		}
		n := copy(p, g.tail)
		g.tail = g.tail[n:]
		return n, nil
	}
	return 0, io.EOF
}

// TestLocalAtomicPut holds a Put half-way through its copy and checks that
// readers see the old object whole (or no object), never the partial one.
func TestLocalAtomicPut(t *testing.T) {
	l := newLocal(t, t.TempDir())
	oldData := storetest.Data(1, 70_000)
	storetest.MustPut(t, l, "d/obj", oldData, map[string]string{"v": "old"})
	for _, name := range []string{"d/obj", "d/fresh"} {
		newData := storetest.Data(2, 200_000)
		g := &gateReader{head: newData[:100_000], tail: newData[100_000:],
			reached: make(chan struct{}), release: make(chan struct{})}
		done := make(chan error, 1)
		go func() { done <- l.Put(bg, name, g, int64(len(newData)), map[string]string{"v": "new"}) }()
		<-g.reached
		// Half the new bytes are in a temporary file in the target directory.
		ents, _ := os.ReadDir(filepath.Join(l.Root(), "d"))
		tmp := 0
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ".tmp-") {
				tmp++
			}
		}
		if tmp != 1 {
			t.Fatalf("want 1 temporary file during the Put, found %d in %v", tmp, ents)
		}
		if name == "d/obj" {
			got, meta := storetest.MustGet(t, l, name)
			if !bytes.Equal(got, oldData) || meta["v"] != "old" {
				t.Fatalf("during Put, Get returned %d bytes meta %v; want the old object", len(got), meta)
			}
			if a, err := l.Head(bg, name); err != nil || a.Size != int64(len(oldData)) {
				t.Fatalf("during Put, Head = %+v, %v", a, err)
			}
		} else if _, err := l.Head(bg, name); !errors.Is(err, g4.ErrNotExist) {
			t.Fatalf("during Put of a new object, Head = %v; want ErrNotExist", err)
		}
		if got := storetest.Names(t, l, ""); !slices.Equal(got, []string{"d/obj"}) {
			t.Fatalf("during Put, List = %q", got)
		}
		close(g.release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		got, meta := storetest.MustGet(t, l, name)
		if !bytes.Equal(got, newData) || meta["v"] != "new" {
			t.Fatalf("after Put, Get returned %d bytes meta %v", len(got), meta)
		}
		oldData = newData
	}
}

func TestLocalStaleTempFiles(t *testing.T) {
	l := newLocal(t, t.TempDir())
	storetest.MustPut(t, l, "a/b", []byte("x"), nil)
	dir := filepath.Join(l.Root(), "a")
	oldTmp, newTmp := filepath.Join(dir, ".tmp-111"), filepath.Join(l.Root(), ".tmp-222")
	for _, p := range []string{oldTmp, newTmp} {
		if err := os.WriteFile(p, []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	past := time.Now().Add(-time.Hour)
	if err := os.Chtimes(oldTmp, past, past); err != nil {
		t.Fatal(err)
	}
	if got := storetest.Names(t, l, ""); !slices.Equal(got, []string{"a/b"}) {
		t.Fatalf("List shows temporary files: %q", got)
	}
	n, err := l.RemoveStale(bg, time.Now().Add(-10*time.Minute))
	if err != nil || n != 1 {
		t.Fatalf("RemoveStale = %d, %v; want 1", n, err)
	}
	if _, err := os.Stat(oldTmp); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("old temporary file survived")
	}
	if _, err := os.Stat(newTmp); err != nil {
		t.Fatal("recent temporary file (a Put in progress) was removed")
	}
}

func TestLocalForeignEntries(t *testing.T) {
	l := newLocal(t, t.TempDir())
	storetest.MustPut(t, l, "ok", []byte("fine"), nil)
	r := l.Root()
	must(t, os.WriteFile(filepath.Join(r, "junk"), []byte("no suffix"), 0o600))
	must(t, os.Mkdir(filepath.Join(r, "Bad%zz"), 0o700))
	must(t, os.WriteFile(filepath.Join(r, "Bad%zz", "x@"), []byte("G4L1\x00\x00\x00\x00"), 0o600))
	must(t, os.WriteFile(filepath.Join(r, "lower%2e@"), []byte("G4L1\x00\x00\x00\x00"), 0o600)) // not canonical
	must(t, os.WriteFile(filepath.Join(r, "badmagic@"), []byte("XXXXXXXXXXXX"), 0o600))
	must(t, os.WriteFile(filepath.Join(r, "short@"), []byte("G4"), 0o600))
	must(t, os.Symlink("/etc/passwd", filepath.Join(r, "link@")))
	if got := storetest.Names(t, l, ""); !slices.Equal(got, []string{"ok"}) {
		t.Fatalf("List = %q; want only the real object", got)
	}
	for _, n := range []string{"badmagic", "short"} {
		if rc, _, err := l.Get(bg, n); err == nil || errors.Is(err, g4.ErrNotExist) {
			if rc != nil {
				rc.Close()
			}
			t.Fatalf("Get(%q) of a damaged file = %v; want an I/O error", n, err)
		}
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestLocalPrunesEmptyDirs(t *testing.T) {
	l := newLocal(t, t.TempDir())
	storetest.MustPut(t, l, "a/b/c/d", []byte("1"), nil)
	storetest.MustPut(t, l, "a/x", []byte("2"), nil)
	must(t, l.Delete(bg, "a/b/c/d"))
	ents, _ := os.ReadDir(filepath.Join(l.Root(), "a"))
	if len(ents) != 1 || ents[0].Name() != "x@" {
		t.Fatalf("after Delete, a/ holds %v; want only x@", ents)
	}
	must(t, l.Delete(bg, "a/x"))
	if ents, _ := os.ReadDir(l.Root()); len(ents) != 0 {
		t.Fatalf("root not empty after deleting everything: %v", ents)
	}
	if _, err := os.Stat(l.Root()); err != nil {
		t.Fatalf("the root itself was removed: %v", err)
	}
}

func TestLocalVanishedRoot(t *testing.T) {
	l := newLocal(t, t.TempDir())
	storetest.MustPut(t, l, "a/b", []byte("x"), nil)
	must(t, os.RemoveAll(l.Root()))
	checkUnavailable(t, l, "a/b")
	if _, err := os.Stat(l.Root()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a Put recreated the vanished root: %v", err)
	}
}

// checkUnavailable checks that every operation fails with
// tier.ErrUnavailable (and not with a false "does not exist").
func checkUnavailable(t *testing.T, l *g4.Local, name string) {
	t.Helper()
	if err := l.Put(bg, name, strings.NewReader("y"), 1, nil); !errors.Is(err, tier.ErrUnavailable) {
		t.Errorf("Put = %v; want ErrUnavailable", err)
	}
	if err := l.Put(bg, "new/dir/obj", strings.NewReader("y"), 1, nil); !errors.Is(err, tier.ErrUnavailable) {
		t.Errorf("Put in a new directory = %v; want ErrUnavailable", err)
	}
	if _, err := l.Head(bg, "missing"); !errors.Is(err, tier.ErrUnavailable) {
		t.Errorf("Head = %v; want ErrUnavailable", err)
	}
	if rc, _, err := l.Get(bg, "missing"); !errors.Is(err, tier.ErrUnavailable) {
		if rc != nil {
			rc.Close()
		}
		t.Errorf("Get = %v; want ErrUnavailable", err)
	}
	if err := l.Delete(bg, "missing"); !errors.Is(err, tier.ErrUnavailable) {
		t.Errorf("Delete = %v; want ErrUnavailable", err)
	}
	if err := l.List(bg, "", func(g4.ObjectAttrs) bool { return true }); !errors.Is(err, tier.ErrUnavailable) {
		t.Errorf("List = %v; want ErrUnavailable", err)
	}
}

// TestLocalReadOnly remounts the store read-only (needs root and mount
// privileges; skipped otherwise).
func TestLocalReadOnly(t *testing.T) {
	dir := t.TempDir()
	l := newLocal(t, dir)
	storetest.MustPut(t, l, "a/b", []byte("kept"), nil)
	if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
		testenv.Skip(t, "bind mount: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	if err := syscall.Mount("", dir, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
		testenv.Skip(t, "read-only remount: %v", err)
	}
	for _, n := range []string{"a/b", "a/c", "new/x"} {
		if err := l.Put(bg, n, strings.NewReader("y"), 1, nil); !errors.Is(err, tier.ErrUnavailable) {
			t.Errorf("Put(%q) on a read-only store = %v; want ErrUnavailable", n, err)
		}
	}
	if err := l.Delete(bg, "a/b"); !errors.Is(err, tier.ErrUnavailable) {
		t.Errorf("Delete on a read-only store = %v; want ErrUnavailable", err)
	}
	if got, _ := storetest.MustGet(t, l, "a/b"); string(got) != "kept" {
		t.Errorf("Get on a read-only store = %q", got)
	}
}

// TestLocalNoSpace fills a small tmpfs (needs root; skipped otherwise).
func TestLocalNoSpace(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=256k"); err != nil {
		testenv.Skip(t, "mount tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	l := newLocal(t, dir)
	big := make([]byte, 1<<20)
	if err := l.Put(bg, "big", bytes.NewReader(big), int64(len(big)), nil); !errors.Is(err, tier.ErrNoSpace) {
		t.Fatalf("Put of 1 MiB into 256 KiB = %v; want ErrNoSpace", err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 0 {
		t.Fatalf("failed Put left %v", ents)
	}
	storetest.MustPut(t, l, "small", []byte("fits"), nil)
}

func TestNewLocalNotADirectory(t *testing.T) {
	f := filepath.Join(t.TempDir(), "file")
	must(t, os.WriteFile(f, nil, 0o600))
	if _, err := g4.NewLocal(f); err == nil {
		t.Fatal("NewLocal on a regular file succeeded")
	}
}
