package fusefs

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/catalog"
	"golang.org/x/sys/unix"

	"github.com/ctxmem/ctxmemd/internal/testchild"
	"github.com/ctxmem/ctxmemd/internal/testenv"
)

func lstat(t *testing.T, p string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func TestPersistAcrossRemount(t *testing.T) {
	m := mount(t, nil, Options{})
	d := m.ns("")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(d+"/a/b/empty", 0o750))
	must(os.WriteFile(d+"/a/b/f", pattern(1, 300000), 0o600))
	must(os.Chown(d+"/a/b/f", 1234, 5678))
	ts := []unix.Timespec{unix.NsecToTimespec(1e18 + 7), unix.NsecToTimespec(2e18 + 9)}
	must(unix.UtimesNanoAt(unix.AT_FDCWD, d+"/a/b/f", ts, 0))
	must(os.Symlink("b/f", d+"/a/link"))
	must(os.Link(d+"/a/b/f", d+"/hard"))
	must(os.Mkdir(d+"/sgid", 0o2775))
	must(os.Chmod(d+"/sgid", 0o2775))
	must(os.WriteFile(d+"/sgid/x", nil, 0o644))
	paths := []string{"a", "a/b", "a/b/empty", "a/b/f", "a/link", "hard", "sgid", "sgid/x", "."}
	before := map[string]unix.Stat_t{}
	for _, p := range paths {
		before[p] = lstat(t, filepath.Join(d, p))
	}
	if before["hard"].Nlink != 2 || before["hard"].Ino != before["a/b/f"].Ino {
		t.Fatalf("hard link: nlink %d", before["hard"].Nlink)
	}
	if before["sgid/x"].Gid != before["sgid"].Gid {
		t.Fatal("setgid directory: group not inherited")
	}
	m.restart()
	for _, p := range paths {
		got := lstat(t, filepath.Join(d, p))
		want := before[p]
		if got.Ino != want.Ino || got.Mode != want.Mode || got.Uid != want.Uid || got.Gid != want.Gid ||
			got.Size != want.Size || got.Nlink != want.Nlink || got.Mtim != want.Mtim || got.Atim != want.Atim {
			t.Errorf("%s after remount:\n got  %+v\n want %+v", p, got, want)
		}
	}
	if got, _ := os.ReadFile(d + "/hard"); !bytes.Equal(got, pattern(1, 300000)) {
		t.Error("content after remount")
	}
	if l, err := os.Readlink(d + "/a/link"); err != nil || l != "b/f" {
		t.Errorf("readlink after remount: %q %v", l, err)
	}
	// New inode numbers never reuse old ones.
	must(os.WriteFile(d+"/new", nil, 0o644))
	for _, st := range before {
		if lstat(t, d+"/new").Ino == st.Ino {
			t.Fatal("inode number reused")
		}
	}
}

// TestReconcile restarts on the same tree database with a store that lost
// an object, holds an orphan, and holds another front end's object.
func TestReconcile(t *testing.T) {
	m := mount(t, nil, Options{})
	d := m.ns("")
	for _, n := range []string{"a", "b", "c"} {
		if err := os.WriteFile(filepath.Join(d, n), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.Mkdir(d+"/dir", 0o755)
	os.WriteFile(d+"/dir/b2", []byte("b2"), 0o644)
	os.Link(d+"/b", d+"/dir/blink")
	lostID := m.obj(d + "/b")
	nsIno := m.node(d).ino
	m.stop()

	be := m.be
	be.mu.Lock()
	delete(be.objs, lostID) // gone while the daemon was down
	be.mu.Unlock()
	orphan, _ := be.Create(DefaultNamespace, DefaultBlockSize, ObjectKind)
	nbd, _ := be.Create("vol", DefaultBlockSize, "nbd")
	// A file unlinked while open when the daemon crashed: a node record
	// no entry reaches, and its object.
	crashed, _ := be.Create(DefaultNamespace, DefaultBlockSize, ObjectKind)
	db, err := catalog.Open(m.tree)
	if err != nil {
		t.Fatal(err)
	}
	ghost := &node{ino: 1 << 40, kind: kindFile, obj: crashed, mode: 0o644}
	// And an entry pointing at no node.
	err = db.Write(catalog.PutNode(ghost), catalog.PutDirent(nsIno, "dangling", 1<<41))
	db.Close()
	if err != nil {
		t.Fatal(err)
	}

	m.start()
	for _, p := range []string{"b", "dir/blink", "dangling"} {
		if _, err := os.Stat(filepath.Join(d, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after losing its object: %v, want ENOENT", p, err)
		}
	}
	for _, p := range []string{"a", "c", "dir/b2"} {
		if got, err := os.ReadFile(filepath.Join(d, p)); err != nil || string(got) != filepath.Base(p) {
			t.Errorf("%s: %q %v", p, got, err)
		}
	}
	if be.exists(orphan) || be.exists(crashed) {
		t.Error("orphan objects were not deleted")
	}
	if !be.exists(nbd) {
		t.Error("another front end's object was deleted")
	}
	names, _ := os.ReadDir(d)
	if len(names) != 3 {
		t.Errorf("entries: %v", names)
	}
	m.restart() // the cleanup itself was persisted
	if _, err := os.Stat(d + "/b"); !errors.Is(err, os.ErrNotExist) {
		t.Error("lost entry came back")
	}
}

func TestNamespaceIdentity(t *testing.T) {
	nsA := Namespace{Name: "a", Mode: 0o777, ModelID: "llama", ModelRevision: "1"}
	nsB := Namespace{Name: "b", Mode: 0o777, ModelID: "qwen"}
	m := mount(t, nil, Options{Namespaces: []Namespace{nsA, nsB}})
	os.WriteFile(filepath.Join(m.mnt, "a", "f"), []byte("a"), 0o644)
	os.WriteFile(filepath.Join(m.mnt, "b", "f"), []byte("b"), 0o644)
	idA, idB := m.obj(filepath.Join(m.mnt, "a", "f")), m.obj(filepath.Join(m.mnt, "b", "f"))

	// b is no longer configured: not served, but its files are kept.
	m.stop()
	m.opts.Namespaces = []Namespace{nsA}
	m.start()
	if _, err := os.Stat(filepath.Join(m.mnt, "b")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("unconfigured namespace served: %v", err)
	}
	if !m.be.exists(idB) {
		t.Fatal("objects of an unconfigured namespace were deleted")
	}
	// a's model revision changes: it starts empty, old objects deleted.
	m.stop()
	nsA.ModelRevision = "2"
	m.opts.Namespaces = []Namespace{nsA, nsB}
	m.start()
	if _, err := os.Stat(filepath.Join(m.mnt, "a", "f")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("file of a namespace whose identity changed: %v", err)
	}
	if m.be.exists(idA) {
		t.Fatal("objects of the old identity were kept")
	}
	if got, err := os.ReadFile(filepath.Join(m.mnt, "b", "f")); err != nil || string(got) != "b" {
		t.Fatalf("re-configured namespace b: %q %v", got, err)
	}
}

func TestOnLost(t *testing.T) {
	m := mount(t, nil, Options{Namespaces: []Namespace{{Name: "q", Mode: 0o777, QuotaBytes: 1 << 20}}})
	p := filepath.Join(m.mnt, "q", "f")
	if err := os.WriteFile(p, pattern(1, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := os.Stat(p); err != nil { // the dentry is cached for an hour
		t.Fatal(err)
	}
	m.be.lose(m.obj(p))
	testenv.Eventually(t, 10*time.Second, func() bool {
		_, err := os.Stat(p)
		return errors.Is(err, os.ErrNotExist)
	}, "lost file to vanish")
	if _, err := f.ReadAt(make([]byte, 4096), 0); !errors.Is(err, syscall.EIO) {
		t.Errorf("read of an open lost file: %v, want EIO", err)
	}
	// fstat then read on the held descriptor (a tail reader, the crash
	// soak's reader): an error, never end of file at offset 0.
	if fi, err := f.Stat(); err == nil && fi.Size() == 0 {
		t.Errorf("fstat of an open lost file says size 0")
	}
	if n, err := f.ReadAt(make([]byte, 4096), 8192); !errors.Is(err, syscall.EIO) {
		t.Errorf("read at 8192 of an open lost file after fstat: %d, %v; want EIO", n, err)
	}
	if err := os.WriteFile(p, pattern(2, 1<<20), 0o644); err != nil {
		t.Fatalf("quota of the lost file was not released: %v", err)
	}

	// An object that vanishes without OnLost is found by the next read.
	id := m.obj(p)
	m.be.mu.Lock()
	delete(m.be.objs, id)
	m.be.mu.Unlock()
	fd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if _, err := syscall.Read(fd, alignedBuf(4096)); err != syscall.EIO {
		t.Fatalf("read of a vanished object: %v, want EIO", err)
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		_, err := os.Stat(p)
		return errors.Is(err, os.ErrNotExist)
	}, "vanished file to be removed")
}

func TestMountBusy(t *testing.T) {
	m := mount(t, nil, Options{})
	_, err := Mount(context.Background(), m.mnt, newFakeBackend(), Options{TreePath: filepath.Join(t.TempDir(), "t.db"), Logger: m.opts.Logger})
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("second mount: %v, want ErrBusy", err)
	}
	// The tree database is locked by the live mount.
	_, err = Mount(context.Background(), t.TempDir(), newFakeBackend(), Options{TreePath: m.tree, Logger: m.opts.Logger})
	if err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("mount sharing a tree database: %v", err)
	}
}

// TestCrashRecovery kills -9 a child process serving a mount: the mount
// is left stale (ENOTCONN), Mount recovers it, and every change the child
// had acknowledged is in the tree database.
func TestCrashRecovery(t *testing.T) {
	requireFUSE(t)
	dir := t.TempDir()
	mnt, tree := filepath.Join(dir, "mnt"), filepath.Join(dir, "tree.db")
	os.Mkdir(mnt, 0o755)
	child := testchild.Start(t, "crash-mount", "CTXMEM_CRASH_MNT="+mnt, "CTXMEM_CRASH_TREE="+tree)
	child.Expect(t, "ready", time.Minute)
	killChild(t, child, mnt)
	t.Cleanup(func() {
		if _, ok := mountedAt(mnt); ok {
			lazyUnmount(mnt)
		}
	})

	var st syscall.Statfs_t
	if err := syscall.Statfs(mnt, &st); err != syscall.ENOTCONN {
		t.Fatalf("after kill -9: statfs %v, want ENOTCONN", err)
	}
	db, err := catalog.Open(tree)
	if err != nil {
		t.Fatal(err)
	}
	// The child never committed to the database: its changes are only in
	// the write-ahead log.
	if files, _ := catalog.WALFiles(tree); len(files) == 0 {
		t.Error("no tree log after kill -9")
	}
	if l, _ := db.Load(); len(l.Children) != 0 {
		t.Errorf("database has entries before replay: %v", l.Children)
	}
	if _, err := db.Replay(testLogger()); err != nil {
		t.Fatal(err)
	}
	if files, _ := catalog.WALFiles(tree); len(files) != 0 {
		t.Errorf("tree log left after replay: %v", files)
	}
	l, err := db.Load()
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, cs := range l.Children {
		for _, c := range cs {
			names[c.Name] = true
		}
	}
	if _, ok := l.Namespaces[DefaultNamespace]; !ok {
		t.Error("namespace record missing after kill -9")
	}
	for _, want := range []string{"kept", "renamed"} {
		if !names[want] {
			t.Errorf("acknowledged entry %q missing from the tree database after kill -9 (have %d names)", want, len(names))
		}
	}
	if names["tmp"] || names["gone"] {
		t.Error("renamed/unlinked entry still in the tree database")
	}

	srv, err := Mount(context.Background(), mnt, newFakeBackend(), Options{TreePath: tree, Logger: testLogger()})
	if err != nil {
		t.Fatalf("Mount over a stale mount: %v", err)
	}
	defer srv.Unmount()
	if _, err := os.ReadDir(filepath.Join(mnt, DefaultNamespace)); err != nil {
		t.Fatalf("after recovery: %v", err)
	}
}

// killChild kills -9 the child serving mnt and waits for it. A process
// killed while a request to its own mount is in flight hangs in the kernel
// until the connection is aborted, which is then done through fusectl.
func killChild(t *testing.T, child *testchild.Child, mnt string) {
	t.Helper()
	child.Kill()
	select {
	case <-child.Done():
		return
	case <-time.After(10 * time.Second):
	}
	t.Errorf("child stuck after kill -9; aborting its FUSE connection")
	if dev := mountDev(mnt); dev != "" {
		minor := dev[strings.IndexByte(dev, ':')+1:]
		if err := os.WriteFile("/sys/fs/fuse/connections/"+minor+"/abort", []byte("1"), 0); err != nil {
			t.Errorf("abort: %v (is fusectl mounted?)", err)
		}
	}
	<-child.Done()
}

// mountDev returns the major:minor of the mount at mnt from mountinfo.
func mountDev(mnt string) string {
	data, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && f[4] == mnt {
			return f[2]
		}
	}
	return ""
}

// crashMount is the child of TestCrashRecovery (role "crash-mount", see
// TestMain): it mounts $CTXMEM_CRASH_MNT, makes the changes the parent
// checks, prints "ready" and waits to be killed.
func crashMount(t testing.TB) {
	mnt, tree := os.Getenv("CTXMEM_CRASH_MNT"), os.Getenv("CTXMEM_CRASH_TREE")
	_, err := Mount(context.Background(), mnt, newFakeBackend(), Options{TreePath: tree, Logger: testLogger(),
		CommitInterval: time.Hour, commitGap: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	d := filepath.Join(mnt, DefaultNamespace)
	for _, step := range []func() error{
		func() error { return os.WriteFile(d+"/kept", []byte("k"), 0o644) },
		func() error { return os.WriteFile(d+"/tmp", []byte("t"), 0o644) },
		func() error { return os.Rename(d+"/tmp", d+"/renamed") },
		func() error { return os.WriteFile(d+"/gone", []byte("g"), 0o644) },
		func() error { return os.Remove(d + "/gone") },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	os.Stdout.WriteString("ready\n")
	time.Sleep(time.Hour)
}

func TestUnmountPaths(t *testing.T) {
	requireFUSE(t)
	for _, how := range []string{"cancel", "external"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			mnt := filepath.Join(dir, "mnt")
			os.Mkdir(mnt, 0o755)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			be := newFakeBackend()
			srv, err := Mount(ctx, mnt, be, Options{TreePath: filepath.Join(dir, "t.db"), Logger: testLogger()})
			if err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(mnt, DefaultNamespace, "f")
			os.WriteFile(p, nil, 0o644)
			f, _ := os.Open(p)
			os.Remove(p) // a nameless open file: its object goes at unmount
			f.Close()
			if how == "cancel" {
				cancel()
			} else if err := syscall.Unmount(mnt, 0); err != nil {
				t.Fatal(err)
			}
			waited := make(chan struct{})
			go func() { srv.Wait(); close(waited) }()
			select {
			case <-waited:
			case <-time.After(10 * time.Second):
				t.Fatal("Wait did not return after unmount")
			}
			if err := srv.Unmount(); err != nil {
				t.Fatalf("Unmount after unmount: %v", err)
			}
			if _, ok := mountedAt(mnt); ok {
				t.Fatal("still mounted")
			}
			if be.count() != 0 {
				t.Fatalf("objects left: %d", be.count())
			}
		})
	}
}
