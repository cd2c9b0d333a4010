package nbd

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/tiering"
	"github.com/ctxmem/ctxmemd/tiering/g3"

	"github.com/ctxmem/ctxmemd/internal/testenv"
)

// testLogger is quiet unless NBD_TEST_LOG=1.
func testLogger() *slog.Logger {
	if os.Getenv("NBD_TEST_LOG") == "1" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// testStore is a real tiering store (G2 + G3 on a directory).
type testStore struct {
	*tiering.Store
	g3  *g3.Store
	dir string
}

// openStore opens the real store in dir (G2 budget g2 bytes, G3 in dir/g3).
func openStore(t testing.TB, dir string, g2 int64) *testStore {
	t.Helper()
	t3, err := g3.Open(g3.Options{Dir: filepath.Join(dir, "g3"), CapacityBytes: 2 << 30, Logger: testLogger()})
	if err != nil {
		t.Fatalf("g3.Open: %v", err)
	}
	s, err := tiering.Open(context.Background(), tiering.Config{DataDir: dir, G2Bytes: g2, G3: t3,
		FlushWorkers: 2, Logger: testLogger()})
	if err != nil {
		t3.Close()
		t.Fatalf("tiering.Open: %v", err)
	}
	return &testStore{Store: s, g3: t3, dir: dir}
}

func (s *testStore) close(t testing.TB) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- s.Store.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("store close: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("store Close hangs; goroutines:\n%s", allStacks())
	}
	if err := s.g3.Close(); err != nil {
		t.Errorf("g3 close: %v", err)
	}
}

// newStore opens a store in a fresh temporary directory, closed at cleanup.
func newStore(t testing.TB, g2 int64) *testStore {
	s := openStore(t, t.TempDir(), g2)
	t.Cleanup(func() { s.close(t) })
	return s
}

// running is a Server serving on a unix socket.
type running struct {
	srv  *Server
	sock string
	stop func() // stops Serve and waits for it
}

// uri is the NBD URI of export name on r.
func (r *running) uri(name string) string { return "nbd+unix:///" + name + "?socket=" + r.sock }

// serve starts a Server for exports on be with state in stateDir; it is
// stopped at cleanup (or earlier with stop).
func serve(t testing.TB, be Backend, stateDir string, exports []Export, opts Options) *running {
	t.Helper()
	opts.StateDir = stateDir
	if opts.Logger == nil {
		opts.Logger = testLogger()
	}
	srv, err := NewServer(context.Background(), be, exports, opts)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	sock := filepath.Join(t.TempDir(), "nbd.sock")
	ln, err := Listen("unix://" + sock)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("Serve did not return 30 s after its context ended; goroutines:\n%s", allStacks())
		}
	}
	t.Cleanup(stop)
	return &running{srv: srv, sock: sock, stop: stop}
}

// needTool returns the path of a client tool, or skips the test when it is
// missing (fails instead when CTXMEM_REQUIRE_TOOLS=1, as `make test` sets).
func needTool(t testing.TB, name string) string {
	t.Helper()
	return testenv.RequireTool(t, name, "Debian: libnbd-bin python3-libnbd qemu-utils fio nbdkit")
}

func missingTool(t testing.TB, name string) {
	t.Helper()
	testenv.Skip(t, "%s not installed (Debian: libnbd-bin python3-libnbd qemu-utils fio nbdkit)", name)
}

// pythonNBD returns a python3 interpreter that can import libnbd's
// bindings (Debian installs them for /usr/bin/python3 only; a python3
// earlier in PATH may lack them).
func pythonNBD(t testing.TB) string {
	t.Helper()
	for _, py := range []string{"/usr/bin/python3", "python3"} {
		if p, err := exec.LookPath(py); err == nil && exec.Command(p, "-c", "import nbd").Run() == nil {
			return p
		}
	}
	missingTool(t, "python3 nbd module")
	return ""
}

// allStacks returns every goroutine's stack (to diagnose hangs).
func allStacks() string {
	buf := make([]byte, 1<<22)
	return string(buf[:runtime.Stack(buf, true)])
}

// run runs a command with a timeout and fails the test on error, showing
// its output.
func run(t testing.TB, timeout time.Duration, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s %q: no answer after %v; server goroutines:\n%s\noutput:\n%s", name, args, timeout, allStacks(), out)
	}
	if err != nil {
		t.Fatalf("%s %q: %v\n%s", name, args, err, out)
	}
	return string(out)
}

// pattern returns n deterministic pseudo-random bytes for seed.
func pattern(seed uint64, n int) []byte {
	b := make([]byte, n)
	x := seed*0x9E3779B97F4A7C15 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
	return b
}
