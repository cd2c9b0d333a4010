package fusefs

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/tiering"

	"github.com/ctxmem/ctxmemd/internal/testenv"
)

// requireFUSE skips t unless real FUSE mounts are possible; with
// CTXMEM_REQUIRE_TOOLS=1 (as `make test` sets) it fails instead.
func requireFUSE(t testing.TB) {
	t.Helper()
	testenv.RequireFUSE(t)
}

type testMount struct {
	t    testing.TB
	be   *fakeBackend
	srv  *Server
	mnt  string
	tree string
	opts Options
}

// ns returns the path of namespace dir name ("" = the default namespace).
func (m *testMount) ns(name string) string {
	if name == "" {
		name = DefaultNamespace
	}
	return filepath.Join(m.mnt, name)
}

// mount mounts be (a new fake if nil) with opts on a fresh directory;
// the mount is undone in t.Cleanup.
func mount(t testing.TB, be *fakeBackend, opts Options) *testMount {
	t.Helper()
	requireFUSE(t)
	if be == nil {
		be = newFakeBackend()
	}
	dir := t.TempDir()
	if opts.TreePath == "" {
		opts.TreePath = filepath.Join(dir, "tree.db")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	m := &testMount{t: t, be: be, mnt: filepath.Join(dir, "mnt"), tree: opts.TreePath, opts: opts}
	if err := os.Mkdir(m.mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	m.start()
	t.Cleanup(m.stop)
	return m
}

func (m *testMount) start() {
	m.t.Helper()
	srv, err := Mount(context.Background(), m.mnt, m.be, m.opts)
	if err != nil {
		m.t.Fatalf("Mount: %v", err)
	}
	m.srv = srv
}

func (m *testMount) stop() {
	if m.srv == nil {
		return
	}
	var err error
	for i := 0; i < 50; i++ {
		if err = m.srv.Unmount(); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		m.t.Errorf("Unmount: %v", err)
	}
	m.srv = nil
}

// restart unmounts and mounts again on the same tree database and backend.
func (m *testMount) restart() {
	m.t.Helper()
	m.stop()
	m.start()
}

// node returns the tree node at path (absolute, under the mount), or nil.
func (m *testMount) node(path string) *node {
	rel, err := filepath.Rel(m.mnt, path)
	if err != nil {
		m.t.Fatal(err)
	}
	t := &m.srv.fsys.t
	t.mu.RLock()
	defer t.mu.RUnlock()
	n := t.root
	for _, part := range strings.Split(rel, "/") {
		if part == "." {
			continue
		}
		if n.dir == nil {
			return nil
		}
		if n = n.dir.Get(part); n == nil {
			return nil
		}
	}
	return n
}

// obj returns the object id of the file at path.
func (m *testMount) obj(path string) tiering.ObjectID {
	m.t.Helper()
	n := m.node(path)
	if n == nil || n.kind != kindFile {
		m.t.Fatalf("%s: no such file in the tree", path)
	}
	return n.obj
}

// pattern fills n bytes derived from seed.
func pattern(seed byte, n int) []byte {
	b := make([]byte, n)
	x := uint32(seed)*2654435761 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

func testLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
