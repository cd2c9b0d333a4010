// Package tests holds ctxmemd's end-to-end tests: they build the real
// binary, mount it with `ctxmemd run` and drive the mount with real clients
// (go-fuse's POSIX suite, the engine workloads W1–W5, fio, `ctxmemd
// replay`), including crashes (kill -9) and restarts.
//
// They run only with CTXMEM_E2E=1 (and as root, with /dev/fuse); without it
// every test skips. With it, anything missing is a failure, except fio,
// which skips its test when not installed. TestMain builds ./cmd/ctxmemd
// once; CTXMEM_E2E_BIN=/path/to/binary uses that binary instead, and
// CTXMEM_TRACE overrides the trace (default the bundled Mooncake trace,
// traces/conversation_trace.jsonl.gz in this repository).
//
// The replay tests take minutes (2,000 requests each; CTXMEM_E2E_REQUESTS
// changes that), so give go test a long timeout:
//
//	CTXMEM_E2E=1 go test -count=1 -timeout 60m -v ./tests/
package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/posixtest"
	"golang.org/x/sys/unix"

	"github.com/ctxmem/ctxmemd/hitratio"
	"github.com/ctxmem/ctxmemd/tests/harness"
	"github.com/ctxmem/ctxmemd/tests/workloads"
	"github.com/ctxmem/ctxmemd/traces"

	"github.com/ctxmem/ctxmemd/internal/testenv"
)

// e2eEnv gates the whole file.
const e2eEnv = "CTXMEM_E2E"

// binary is the ctxmemd binary TestMain built ("" when e2e is off).
var binary string

func TestMain(m *testing.M) {
	if os.Getenv(e2eEnv) != "1" {
		os.Exit(m.Run()) // every test skips
	}
	if b := os.Getenv("CTXMEM_E2E_BIN"); b != "" { // a prebuilt (or stand-in) binary
		binary = b
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "ctxmemd-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	binary, err = harness.BuildBinary(ctx, dir)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// needE2E skips unless CTXMEM_E2E=1 and fails when the machine cannot run
// the tests; it returns the binary.
func needE2E(t *testing.T) string {
	t.Helper()
	if os.Getenv(e2eEnv) != "1" {
		t.Skipf("end-to-end test: set %s=1 to run (needs root and /dev/fuse)", e2eEnv)
	}
	if os.Geteuid() != 0 {
		t.Fatal("end-to-end tests need root (FUSE mounts with allow_other)")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Fatalf("end-to-end tests need /dev/fuse: %v", err)
	}
	return binary
}

// tracePath is the bundled Mooncake trace (traces/, gzip), or
// $CTXMEM_TRACE.
func tracePath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CTXMEM_TRACE"); p != "" {
		return p
	}
	root, err := harness.RepoRoot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(root, filepath.FromSlash(traces.BundledName))
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("bundled trace missing (set CTXMEM_TRACE): %v", err)
	}
	return p
}

// posixSkips are the go-fuse posixtest cases ctxmemd does not claim, with
// the reason (the same list as fusefs's own posix test).
var posixSkips = map[string]string{
	"FallocateKeepSize":   "FALLOC_FL_KEEP_SIZE is EOPNOTSUPP by design (engines' fallback expects exactly that)",
	"FcntlFlockLocksFile": "expects a same-process POSIX lock conflict (OFD semantics); locks are kernel-local",
}

// TestE2EPosix runs go-fuse's POSIX conformance suite, each case in a
// fresh directory of the daemon's default namespace.
func TestE2EPosix(t *testing.T) {
	d := harness.Start(t, needE2E(t), harness.Options{DRAM: "256MiB", G3Size: "1GiB"})
	names := make([]string, 0, len(posixtest.All))
	for n := range posixtest.All {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		if why, ok := posixSkips[name]; ok {
			t.Logf("%s not run: %s", name, why) // does not apply to this mount: not a missing tool
			continue
		}
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(d.Namespace(), "posix-"+name)
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			posixtest.All[name](t, dir)
		})
	}
	if !harness.IsLiveFuse(d.Mount) {
		t.Fatalf("mount %s not live after the POSIX suite", d.Mount)
	}
}

// e2eParams are the workload parameters for a ctxmemd mount: statvfs
// follows the namespace's usage, O_DIRECT must be accepted but FUSE does
// not enforce alignment, and whole objects may be dropped.
var e2eParams = workloads.Params{
	ObjectSize: 1 << 20, Objects: 24, Ranks: 2, Workers: 3,
	RequireODirect: true, StrictDIO: false, ExpectBsize4096: true, StatfsTracksUsage: true, AllowLoss: true,
}

// TestE2EWorkloads runs the engine workloads W1–W5 in the default namespace.
func TestE2EWorkloads(t *testing.T) {
	d := harness.Start(t, needE2E(t), harness.Options{DRAM: "128MiB", G3Size: "1GiB"})
	for _, w := range []struct {
		name string
		fn   func(context.Context, string, workloads.Params) (workloads.Report, error)
	}{{"W1", workloads.RunW1}, {"W2", workloads.RunW2}, {"W3", workloads.RunW3}, {"W4", workloads.RunW4}, {"W5", workloads.RunW5}} {
		t.Run(w.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			rep, err := w.fn(ctx, d.Namespace(), e2eParams)
			t.Log(rep)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Checks == 0 || rep.BytesRead == 0 {
				t.Fatalf("%s checked nothing: %v", w.name, rep)
			}
		})
	}
	if _, err := d.Status(context.Background()); err != nil {
		t.Fatalf("status after the workloads: %v", err)
	}
	// Issue 18: once the workloads' files are removed, their block copies
	// leave G3 and G4 within 30 s and no garbage is left queued.
	ents, err := os.ReadDir(d.Namespace())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(d.Namespace(), e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	var last string
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := d.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var pending int64
		_ = json.Unmarshal(st.Stats["gc_pending"], &pending)
		g3, _ := st.Tier("G3")
		g4, _ := st.Tier("G4")
		last = fmt.Sprintf("gc pending %d, G3 %d blocks (%d bytes), G4 %d blocks (%d bytes)", pending, g3.Blocks, g3.UsedBytes, g4.Blocks, g4.UsedBytes)
		if pending == 0 && g3.Blocks == 0 && g4.Blocks == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after rm -rf of every file: %s", last)
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("after rm -rf: %s", last)
	if strings.Contains(d.Log(), "panic:") {
		t.Fatalf("daemon log shows a panic")
	}
}

// fioJob is one fio job file; %s is replaced with the directory.
const fioJob = `[global]
directory=%s
size=64M
bsrange=4k-256k
rw=randrw
verify=crc32c
verify_fatal=1
do_verify=1
[%s]
%s
`

// TestE2EFio runs fio with crc32c verification through the mount, buffered
// and with direct=1 libaio at queue depth 16.
func TestE2EFio(t *testing.T) {
	bin := needE2E(t)
	if _, err := exec.LookPath("fio"); err != nil {
		testenv.Skip(t, "fio not installed (apt-get install fio)")
	}
	d := harness.Start(t, bin, harness.Options{DRAM: "256MiB", G3Size: "1GiB"})
	for _, job := range []struct{ name, opts string }{
		{"buffered", "direct=0\nioengine=psync"},
		{"direct-libaio", "direct=1\nioengine=libaio\niodepth=16"},
	} {
		t.Run(job.name, func(t *testing.T) {
			dir := filepath.Join(d.Namespace(), "fio-"+job.name)
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			jobFile := filepath.Join(t.TempDir(), job.name+".fio")
			if err := os.WriteFile(jobFile, []byte(fmt.Sprintf(fioJob, dir, job.name, job.opts)), 0o644); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			var out, errb bytes.Buffer
			cmd := exec.CommandContext(ctx, "fio", "--output-format=json", jobFile)
			cmd.Stdout, cmd.Stderr = &out, &errb
			cmd.Dir = t.TempDir() // fio leaves its verify state file in its working directory
			err := cmd.Run()
			var res struct {
				Jobs []struct {
					Name  string `json:"jobname"`
					Error int    `json:"error"`
					Read  struct {
						IOBytes int64 `json:"io_bytes"`
					} `json:"read"`
					Write struct {
						IOBytes int64 `json:"io_bytes"`
					} `json:"write"`
				} `json:"jobs"`
			}
			if jerr := json.Unmarshal(out.Bytes(), &res); err != nil || jerr != nil {
				t.Fatalf("fio: %v (json: %v)\nstderr: %s\nstdout: %s", err, jerr, errb.String(), out.String())
			}
			for _, j := range res.Jobs {
				t.Logf("fio %s: read %d B, wrote %d B, error %d", j.Name, j.Read.IOBytes, j.Write.IOBytes, j.Error)
				if j.Error != 0 || j.Write.IOBytes == 0 || j.Read.IOBytes == 0 {
					t.Errorf("fio job %s: error %d, read %d, wrote %d", j.Name, j.Error, j.Read.IOBytes, j.Write.IOBytes)
				}
			}
			if strings.Contains(errb.String(), "verify") {
				t.Errorf("fio reports verification problems: %s", errb.String())
			}
		})
	}
}

// smallTiers is a daemon with 32 MiB of G2 and 64 MiB of G3 (in 8 MiB
// segments, so the watermarks leave room to demote), so that a replay of
// 2,000 requests pushes blocks down to G4.
var smallTiers = harness.Options{DRAM: "32MiB", G3Size: "64MiB", BlockSize: "64KiB",
	Extra: []string{"--g3-segment-size", "8MiB"}}

// replayRequests is the number of trace requests a replay test replays:
// $CTXMEM_E2E_REQUESTS, else def.
func replayRequests(t *testing.T, def int) int {
	t.Helper()
	if v := os.Getenv("CTXMEM_E2E_REQUESTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("CTXMEM_E2E_REQUESTS=%q: want a positive integer", v)
		}
		return n
	}
	return def
}

// replayArgs are the replay flags of the tier tests.
func replayArgs(t *testing.T, d *harness.Daemon, requests int) []string {
	return []string{"--trace", tracePath(t), "--requests", fmt.Sprint(requests), "--mount", d.Namespace(),
		"--block-bytes", "65536", "--concurrency", "4", "--quiet"}
}

// tierBlocks returns the block count of the named tier (0 when absent).
func tierBlocks(st harness.Status, name string) int64 {
	ti, _ := st.Tier(name)
	return ti.Blocks
}

// TestE2EReplayMovesBlocksDown replays 2,000 trace requests with a small G2
// and G3, so blocks move G2 → G3 → G4: no verification failure, and status
// shows blocks in G3 and G4.
func TestE2EReplayMovesBlocksDown(t *testing.T) {
	d := harness.Start(t, needE2E(t), smallTiers)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	res, code, stderr, err := harness.Replay(ctx, d.Binary(), replayArgs(t, d, replayRequests(t, 2000))...)
	if err != nil {
		t.Fatalf("%v\nstderr: %s", err, stderr)
	}
	t.Logf("replay: exit %d, %+v", code, res)
	if res.VerifyFailures != 0 || res.WriteErrors != 0 || code != harness.ExitOK {
		t.Fatalf("replay: exit %d, %d verification failures, %d write errors\nstderr: %s", code, res.VerifyFailures, res.WriteErrors, stderr)
	}
	if res.Blocks == 0 || res.BlockMisses == 0 {
		t.Fatalf("replay did nothing: %+v", res)
	}
	// Demotion is asynchronous: wait for blocks to reach G3 and G4.
	var st harness.Status
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, err = d.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if tierBlocks(st, "G3") > 0 && tierBlocks(st, "G4") > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after replay, want blocks in G3 and G4; status: %s", st.Raw)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("tiers: %+v", st.Tiers)
	checkSameHitRatio(t, res, st)
}

// checkSameHitRatio: the daemon counted the replay's lookups as the replay
// did (issue 16 item 4; package hitratio): the same misses and hits, and
// by tier the same up to blocks that moved between the replay's getxattr
// and its open (a background eviction can fall between the two).
func checkSameHitRatio(t *testing.T, res harness.ReplayResult, st harness.Status) {
	t.Helper()
	l := st.Lookups
	t.Logf("replay: %d blocks, %d hits %v, %d misses, served from G2 %.4f, found in any tier %.4f", res.Blocks, res.BlockHits,
		res.HitsByTier, res.BlockMisses, res.G2HitRatio, res.AnyTierRatio)
	t.Logf("daemon: %d lookups, hits %v, %d misses, served from G2 %.4f, found in any tier %.4f", l.Lookups(), l.Hits, l.Misses,
		l.ServedFromG2(), l.FoundInAnyTier())
	if l.Misses != res.BlockMisses || l.HitTotal() != res.BlockHits {
		t.Errorf("daemon counted %d hits and %d misses; the replay %d and %d", l.HitTotal(), l.Misses, res.BlockHits, res.BlockMisses)
	}
	if res.HitsByTier[hitratio.Unknown] != 0 {
		t.Errorf("replay could not read the tier of %d hits", res.HitsByTier[hitratio.Unknown])
	}
	slack := max(res.BlockHits/100, 2)
	for _, tn := range hitratio.Tiers() {
		if d := l.Hits[tn] - res.HitsByTier[tn]; d > slack || -d > slack {
			t.Errorf("tier %s: daemon %d hits, replay %d", tn, l.Hits[tn], res.HitsByTier[tn])
		}
	}
}

// TestE2EKill9MidReplay kills the daemon with SIGKILL in the middle of a
// replay, restarts it on the stale mount, and replays again: no
// verification failure, and surviving files still hit.
func TestE2EKill9MidReplay(t *testing.T) {
	d := harness.Start(t, needE2E(t), smallTiers)
	args := replayArgs(t, d, replayRequests(t, 2000))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()

	type outcome struct {
		res    harness.ReplayResult
		code   int
		stderr string
		err    error
	}
	first := make(chan outcome, 1)
	go func() { // owned by this test: it ends when the replay process does
		res, code, stderr, err := harness.Replay(ctx, d.Binary(), args...)
		first <- outcome{res, code, stderr, err}
	}()
	// Let the replay write for a while (and reach G3) before the crash.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(time.Second)
		if st, err := d.Status(ctx); err == nil && tierBlocks(st, "G3") > 0 && time.Until(deadline) < 25*time.Second {
			break
		}
	}
	d.Kill9()
	if !harness.IsStale(d.Mount) {
		t.Logf("note: %s is not stale (ENOTCONN) after kill -9", d.Mount)
	}
	select {
	case o := <-first:
		t.Logf("replay during the crash: exit %d, %+v, err %v", o.code, o.res, o.err)
		if o.res.VerifyFailures != 0 {
			t.Errorf("replay saw %d verification failures before/at the crash (wrong bytes are never allowed)\n%s", o.res.VerifyFailures, o.stderr)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("replay did not end within 2 minutes of the daemon's kill -9")
	}

	d.StartAgain() // must recover the stale mount
	survivors := 0
	err := filepath.WalkDir(d.Namespace(), func(_ string, e os.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() {
			survivors++
		}
		return err
	})
	if err != nil {
		t.Fatalf("walk %s after restart: %v", d.Namespace(), err)
	}
	t.Logf("%d files survived the kill -9", survivors)
	if survivors == 0 {
		t.Fatal("no file written before the kill -9 survived the restart")
	}
	res, code, stderr, err := harness.Replay(ctx, d.Binary(), args...)
	if err != nil {
		t.Fatalf("%v\nstderr: %s", err, stderr)
	}
	t.Logf("replay after restart: exit %d, %+v", code, res)
	if res.VerifyFailures != 0 || code == harness.ExitVerify {
		t.Fatalf("replay after kill -9 and restart: %d verification failures\n%s", res.VerifyFailures, stderr)
	}
	if res.BlockHits == 0 {
		t.Fatalf("replay after restart: no hits at all: %+v", res)
	}
}

// TestE2EBusyMountPoint: a second daemon on a live ctxmemd mount, and a
// daemon on a tmpfs mount point, are refused with a clear message, and the
// existing mounts stay as they were.
func TestE2EBusyMountPoint(t *testing.T) {
	bin := needE2E(t)
	d := harness.Start(t, bin, harness.Options{DRAM: "64MiB", G3Size: "256MiB"})
	probe := filepath.Join(d.Namespace(), "still-served")
	if err := os.WriteFile(probe, []byte("first daemon"), 0o644); err != nil {
		t.Fatal(err)
	}

	refused := func(t *testing.T, mount string) {
		t.Helper()
		data := t.TempDir()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cfg := filepath.Join(t.TempDir(), "empty.yaml")
		os.WriteFile(cfg, nil, 0o644)
		out, err := exec.CommandContext(ctx, bin, "run", "--config", cfg, "--mount", mount, "--data-dir", data,
			"--admin", filepath.Join(data, "a.sock"), "--metrics=", "--dram", "16MiB", "--g3-size", "256MiB").CombinedOutput()
		if ctx.Err() != nil {
			t.Fatalf("second daemon on busy %s did not exit within 30 s:\n%s", mount, out)
		}
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() == 0 {
			t.Fatalf("second daemon on busy %s: err %v, want a non-zero exit:\n%s", mount, err, out)
		}
		msg := strings.ToLower(string(out))
		if !strings.Contains(msg, "busy") && !strings.Contains(msg, "already") && !strings.Contains(msg, "in use") {
			t.Errorf("refusal does not say the mount point is busy:\n%s", out)
		}
		if !strings.Contains(string(out), mount) {
			t.Errorf("refusal does not name the mount point %s:\n%s", mount, out)
		}
	}

	t.Run("live ctxmemd", func(t *testing.T) {
		refused(t, d.Mount)
		if got, err := os.ReadFile(probe); err != nil || string(got) != "first daemon" {
			t.Fatalf("first daemon disturbed: %q %v", got, err)
		}
	})
	t.Run("tmpfs", func(t *testing.T) {
		mnt := t.TempDir()
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", mnt).CombinedOutput(); err != nil {
			t.Fatalf("mount tmpfs: %v %s", err, out)
		}
		t.Cleanup(func() { _ = harness.ForceUnmount(mnt) })
		os.WriteFile(filepath.Join(mnt, "mine"), []byte("x"), 0o644)
		refused(t, mnt)
		var st unix.Statfs_t
		if err := unix.Statfs(mnt, &st); err != nil || st.Type != 0x01021994 {
			t.Fatalf("the tmpfs on %s was unmounted or replaced (type %#x, %v)", mnt, st.Type, err)
		}
		if _, err := os.Stat(filepath.Join(mnt, "mine")); err != nil {
			t.Fatalf("tmpfs content gone: %v", err)
		}
	})
}

// TestE2ESigtermUnmounts: SIGTERM makes the daemon exit 0 and unmount; a
// file written before survives the clean restart.
func TestE2ESigtermUnmounts(t *testing.T) {
	d := harness.Start(t, needE2E(t), harness.Options{DRAM: "64MiB", G3Size: "256MiB"})
	p := filepath.Join(d.Namespace(), "kept.bin")
	data := make([]byte, 3<<20+12345)
	workloads.Fill(data, "kept", 1, 0)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	if harness.IsLiveFuse(d.Mount) {
		t.Fatalf("%s is still a FUSE mount after SIGTERM", d.Mount)
	}
	if strings.Contains(d.Log(), "panic:") {
		t.Fatal("daemon log shows a panic")
	}
	d.StartAgain()
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("file written before a clean SIGTERM shutdown is gone after restart: %v", err)
	}
	if len(got) != len(data) || workloads.Verify(got, "kept", 1, 0) != -1 {
		t.Fatalf("file read back after restart: %d bytes (want %d), first wrong byte %d", len(got), len(data), workloads.Verify(got, "kept", 1, 0))
	}
}

// TestE2ELostBlocksFileDisappears deletes the G3 and G4 contents while the
// daemon is stopped: after restart every file whose blocks are gone is
// ENOENT (at the latest right after a failed read), never wrong bytes.
func TestE2ELostBlocksFileDisappears(t *testing.T) {
	d := harness.Start(t, needE2E(t), harness.Options{DRAM: "16MiB", G3Size: "256MiB", BlockSize: "256KiB"})
	dir := filepath.Join(d.Namespace(), "lost")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	const files, size = 12, 2 << 20
	buf := make([]byte, size)
	for i := 0; i < files; i++ {
		workloads.Fill(buf, fmt.Sprint("lost", i), 1, 0)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%02d", i)), buf, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	var emptied []string
	for _, pat := range []string{"g3*", "g4*"} {
		m, _ := filepath.Glob(filepath.Join(d.DataDir, pat))
		for _, tierDir := range m {
			ents, err := os.ReadDir(tierDir)
			if err != nil {
				continue
			}
			for _, e := range ents {
				if err := os.RemoveAll(filepath.Join(tierDir, e.Name())); err != nil {
					t.Fatal(err)
				}
			}
			emptied = append(emptied, tierDir)
		}
	}
	if len(emptied) == 0 {
		ents, _ := os.ReadDir(d.DataDir)
		t.Fatalf("no g3*/g4* tier directories in %s to empty (found %v)", d.DataDir, ents)
	}
	t.Logf("emptied %v", emptied)
	d.StartAgain()
	gone, failedRead := 0, 0
	defer func() { t.Logf("%d of %d files ENOENT at first stat, %d after a failed read", gone, files, failedRead) }()
	for i := 0; i < files; i++ {
		p := filepath.Join(dir, fmt.Sprintf("f%02d", i))
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
			gone++
			continue
		} else if err != nil {
			t.Errorf("stat %s: %v, want ENOENT", p, err)
			continue
		}
		got, err := os.ReadFile(p)
		if err == nil {
			if at := workloads.Verify(got, fmt.Sprint("lost", i), 1, 0); len(got) != size || at != -1 {
				t.Errorf("%s: blocks deleted from every tier, yet read returned %d bytes, wrong from byte %d", p, len(got), at)
			} else {
				t.Errorf("%s: blocks deleted from every tier, yet it read back intact (blocks kept outside g3/g4?)", p)
			}
			continue
		}
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: read failed, but stat afterwards gives %v, want ENOENT", p, err)
		} else {
			failedRead++
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	for _, e := range ents {
		if _, err := os.Stat(filepath.Join(dir, e.Name())); errors.Is(err, os.ErrNotExist) {
			t.Errorf("readdir lists %s, which stat says does not exist", e.Name())
		}
	}
}
