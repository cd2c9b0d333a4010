package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/internal/testenv"
	"github.com/ctxmem/ctxmemd/tiering"
)

type fakeProvider struct {
	mu       sync.Mutex
	st       Status
	prestage []string
	pinned   map[string]bool
}

func (f *fakeProvider) Status(context.Context) (Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st, nil
}

func (f *fakeProvider) Prestage(_ context.Context, p string) error {
	if !strings.HasPrefix(p, "ns/") {
		return fmt.Errorf("prestage %s: %w", p, ErrNotFound)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.prestage = append(f.prestage, p)
	return nil
}

func (f *fakeProvider) SetPinned(_ context.Context, p string, pinned bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pinned[p] = pinned
	return nil
}

func sampleStatus() Status {
	return Status{
		Mount: "/mnt/ctx", DataDir: "/var/lib/ctxmemd",
		Tiers: []tiering.TierUsage{
			{Name: "G2", UsedBytes: 3 << 20, CapacityBytes: 1 << 30, Blocks: 12, HighWatermark: 0.9, LowWatermark: 0.75},
			{Name: "G3", UsedBytes: 5 << 20, CapacityBytes: 10 << 30, Blocks: 20},
		},
		Stats: tiering.Stats{ReadRequests: 10, ReadRequestHits: 7, BlockReads: 40, BlockHits: map[string]int64{"G2": 30, "G3": 5},
			BlockMisses: 5, Evictions: map[string]int64{"G2": 3}, CRCErrors: 1, Objects: 4},
		Namespaces: []NamespaceStatus{{Name: "llama", Objects: 4, Bytes: 8 << 20, BlockSize: 256 << 10}},
	}
}

// startServer runs Serve in the background and returns the socket path, the
// provider and a stop function that returns Serve's error.
func startServer(t *testing.T) (string, *fakeProvider, func() error) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "admin.sock")
	p := &fakeProvider{st: sampleStatus(), pinned: map[string]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- Serve(ctx, Options{Socket: sock, Provider: p, Version: "v1.2.3", Started: time.Now().Add(-time.Minute)})
	}()
	waitFor(t, sock)
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return <-errc
	}
	t.Cleanup(func() { stop() })
	return sock, p, stop
}

// waitFor waits until something listens on the unix socket sock.
func waitFor(t *testing.T, sock string) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, func() bool {
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, "the server to listen on %s", sock)
}

func TestStatusRoundTrip(t *testing.T) {
	sock, p, stop := startServer(t)
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Mode().Type() != os.ModeSocket {
		t.Fatalf("socket mode %v, %v", fi.Mode(), err)
	}
	c := NewClient(sock)
	defer c.Close()
	st, err := c.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Version != "v1.2.3" || st.UptimeSeconds < 59 || st.PID != os.Getpid() {
		t.Errorf("server fields: %q %g %d", st.Version, st.UptimeSeconds, st.PID)
	}
	want := p.st
	st.Version, st.UptimeSeconds, st.PID = "", 0, 0
	if !reflect.DeepEqual(st, want) {
		t.Errorf("status\n got %+v\nwant %+v", st, want)
	}
	// The wire format has tiers[].{name,used_bytes,capacity_bytes,blocks}.
	hc := http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return net.Dial("unix", sock)
	}}}
	resp, err := hc.Get("http://x/status")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var raw struct {
		Tiers []map[string]any `json:"tiers"`
	}
	if err := json.Unmarshal(body, &raw); err != nil || len(raw.Tiers) != 2 {
		t.Fatalf("raw: %s %v", body, err)
	}
	for _, k := range []string{"name", "used_bytes", "capacity_bytes", "blocks"} {
		if _, ok := raw.Tiers[0][k]; !ok {
			t.Errorf("tiers[0] lacks %q: %s", k, body)
		}
	}
	if raw.Tiers[1]["name"] != "G3" || raw.Tiers[1]["used_bytes"].(float64) != 5<<20 {
		t.Errorf("tiers[1] = %v", raw.Tiers[1])
	}
	// Wrong method.
	resp, _ = hc.Post("http://x/status", "application/json", nil)
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /status: %d", resp.StatusCode)
	}
	resp.Body.Close()
	hc.CloseIdleConnections()

	if err := stop(); err != nil {
		t.Errorf("Serve returned %v after cancel", err)
	}
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket not removed at shutdown: %v", err)
	}
	if _, err := c.Status(context.Background()); !errors.Is(err, ErrNotRunning) {
		t.Errorf("status after stop: %v, want ErrNotRunning", err)
	}
}

func TestControls(t *testing.T) {
	sock, p, _ := startServer(t)
	c := NewClient(sock)
	defer c.Close()
	ctx := context.Background()
	if err := c.Prestage(ctx, "ns/a.bin"); err != nil {
		t.Fatal(err)
	}
	if err := c.Prestage(ctx, "other/b.bin"); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown path: %v, want ErrNotFound", err)
	}
	if err := c.SetPinned(ctx, "ns/a.bin", true); err != nil {
		t.Fatal(err)
	}
	if err := c.SetPinned(ctx, "ns/c.bin", false); err != nil {
		t.Fatal(err)
	}
	if err := c.Evict(ctx, "ns/a.bin"); !errors.Is(err, ErrUnsupported) {
		t.Errorf("evict on a provider without Evicter: %v, want ErrUnsupported", err)
	}
	if err := c.Prestage(ctx, ""); err == nil || !strings.Contains(err.Error(), "path is required") {
		t.Errorf("empty path: %v", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !reflect.DeepEqual(p.prestage, []string{"ns/a.bin"}) || !reflect.DeepEqual(p.pinned, map[string]bool{"ns/a.bin": true, "ns/c.bin": false}) {
		t.Errorf("provider saw prestage %v pinned %v", p.prestage, p.pinned)
	}
}

func TestSocketSafety(t *testing.T) {
	sock, _, _ := startServer(t)
	// A second daemon on the same socket is refused and leaves it alone.
	err := Serve(context.Background(), Options{Socket: sock, Provider: &fakeProvider{}})
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), sock) {
		t.Errorf("second Serve: %v, want ErrInUse naming the socket", err)
	}
	if _, err := NewClient(sock).Status(context.Background()); err != nil {
		t.Errorf("first daemon disturbed: %v", err)
	}

	// A stale socket (nobody listening) is replaced.
	dir := t.TempDir()
	stale := filepath.Join(dir, "stale.sock")
	ln, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- Serve(ctx, Options{Socket: stale, Provider: &fakeProvider{st: sampleStatus()}}) }()
	waitFor(t, stale)
	if st, err := NewClient(stale).Status(context.Background()); err != nil || st.Mount != "/mnt/ctx" {
		t.Errorf("after stale socket: %+v %v", st, err)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Error(err)
	}

	// A regular file is never replaced.
	reg := filepath.Join(dir, "file.sock")
	os.WriteFile(reg, []byte("keep"), 0o644)
	if err := Serve(context.Background(), Options{Socket: reg, Provider: &fakeProvider{}}); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("regular file: %v", err)
	}
	if b, _ := os.ReadFile(reg); string(b) != "keep" {
		t.Error("regular file was touched")
	}
	// No daemon at all.
	if _, err := NewClient(filepath.Join(dir, "none.sock")).Status(context.Background()); !errors.Is(err, ErrNotRunning) {
		t.Errorf("absent socket: %v", err)
	}
}

// TestDialErrors: a socket the caller may not open is ErrPermission with
// what to do (issue 16 item 3), not "no daemon is listening"; a refused
// connection is ErrNotRunning.
func TestDialErrors(t *testing.T) {
	c := &Client{socket: "/run/ctxmem/admin.sock"}
	dial := func(errno syscall.Errno) error {
		return &net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", errno)}
	}
	if err := c.dialError(context.Background(), "GET", "/status", dial(syscall.EACCES)); !errors.Is(err, ErrPermission) ||
		!strings.Contains(err.Error(), "run as root") || errors.Is(err, ErrNotRunning) {
		t.Errorf("EACCES: %v", err)
	}
	if err := c.dialError(context.Background(), "GET", "/status", dial(syscall.ECONNREFUSED)); !errors.Is(err, ErrNotRunning) {
		t.Errorf("ECONNREFUSED: %v", err)
	}
}

// TestHungDaemonIsNotRunning: a socket that takes the connection and never
// answers (a daemon stopped with SIGSTOP, or hung) is reported as not
// answering (ErrNotRunning: the CLI's exit 3), after the request timeout.
func TestHungDaemonIsNotRunning(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "hung.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	c := NewClient(sock)
	c.hc.Timeout = 200 * time.Millisecond
	_, err = c.Status(context.Background())
	if !errors.Is(err, ErrNotRunning) || !strings.Contains(err.Error(), "no answer") {
		t.Fatalf("Status of a hung daemon: %v; want ErrNotRunning saying it sent no answer", err)
	}
}
