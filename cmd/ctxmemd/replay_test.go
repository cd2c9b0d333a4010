package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxmem/ctxmemd/replay"
)

func TestReplayMultiHost(t *testing.T) {
	dir := t.TempDir()
	trace := writeTrace(t, dir, [][]int64{{1, 2, 3}, {1, 2, 3}, {1, 2, 3}, {1, 2, 4}})
	var mounts []string
	args := []string{"replay", "--trace", trace, "--block-bytes", "4KiB", "--json", "--concurrency", "1"}
	for i := range 3 {
		m := filepath.Join(dir, "host"+string(rune('a'+i)))
		os.Mkdir(m, 0o755)
		mounts = append(mounts, m)
		args = append(args, "--mount", m)
	}
	code, out, errs := ctxmemd(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var res replay.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	// rr: host a gets requests 0 and 3 (2 hits), b and c one request each (all misses).
	if res.Spread != "rr" || len(res.Hosts) != 3 || res.Blocks != 12 || res.BlockHits != 2 || res.RetryMissingS != 0 {
		t.Fatalf("result %+v", res)
	}
	for h, want := range []int64{2, 0, 0} {
		if r := res.Hosts[h]; r.Mount != mounts[h] || r.BlockHits != want || r.Blocks != []int64{6, 3, 3}[h] {
			t.Errorf("host %d: %+v", h, r)
		}
	}
	for _, k := range []string{`"hosts":[`, `"spread":"rr"`, `"retry_hits":0`, `"retry_missing_s":0`, `"block_hit_ratio"`, `"host":2`} {
		if !strings.Contains(out, k) {
			t.Errorf("JSON lacks %s: %s", k, out)
		}
	}

	// --spread hash and --retry-missing reach the run; the table has host rows.
	code, out, errs = ctxmemd(t, "replay", "--trace", trace, "--mount", t.TempDir(), "--mount", t.TempDir(),
		"--spread", "hash", "--hash-blocks", "2", "--retry-missing", "20ms", "-q")
	if code != 0 || !strings.Contains(out, "per host (spread hash of the first 2 block ids)") || !strings.Contains(out, "retry-missing hits") ||
		!strings.Contains(out, "block reads") || !strings.Contains(out, "waited up to 0.02s") {
		t.Errorf("hash table: exit %d\n%s\n%s", code, out, errs)
	}

	// A path with a comma stays one mount.
	comma := filepath.Join(dir, "a,b")
	os.Mkdir(comma, 0o755)
	code, out, errs = ctxmemd(t, "replay", "--trace", trace, "--mount", comma, "--json")
	if code != 0 || !strings.Contains(out, `"hosts":[{"host":0,"mount":"`+comma+`"`) {
		t.Errorf("comma mount: exit %d %s %s", code, out, errs)
	}

	for _, bad := range [][]string{
		{"--mount", dir, "--spread", "random"},
		{"--mount", dir, "--retry-missing", "-1s"},
		{"--mount", dir, "--hash-blocks", "0"},
		{"--mount", dir, "--mount", filepath.Join(dir, "nope")},
	} {
		code, _, errs := ctxmemd(t, append([]string{"replay", "--trace", trace}, bad...)...)
		if code != exitUsage {
			t.Errorf("%v: exit %d %s", bad, code, errs)
		}
	}
}
