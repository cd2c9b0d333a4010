package kvbench

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRun runs every pass on 20 files of 64 KiB and checks the counts, the
// statistics' consistency, the JSON keys tests/bench/fio_bench.sh reads and
// that no file is left behind.
func TestRun(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "kv")
	res, err := Run(context.Background(), Options{Dir: dir, Files: 20, Size: 64 << 10, Seed: 1, Dropped: true, Warm: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Dir != dir || res.Size != 64<<10 || res.ReadDropped == nil || res.ReadWarm == nil || res.ResidentAfterDrop == nil {
		t.Fatalf("result %+v", res)
	}
	if r := *res.ResidentAfterDrop; r != -1 && (r < 0 || r > 1) {
		t.Errorf("resident_after_drop %v", r)
	}
	for name, p := range map[string]Phase{"write": res.Write, "read": res.Read, "read_dropped": *res.ReadDropped, "read_warm": *res.ReadWarm} {
		if p.Files != 20 || p.FilesPerS <= 0 || p.MiBPerS <= 0 || p.P50us <= 0 || p.P50us > p.P99us || p.P99us > p.MaxUs {
			t.Errorf("%s: %+v", name, p)
		}
		if got, want := p.MiBPerS, p.FilesPerS*64/1024; got < want*0.999 || got > want*1.001 {
			t.Errorf("%s: %.3f MiB/s, want files/s × 64 KiB = %.3f", name, got, want)
		}
	}
	js, _ := json.Marshal(res)
	for _, k := range []string{`"file_bytes":65536`, `"write":{"files":20,"files_per_s":`, `"read_dropped":{`, `"p99_us":`,
		`"resident_after_drop":`, `"read_warm":{`, `"mib_per_s":`, `"max_us":`, `"p50_us":`} {
		if !strings.Contains(string(js), k) {
			t.Errorf("JSON lacks %s: %s", k, js)
		}
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("%d files left in %s", len(left), dir)
	}

	// Without the optional passes their keys are absent; Keep keeps the files.
	res, err = Run(context.Background(), Options{Dir: dir, Files: 3, Size: 1000, Keep: true})
	if err != nil {
		t.Fatal(err)
	}
	js, _ = json.Marshal(res)
	if strings.Contains(string(js), "read_dropped") || strings.Contains(string(js), "read_warm") || strings.Contains(string(js), "resident") {
		t.Errorf("JSON without the optional passes: %s", js)
	}
	if left, _ := os.ReadDir(dir); len(left) != 3 {
		t.Errorf("Keep: %d files left, want 3", len(left))
	}
}

// TestRunDetectsCorruption: a read pass over a file whose bytes are not the
// pattern, or that is shorter than the job's size, fails naming the file
// and the offset or byte count.
func TestRunDetectsCorruption(t *testing.T) {
	dir := t.TempDir()
	j := &job{ctx: context.Background(), names: []string{filepath.Join(dir, "a")}, ids: []int64{7}, buf: make([]byte, 4096)}
	data := make([]byte, 4096)
	if err := os.WriteFile(j.names[0], data, 0o644); err != nil { // zeros, not the pattern
		t.Fatal(err)
	}
	if _, err := j.readAll([]int{0}); err == nil || !strings.Contains(err.Error(), "wrong byte at offset 0") {
		t.Errorf("zeros: %v", err)
	}
	if err := os.Truncate(j.names[0], 100); err != nil {
		t.Fatal(err)
	}
	if _, err := j.readAll([]int{0}); err == nil || !strings.Contains(err.Error(), "100 of 4096 bytes") {
		t.Errorf("short file: %v", err)
	}
}

// TestRunCancelled: a cancelled context stops the job with its error and
// removes what it created; bad options are refused.
func TestRunCancelled(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, Options{Dir: dir, Files: 5, Size: 4096}); err != context.Canceled {
		t.Errorf("cancelled: %v", err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("%d files left", len(left))
	}
	for _, o := range []Options{{Files: 1, Size: 1}, {Dir: dir, Size: 1}, {Dir: dir, Files: 1}, {Dir: dir, Files: 1, Size: MaxSize + 1}} {
		if _, err := Run(context.Background(), o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}
