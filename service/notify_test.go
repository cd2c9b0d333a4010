package service

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// listen creates a unixgram socket like systemd's notify socket, points
// NOTIFY_SOCKET at it and returns a channel of the datagrams received.
func listen(t *testing.T) <-chan string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sdn") // short: sun_path is 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("NOTIFY_SOCKET", path)
	t.Setenv("WATCHDOG_PID", "")
	msgs := make(chan string, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(msgs)
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			msgs <- string(buf[:n])
		}
	}()
	t.Cleanup(func() { conn.Close(); <-done })
	return msgs
}

// next returns the next datagram, failing the test after a generous wait
// (a liveness bound, not a timing assertion).
func next(t *testing.T, msgs <-chan string) string {
	t.Helper()
	select {
	case m := <-msgs:
		return m
	case <-time.After(20 * time.Second):
		t.Fatal("no sd_notify message arrived")
		return ""
	}
}

// skipUntil reads messages equal to skip until one starting with want
// arrives; it fails after at most 100 skipped messages (pings that never
// stop are the bug under test) or when nothing arrives.
func skipUntil(t *testing.T, msgs <-chan string, skip, want string) {
	t.Helper()
	for i := 0; i < 100; i++ {
		m := next(t, msgs)
		if m == skip {
			continue
		}
		if !strings.HasPrefix(m, want) {
			t.Fatalf("got %q, want %q", m, want)
		}
		return
	}
	t.Fatalf("still receiving %q, never %q", skip, want)
}

func TestReadyStatusStopping(t *testing.T) {
	msgs := listen(t)
	n := New(nil)
	if !n.Enabled() {
		t.Fatal("Enabled() = false with NOTIFY_SOCKET set")
	}
	if err := n.Ready("G2 1.0 GiB\nG3 10 GiB"); err != nil {
		t.Fatal(err)
	}
	if got, want := next(t, msgs), "READY=1\nSTATUS=G2 1.0 GiB G3 10 GiB"; got != want {
		t.Fatalf("Ready sent %q, want %q", got, want)
	}
	if err := n.Ready(""); err != nil {
		t.Fatal(err)
	}
	if got := next(t, msgs); got != "READY=1" {
		t.Fatalf("Ready(\"\") sent %q", got)
	}
	if err := n.Status("serving: 3 namespaces"); err != nil {
		t.Fatal(err)
	}
	if got := next(t, msgs); got != "STATUS=serving: 3 namespaces" {
		t.Fatalf("Status sent %q", got)
	}
	if err := n.Stopping(); err != nil {
		t.Fatal(err)
	}
	if got := next(t, msgs); got != "STOPPING=1" {
		t.Fatalf("Stopping sent %q", got)
	}
}

func TestNoSocketIsNoop(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	t.Setenv("WATCHDOG_USEC", "100000")
	n := New(nil)
	if n.Enabled() {
		t.Fatal("Enabled() = true without NOTIFY_SOCKET")
	}
	for _, err := range []error{n.Ready("x"), n.Status("x"), n.Stopping()} {
		if err != nil {
			t.Fatalf("no-op returned %v", err)
		}
	}
	called := false
	if err := n.RunWatchdog(context.Background(), func(context.Context) error { called = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if called {
		t.Fatal("RunWatchdog ran the check with no service manager")
	}
}

func TestWatchdogOffReturns(t *testing.T) {
	msgs := listen(t)
	t.Setenv("WATCHDOG_USEC", "")
	n := New(nil)
	if err := n.RunWatchdog(context.Background(), func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	_ = n.Status("end")
	if got := next(t, msgs); got != "STATUS=end" {
		t.Fatalf("without WATCHDOG_USEC the loop sent %q", got)
	}
}

func TestWatchdogPingsOnlyWhileCheckPasses(t *testing.T) {
	msgs := listen(t)
	t.Setenv("WATCHDOG_USEC", "60000") // 60 ms: a ping every 30 ms
	n := New(nil)
	if got := n.WatchdogInterval(); got != 60*time.Millisecond {
		t.Fatalf("WatchdogInterval = %v", got)
	}
	var healthy atomic.Bool
	healthy.Store(true)
	var checks atomic.Int64
	check := func(ctx context.Context) error {
		checks.Add(1)
		if _, ok := ctx.Deadline(); !ok {
			return errors.New("check context has no deadline")
		}
		if !healthy.Load() {
			return errors.New("mount wedged")
		}
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- n.RunWatchdog(ctx, check) }()
	defer func() {
		cancel()
		if err := <-stopped; err != nil {
			t.Errorf("RunWatchdog returned %v", err)
		}
	}()

	for i := 0; i < 3; i++ {
		if got := next(t, msgs); got != "WATCHDOG=1" {
			t.Fatalf("healthy: message %d is %q, want WATCHDOG=1", i, got)
		}
	}

	healthy.Store(false)
	// Pings already in flight drain first; then the failure shows as STATUS=.
	skipUntil(t, msgs, "WATCHDOG=1", "STATUS=watchdog check failing: mount wedged")
	// While it keeps failing, no ping may arrive: wait for several more
	// checks to have run and look at everything received.
	base := checks.Load()
	for checks.Load() < base+5 {
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case m := <-msgs:
		t.Fatalf("message %q sent while the check failed", m)
	default:
	}

	healthy.Store(true)
	if got := next(t, msgs); got != "WATCHDOG=1" {
		t.Fatalf("after recovery got %q, want WATCHDOG=1", got)
	}
}

func TestWatchdogWedgedCheckStopsPings(t *testing.T) {
	msgs := listen(t)
	t.Setenv("WATCHDOG_USEC", "40000")
	n := New(nil)
	release := make(chan struct{})
	var wedged atomic.Bool
	check := bounded(func() error {
		if wedged.Load() {
			<-release // a statfs stuck in a FUSE server that no longer answers
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { n.RunWatchdog(ctx, check); close(stopped) }()
	defer func() { close(release); cancel(); <-stopped }()

	if got := next(t, msgs); got != "WATCHDOG=1" {
		t.Fatalf("got %q, want WATCHDOG=1", got)
	}
	wedged.Store(true)
	skipUntil(t, msgs, "WATCHDOG=1", "STATUS=watchdog check failing: check did not return")
	select {
	case m := <-msgs:
		t.Fatalf("message %q sent while the check was wedged", m)
	case <-time.After(200 * time.Millisecond): // 10 ping periods
	}
}

func TestBoundedOneInFlight(t *testing.T) {
	release := make(chan struct{})
	calls := 0
	check := bounded(func() error {
		calls++
		<-release
		return errors.New("late")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := check(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hung check returned %v, want DeadlineExceeded", err)
	}
	if err := check(context.Background()); !errors.Is(err, ErrCheckBusy) {
		t.Fatalf("second check returned %v, want ErrCheckBusy", err)
	}
	close(release)
	// The hung call returns, frees the slot, and the next call runs fn again.
	for {
		err := check(context.Background())
		if errors.Is(err, ErrCheckBusy) {
			time.Sleep(time.Millisecond)
			continue
		}
		if err == nil || err.Error() != "late" {
			t.Fatalf("after release got %v, want fn's error", err)
		}
		break
	}
	if calls != 2 {
		t.Fatalf("fn ran %d times, want 2", calls)
	}
}

func TestStatfsCheck(t *testing.T) {
	if err := StatfsCheck(t.TempDir())(context.Background()); err != nil {
		t.Fatalf("statfs on a directory: %v", err)
	}
	err := StatfsCheck(filepath.Join(t.TempDir(), "missing"))(context.Background())
	if err == nil || !strings.Contains(err.Error(), "statfs") {
		t.Fatalf("statfs on a missing path returned %v", err)
	}
}
