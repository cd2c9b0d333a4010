package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/hitratio"
)

// Options configure a daemon. Sizes are strings in ctxmemd's size syntax
// ("32MiB", "4096"); an empty field leaves the daemon's default.
type Options struct {
	DRAM      string   // --dram: G2 budget
	G3Size    string   // --g3-size: G3 capacity
	BlockSize string   // --block-size: default namespace block size
	G4        string   // --g4: object store URL; default file://<data-dir>/g4
	LogLevel  string   // --log-level; default "info"
	Extra     []string // further `run` flags, appended as given
	// MountTimeout bounds the wait for a live mount on each start;
	// default 20 s.
	MountTimeout time.Duration
	// Wrap prefixes the command line (e.g. nsenter --net=/var/run/netns/x
	// --), so the daemon runs in another network namespace while its
	// mount stays visible to the test. The wrapper must exec the daemon
	// (same pid), as nsenter does without --fork.
	Wrap []string
}

// Daemon is one ctxmemd daemon under test: a mount point, a data directory
// (both private to the test) and, while running, a `ctxmemd run` process.
// Methods must be called from the test goroutine.
type Daemon struct {
	t    testing.TB
	bin  string
	opts Options

	// Root holds Mount, DataDir, Config and the log.
	Root    string
	Mount   string // the FUSE mount point
	DataDir string // --data-dir
	Admin   string // admin socket (--admin)
	LogPath string // stdout+stderr of every start, appended
	Config  string // an empty YAML file passed as --config (so /etc is never read)

	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has been waited for
	exit   error         // cmd.Wait's result, valid after exited
	starts int
}

// Binary returns the ctxmemd binary the daemon runs.
func (d *Daemon) Binary() string { return d.bin }

// Namespace returns the directory of the default namespace, Mount/default.
func (d *Daemon) Namespace() string { return filepath.Join(d.Mount, "default") }

// Start creates a fresh root directory (short path, so the admin socket
// path stays under the unix-socket limit), starts `bin run` on it and waits
// until the mount is live; it fails the test (with the daemon's log) when
// the daemon exits or does not mount within Options.MountTimeout. Cleanup
// stops the daemon and always unmounts.
func Start(t testing.TB, bin string, opts Options) *Daemon {
	t.Helper()
	root, err := os.MkdirTemp("", "ctxm-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	d := &Daemon{t: t, bin: bin, opts: opts, Root: root,
		Mount: filepath.Join(root, "mnt"), DataDir: filepath.Join(root, "data"),
		Admin: filepath.Join(root, "admin.sock"), LogPath: filepath.Join(root, "daemon.log"),
		Config: filepath.Join(root, "ctxmemd.yaml")}
	for _, dir := range []string{d.Mount, d.DataDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(d.Config, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.cleanup)
	d.start()
	return d
}

// Args returns the `run` command line for this daemon (without the binary).
// CTXMEM_E2E_RUN_FLAGS (space-separated) adds flags to every daemon the
// tests start, e.g. "--passthrough=false" to run them all without FUSE
// passthrough.
func (d *Daemon) Args() []string {
	args := []string{"run", "--config", d.Config, "--mount", d.Mount, "--data-dir", d.DataDir,
		"--admin", d.Admin, "--metrics=", "--log-level", orDefault(d.opts.LogLevel, "info")}
	for _, f := range []struct{ flag, val string }{
		{"--dram", d.opts.DRAM}, {"--g3-size", d.opts.G3Size}, {"--block-size", d.opts.BlockSize}, {"--g4", d.opts.G4},
	} {
		if f.val != "" {
			args = append(args, f.flag, f.val)
		}
	}
	args = append(args, strings.Fields(os.Getenv("CTXMEM_E2E_RUN_FLAGS"))...)
	return append(args, d.opts.Extra...)
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// Running reports whether the daemon process is alive.
func (d *Daemon) Running() bool {
	if d.cmd == nil {
		return false
	}
	select {
	case <-d.exited:
		return false
	default:
		return true
	}
}

// Signal sends sig to the daemon process (SIGSTOP freezes it: its mount
// then never answers, like a hung device). Errors: not running.
func (d *Daemon) Signal(sig os.Signal) error {
	if !d.Running() {
		return errors.New("harness: daemon not running")
	}
	return d.cmd.Process.Signal(sig)
}

func (d *Daemon) start() {
	d.t.Helper()
	if d.Running() {
		d.t.Fatalf("harness: daemon already running (pid %d)", d.cmd.Process.Pid)
	}
	d.starts++
	logf, err := os.OpenFile(d.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		d.t.Fatal(err)
	}
	fmt.Fprintf(logf, "=== harness: start %d at %s: %s %s\n", d.starts, time.Now().Format(time.RFC3339Nano), d.bin,
		strings.Join(d.Args(), " "))
	cmd := exec.Command(d.bin, d.Args()...)
	if len(d.opts.Wrap) > 0 {
		cmd = exec.Command(d.opts.Wrap[0], append(append(d.opts.Wrap[1:len(d.opts.Wrap):len(d.opts.Wrap)], d.bin), d.Args()...)...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), "CTXMEM_CONFIG="+d.Config)
	if err := cmd.Start(); err != nil {
		logf.Close()
		d.t.Fatalf("harness: start %s: %v", d.bin, err)
	}
	d.cmd, d.exited = cmd, make(chan struct{})
	exited := d.exited
	go func() { // owned by the Daemon: ends when the process does (cleanup kills it)
		d.exit = cmd.Wait()
		logf.Close()
		close(exited)
	}()
	timeout := d.opts.MountTimeout
	if timeout == 0 {
		timeout = 20 * time.Second
	}
	deadline := time.Now().Add(timeout)
	for {
		if IsLiveFuse(d.Mount) {
			if st, err := os.Stat(d.Namespace()); err == nil && st.IsDir() {
				return
			}
		}
		select {
		case <-d.exited:
			d.t.Fatalf("harness: ctxmemd exited before mounting %s (%v); log:\n%s", d.Mount, d.exit, d.Log())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("harness: %s not a live FUSE mount with a default/ namespace after %v; log:\n%s", d.Mount, timeout, d.Log())
		}
	}
}

// Stop sends SIGTERM and waits up to 30 s for the daemon to exit. It
// returns an error when the daemon does not exit in time (it is then
// killed), exits with a non-zero status, or leaves its mount behind.
func (d *Daemon) Stop() error {
	d.t.Helper()
	if !d.Running() {
		return errors.New("harness: Stop: daemon not running")
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(30 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.exited
		return errors.New("harness: daemon did not exit within 30 s of SIGTERM (killed)")
	}
	var errs []error
	if d.exit != nil {
		errs = append(errs, fmt.Errorf("harness: daemon exited after SIGTERM with %v", d.exit))
	}
	if m, err := IsMounted(d.Mount); err != nil || m {
		errs = append(errs, fmt.Errorf("harness: %s still mounted after the daemon exited on SIGTERM (%v)", d.Mount, err))
	}
	return errors.Join(errs...)
}

// Kill9 kills the daemon with SIGKILL and waits for it. The FUSE mount is
// left behind, stale (ENOTCONN), as after a crash; the next start must
// recover it.
func (d *Daemon) Kill9() {
	d.t.Helper()
	if !d.Running() {
		d.t.Fatal("harness: Kill9: daemon not running")
	}
	_ = d.cmd.Process.Kill()
	<-d.exited
}

// Restart stops a running daemon (failing the test if Stop reports an
// error) and starts it again on the same mount point and data directory.
func (d *Daemon) Restart() {
	d.t.Helper()
	if d.Running() {
		if err := d.Stop(); err != nil {
			d.t.Fatalf("%v; log:\n%s", err, d.Log())
		}
	}
	d.start()
}

// SetOptions replaces the options the next start uses (the directories
// stay the same), e.g. to enable G3 on a later start.
func (d *Daemon) SetOptions(opts Options) { d.opts = opts }

// StartAgain starts a stopped or killed daemon on the same directories.
func (d *Daemon) StartAgain() { d.t.Helper(); d.start() }

// Log returns the daemon's combined output of every start so far.
func (d *Daemon) Log() string {
	b, err := os.ReadFile(d.LogPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	return string(b)
}

// TierStatus is one tier in Status.
type TierStatus struct {
	Name          string `json:"name"`
	UsedBytes     int64  `json:"used_bytes"`
	CapacityBytes int64  `json:"capacity_bytes"`
	Blocks        int64  `json:"blocks"`
	Degraded      bool   `json:"degraded"`
	Full          bool   `json:"full"`
	Recovering    bool   `json:"recovering"` // started during the tier's outage, listing pending
}

// Status is the part of `ctxmemd status --json` the tests read; Stats keeps
// the raw counters object.
type Status struct {
	Tiers       []TierStatus               `json:"tiers"`
	Stats       map[string]json.RawMessage `json:"stats"`
	Passthrough PassthroughStatus          `json:"passthrough"`
	// Lookups are the mount's KV lookups (package hitratio).
	Lookups hitratio.Counts `json:"lookups"`
	// G4Lifecycle is the S3 bucket lifecycle rule's state (g4_lifecycle).
	G4Lifecycle string          `json:"g4_lifecycle"`
	Raw         json.RawMessage `json:"-"`
}

// PassthroughStatus is the mount's FUSE passthrough state in Status.
type PassthroughStatus struct {
	On           bool   `json:"on"`
	Reason       string `json:"reason"`
	DaemonReads  int64  `json:"daemon_reads"`
	DaemonWrites int64  `json:"daemon_writes"`
}

// Tier returns the tier named name (case-insensitive) and whether it is there.
func (s Status) Tier(name string) (TierStatus, bool) {
	for _, t := range s.Tiers {
		if strings.EqualFold(t.Name, name) {
			return t, true
		}
	}
	return TierStatus{}, false
}

// Status runs `ctxmemd status --json --admin <socket>` and decodes it.
func (d *Daemon) Status(ctx context.Context) (Status, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, d.bin, "status", "--json", "--admin", d.Admin)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return Status{}, fmt.Errorf("ctxmemd status: %w: %s", err, errb.String())
	}
	var st Status
	if err := json.Unmarshal(out.Bytes(), &st); err != nil {
		return Status{}, fmt.Errorf("ctxmemd status --json: %w in %q", err, out.String())
	}
	if len(st.Tiers) == 0 {
		return st, fmt.Errorf("ctxmemd status --json: no tiers in %q", out.String())
	}
	st.Raw = out.Bytes()
	return st, nil
}

// cleanup kills a running daemon, unmounts, reports a leaked mount, prints
// the log when the test failed, and removes the root when nothing is
// mounted on it.
func (d *Daemon) cleanup() {
	if d.Running() {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.exited:
		case <-time.After(10 * time.Second):
			_ = d.cmd.Process.Kill()
			<-d.exited
		}
	}
	if m, _ := IsMounted(d.Mount); m {
		if err := ForceUnmount(d.Mount); err != nil {
			d.t.Errorf("harness: mount leaked: %v", err)
		}
	}
	if d.t.Failed() {
		d.t.Logf("harness: ctxmemd log (%s):\n%s", d.LogPath, tail(d.Log(), 300))
	}
	if m, err := IsMounted(d.Mount); err == nil && !m {
		_ = os.RemoveAll(d.Root)
	}
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) <= n {
		return s
	}
	return fmt.Sprintf("(%d lines omitted)\n%s", len(lines)-n, strings.Join(lines[len(lines)-n:], "\n"))
}
