package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/admin"
	"github.com/ctxmem/ctxmemd/hitratio"
	"github.com/ctxmem/ctxmemd/replay"
	"github.com/ctxmem/ctxmemd/tiering"
)

// ctxmemd runs the CLI in-process and returns exit code, stdout, stderr.
func ctxmemd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), append([]string{"ctxmemd"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

func TestVersion(t *testing.T) {
	code, out, _ := ctxmemd(t, "version")
	if code != 0 || !strings.HasPrefix(out, "ctxmemd "+version+" (go") {
		t.Errorf("version: %d %q", code, out)
	}
}

func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	trace := writeTrace(t, dir, [][]int64{{1}})
	empty := filepath.Join(dir, "empty.yaml")
	if err := os.WriteFile(empty, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"bogus"}, exitUsage, "unknown command"},
		{[]string{"run", "--dram", "4XB"}, exitUsage, `"4XB"`},
		{[]string{"run", "--g4-size", "lots"}, exitUsage, "g4_size"},
		{[]string{"run", "--g3-size", "64MiB"}, exitUsage, "g3_size: 64MiB holds fewer than two 32MiB segments"},
		{[]string{"run", "--g4-high", "0.8", "--g4-low", "0.9"}, exitUsage, "g4_low"},
		{[]string{"run", "--no-such-flag"}, exitUsage, "no-such-flag"},
		{[]string{"run", "--config", filepath.Join(dir, "missing.yaml")}, exitUsage, "missing.yaml"},
		{[]string{"replay", "--trace", trace, "--mount", dir, "--layout", "zfs"}, exitUsage, "unknown layout"},
		{[]string{"replay", "--trace", trace, "--mount", dir, "--block-bytes", "lots"}, exitUsage, "--block-bytes"},
		{[]string{"replay", "--trace", filepath.Join(dir, "none.jsonl"), "--mount", dir}, exitUsage, "none.jsonl"},
		{[]string{"sim", "--trace", trace, "--policy", "nope"}, exitUsage, "nope"},
		{[]string{"sim", "--trace", trace, "--capacity", "0"}, exitUsage, "--capacity"},
		// Environment errors found at start are exit 2 too, naming the key.
		{[]string{"run", "--config", empty, "--mount", trace, "--data-dir", filepath.Join(dir, "d")}, exitUsage, "mount: create"},
		{[]string{"run", "--config", empty, "--data-dir", "/proc/ctxmem-no", "--mount", filepath.Join(dir, "m")}, exitUsage, "data_dir: create"},
	}
	for _, c := range cases {
		code, _, errs := ctxmemd(t, c.args...)
		if code != c.code || !strings.Contains(errs, c.msg) {
			t.Errorf("%v: exit %d (want %d), stderr %q (want %q)", c.args, code, c.code, errs, c.msg)
		}
	}
}

func writeTrace(t *testing.T, dir string, reqs [][]int64) string {
	t.Helper()
	var b strings.Builder
	for i, ids := range reqs {
		js, _ := json.Marshal(replay.Request{Timestamp: int64(i), InputLength: 512 * len(ids), OutputLength: 1, HashIDs: ids})
		b.Write(js)
		b.WriteByte('\n')
	}
	p := filepath.Join(dir, "trace.jsonl")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReplay(t *testing.T) {
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	os.Mkdir(mnt, 0o755)
	trace := writeTrace(t, dir, [][]int64{{1, 2, 3}, {1, 2, 4}, {1, 2, 3, 5}, {9}})
	code, out, errs := ctxmemd(t, "replay", "--trace", trace, "--mount", mnt, "--block-bytes", "8KiB", "--json", "--concurrency", "2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var res map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	// 11 refs, 6 distinct → 5 hits.
	if res["requests"] != 4.0 || res["blocks"] != 11.0 || res["block_hits"] != 5.0 || res["bytes_written"] != float64(6*8192) ||
		res["block_hit_ratio"] != 5.0/11 || res["verify_failures"] != 0.0 {
		t.Errorf("result %v", res)
	}
	for _, k := range []string{"byte_hit_ratio", "hits_by_tier", "bytes_read", "read_latency_p50_us", "read_latency_p99_us", "elapsed_s"} {
		if _, ok := res[k]; !ok {
			t.Errorf("JSON lacks %s", k)
		}
	}
	tiers := res["hits_by_tier"].(map[string]any)
	for _, k := range []string{"G2", "G3", "G3.5", "G4", "unknown"} {
		if _, ok := tiers[k]; !ok {
			t.Errorf("hits_by_tier lacks %s", k)
		}
	}
	// Corrupt block 2 (referenced 3 times): exit 4, and the table says so.
	p := filepath.Join(mnt, replay.LayoutFlat.RelPath(2))
	data, _ := os.ReadFile(p)
	data[100] ^= 1
	os.WriteFile(p, data, 0o644)
	code, out, errs = ctxmemd(t, "replay", "--trace", trace, "--mount", mnt, "--block-bytes", "8KiB", "-q")
	if code != exitVerify || !strings.Contains(out, "verification failures  3") || !strings.Contains(errs, "offset=100") {
		t.Errorf("corrupt: exit %d\n%s\n%s", code, out, errs)
	}
	// --requests cuts the trace.
	code, out, _ = ctxmemd(t, "replay", "--trace", trace, "--mount", t.TempDir(), "--requests", "1", "--json")
	if code != 0 || !strings.Contains(out, `"requests":1,`) || !strings.Contains(out, `"blocks":3,`) {
		t.Errorf("--requests 1: %d %s", code, out)
	}
}

type fakeProvider struct{ st admin.Status }

func (f fakeProvider) Status(context.Context) (admin.Status, error) { return f.st, nil }

func TestStatus(t *testing.T) {
	dir, err := os.MkdirTemp("", "st") // short path for the socket
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	t.Chdir(dir)
	sock := filepath.Join(dir, "admin.sock")

	code, _, errs := ctxmemd(t, "status", "--admin", sock)
	if code != exitNotRunning || !strings.Contains(errs, "is ctxmemd running") {
		t.Errorf("no daemon: exit %d %s", code, errs)
	}

	st := admin.Status{Mount: "/mnt/x", DataDir: dir,
		Tiers: []tiering.TierUsage{{Name: "G2", UsedBytes: 3 << 20, CapacityBytes: 1 << 30, Blocks: 12}, {Name: "G4", UsedBytes: 1 << 30, Blocks: 4096}},
		Stats: tiering.Stats{ReadRequests: 4, ReadRequestHits: 3, BlockReads: 10, BlockHits: map[string]int64{"G2": 8, "G4": 1}, BlockMisses: 1,
			Evictions: map[string]int64{"G2": 2}, CRCErrors: 1, Objects: 7,
			Promotions: 12, Prestaged: 10, PrestagedBytes: 10 << 20, PrestageUseful: 6, PrestageWasted: 3, PrestageWastedBytes: 3 << 20},
		Namespaces: []admin.NamespaceStatus{{Name: "llama", Objects: 7, Bytes: 5 << 20, BlockSize: 256 << 10,
			Lookups:        hitratio.Counts{Hits: map[string]int64{"G2": 3, "G3": 1}, Misses: 4},
			TokensPerBlock: 512, PrefillUsPerToken: 40, TokensFound: 2048, PrefillAvoidedS: 0.08192,
			RestoreBudget: 20 * time.Millisecond, RestoreSkipped: 2, RestoreSkippedPredicted: 90 * time.Millisecond}},
		RestoreCost: map[string]tiering.TierCost{"G3": {BlockRead: 300 * time.Microsecond, Samples: 5}, "G4": {BlockRead: 50 * time.Millisecond}},
		Lookups:     hitratio.Counts{Hits: map[string]int64{"G2": 3, "G3": 1}, Misses: 4},
	}
	serveAdmin(t, sock, fakeProvider{st}, "v7")

	code, out, errs := ctxmemd(t, "status", "--admin", sock, "--json")
	if code != 0 {
		t.Fatalf("status --json: %d %s", code, errs)
	}
	var js struct {
		Version string           `json:"version"`
		Tiers   []map[string]any `json:"tiers"`
	}
	if err := json.Unmarshal([]byte(out), &js); err != nil {
		t.Fatal(err, out)
	}
	if js.Version != "v7" || len(js.Tiers) != 2 || js.Tiers[0]["name"] != "G2" || js.Tiers[0]["used_bytes"] != float64(3<<20) ||
		js.Tiers[0]["capacity_bytes"] != float64(1<<30) || js.Tiers[1]["blocks"] != 4096.0 {
		t.Errorf("status JSON: %s", out)
	}

	// Human form, with the socket found through --data-dir.
	code, out, errs = ctxmemd(t, "status", "--data-dir", dir)
	if code != 0 {
		t.Fatalf("status: %d %s", code, errs)
	}
	for _, w := range []string{"ctxmemd v7", "G2", "3.0 MiB", "1.0 GiB", "0.3%", "unbounded",
		"served from G2 37.5%, found in any tier 50.0% (of 8 lookups: hits G2 3, G3 1, G3.5 0, G4 0; misses 4)",
		"10 by tier: G2 8, G4 1; 1 found in no tier (lost)", "CRC errors", "llama", "8        37.5%  50.0%",
		"2048 tokens found (512 per file), 0.1 s of prefill avoided at 40 µs/token",
		"10 blocks (10.0 MiB) brought up: 6 read (60.0% useful), 3 left G2 unread (3.0 MiB wasted); coverage 75.0% of lower-tier reads",
		"per block read: G3 300µs, G4 50ms (default)", "20ms: 2 opens answered as misses (predicted 45ms on average)"} {
		if !strings.Contains(out, w) {
			t.Errorf("status output lacks %q:\n%s", w, out)
		}
	}
}

// TestBundledAndGzipTrace: without --trace, replay and sim read the
// embedded Mooncake trace; a gzip trace file is read whatever its name.
func TestBundledAndGzipTrace(t *testing.T) {
	dir := t.TempDir()
	code, out, errs := ctxmemd(t, "replay", "--mount", dir, "--requests", "20", "--block-bytes", "4KiB", "--json", "-q")
	var res replay.Result
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.Requests != 20 || res.Blocks == 0 || res.VerifyFailures != 0 {
		t.Fatalf("replay of the bundled trace: exit %d, %+v, stderr %s", code, res, errs)
	}
	code, out, errs = ctxmemd(t, "sim", "--requests", "20", "--capacity", "100", "--policy", "lru", "--json")
	var sr []simResult
	if code != 0 || json.Unmarshal([]byte(out), &sr) != nil || len(sr) != 1 || sr[0].Refs != res.Blocks {
		t.Fatalf("sim of the bundled trace: exit %d, %s (want %d refs), stderr %s", code, out, res.Blocks, errs)
	}

	plain := writeTrace(t, dir, [][]int64{{1, 2}, {1, 2}, {3}})
	b, err := os.ReadFile(plain)
	if err != nil {
		t.Fatal(err)
	}
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(b)
	zw.Close()
	for _, name := range []string{"t.jsonl.gz", "t-gzip.jsonl"} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, z.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		code, out, errs := ctxmemd(t, "replay", "--trace", p, "--mount", t.TempDir(), "--block-bytes", "4KiB", "--json")
		var res replay.Result
		if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.Requests != 3 || res.Blocks != 5 || res.BlockHits != 2 {
			t.Errorf("replay --trace %s: exit %d, %+v, stderr %s", name, code, res, errs)
		}
		code, out, errs = ctxmemd(t, "sim", "--trace", p, "--requests", "2", "--capacity", "2", "--policy", "lru", "--json")
		var sr []simResult
		if code != 0 || json.Unmarshal([]byte(out), &sr) != nil || len(sr) != 1 || sr[0].Refs != 4 || sr[0].Hits != 2 {
			t.Errorf("sim --trace %s: exit %d, %s, stderr %s", name, code, out, errs)
		}
	}
}

func TestSim(t *testing.T) {
	dir := t.TempDir()
	// Blocks 1..3 repeat; capacity 3 holds them all under LRU: refs 9, hits 6.
	trace := writeTrace(t, dir, [][]int64{{1, 2, 3}, {1, 2, 3}, {1, 2, 3}, {4}})
	code, out, errs := ctxmemd(t, "sim", "--trace", trace, "--capacity", "3,1", "--policy", "lru", "--policy", "opt", "--json", "--requests", "3")
	if code != 0 {
		t.Fatalf("sim: %d %s", code, errs)
	}
	var res []simResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err, out)
	}
	if len(res) != 4 {
		t.Fatalf("%d results: %s", len(res), out)
	}
	got := fmt.Sprintf("%d/%s/%d/%d %d/%s/%d/%d", res[0].Capacity, res[0].Policy, res[0].Refs, res[0].Hits,
		res[2].Capacity, res[2].Policy, res[2].Refs, res[2].Hits)
	if got != "3/lru/9/6 1/lru/9/0" {
		t.Errorf("sim results %s", got)
	}
	code, out, _ = ctxmemd(t, "sim", "--trace", trace, "--capacity", "3", "--policy", "lru")
	if code != 0 || !strings.Contains(out, "HIT RATIO") || !strings.Contains(out, "0.6000") { // 6 of 10 refs
		t.Errorf("sim table: %d\n%s", code, out)
	}
}

// runOnBusyPort starts `ctxmemd run` with a minimal configuration and the
// extra flags args(addr), where addr is a TCP address some other socket
// holds, and returns the exit code and stderr; it fails t if the daemon
// said it mounted.
func runOnBusyPort(t *testing.T, args func(addr string) []string) (int, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "empty.yaml")
	if err := os.WriteFile(cfg, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errs := ctxmemd(t, append([]string{"run", "--config", cfg, "--mount", filepath.Join(dir, "mnt"),
		"--data-dir", filepath.Join(dir, "data"), "--dram", "64MiB", "--g3-size", "0", "--g4", "none", "--nats", "none"},
		args(ln.Addr().String())...)...)
	if strings.Contains(errs, "mounted") {
		t.Fatalf("mounted before failing: %q", errs)
	}
	return code, errs
}

// TestMetricsPortBusy: a busy metrics address stops the start with exit
// 2 before anything is mounted (issue 16 item 3).
func TestMetricsPortBusy(t *testing.T) {
	code, errs := runOnBusyPort(t, func(addr string) []string { return []string{"--metrics", addr} })
	if code != exitUsage || !strings.Contains(errs, "metrics") || !strings.Contains(errs, "address already in use") {
		t.Fatalf("exit %d (want %d), stderr %q", code, exitUsage, errs)
	}
}

// TestNBDPortBusy: a busy NBD address stops the start with exit 2 before
// anything is mounted, as a busy metrics port does (issue 16 item 3).
func TestNBDPortBusy(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "ok.sock")
	code, errs := runOnBusyPort(t, func(addr string) []string {
		return []string{"--metrics=", "--nbd", "unix://" + sock + ",tcp://" + addr}
	})
	if code != exitUsage || !strings.Contains(errs, "nbd: listen") || !strings.Contains(errs, "address already in use") {
		t.Fatalf("exit %d (want %d), stderr %q", code, exitUsage, errs)
	}
}

// TestBadURLsMakeNothing: an NBD listen URL or S3 G4 URL that is wrong on
// its face stops the start with exit 2 before the data directory or the
// mount point is made.
func TestBadURLsMakeNothing(t *testing.T) {
	for _, extra := range [][]string{
		{"--nbd", "http://x"},
		{"--g4", "s3://b/p?endpoint=127.0.0.1:1&bogus=1"},
	} {
		dir := t.TempDir()
		cfg := filepath.Join(dir, "empty.yaml")
		if err := os.WriteFile(cfg, []byte("{}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		mnt, data := filepath.Join(dir, "mnt"), filepath.Join(dir, "data")
		args := []string{"run", "--config", cfg, "--mount", mnt, "--data-dir", data, "--dram", "64MiB", "--g3-size", "0",
			"--metrics=", "--nats", "none", "--g4", "none"}
		code, _, errs := ctxmemd(t, append(args, extra...)...)
		if code != exitUsage {
			t.Fatalf("%v: exit %d (want %d), stderr %q", extra, code, exitUsage, errs)
		}
		for _, p := range []string{mnt, data} {
			if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%v: %s was made before the start failed (stat: %v)", extra, p, err)
			}
		}
	}
}

// TestDemoteAlias: demote is evict's other name (the scheduler's command).
func TestDemoteAlias(t *testing.T) {
	code, out, errs := ctxmemd(t, "demote", "--help")
	if code != 0 || !strings.Contains(out, "ctxmemd evict") {
		t.Fatalf("demote --help: exit %d\n%s%s", code, out, errs)
	}
}

// serveAdmin serves p on the admin socket sock until the test ends, and
// returns once the socket answers.
func serveAdmin(t *testing.T, sock string, p admin.Provider, version string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- admin.Serve(ctx, admin.Options{Socket: sock, Provider: p, Version: version}) }()
	t.Cleanup(func() { cancel(); <-errc })
	for i := 0; ; i++ {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			return
		}
		if i > 500 {
			t.Fatal("admin server did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
