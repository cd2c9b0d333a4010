package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxmem/ctxmemd/internal/testenv"
)

// TestBench runs `ctxmemd bench` on two temporary directories (20 files of
// 64 KiB, 2 rounds): the JSON has both medians and the ratio DIR/REFDIR,
// the rounds alternate the order, the table has both columns, and nothing
// is left in either directory.
func TestBench(t *testing.T) {
	dir, ref := t.TempDir(), t.TempDir()
	code, out, errs := ctxmemd(t, "bench", "--files", "20", "--size", "64KiB", "--rounds", "2", "--json", dir, ref)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rep benchReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if rep.Dir != dir || rep.RefDir != ref || rep.Files != 20 || rep.FileBytes != 64<<10 || rep.Rounds != 2 || rep.Fio {
		t.Errorf("report header %+v", rep)
	}
	var order []string
	for _, r := range rep.Runs {
		order = append(order, r.Target)
		if r.KV.Write.Files != 20 || r.KV.ReadDropped == nil || r.KV.ReadWarm == nil || r.KV.Size != 64<<10 {
			t.Errorf("run %+v", r)
		}
	}
	if strings.Join(order, " ") != "dir ref ref dir" {
		t.Errorf("round order %v, want dir ref ref dir", order)
	}
	rows := map[string]benchRow{}
	for _, r := range rep.Rows {
		rows[r.Metric] = r
	}
	for _, m := range []string{"kv_write_files_per_s", "kv_write_p99_us", "kv_read_dropped_files_per_s", "kv_read_dropped_p50_us", "kv_read_warm_files_per_s"} {
		r, ok := rows[m]
		if !ok || r.RefMedian == nil || r.Ratio == nil || r.DirMedian <= 0 || *r.RefMedian <= 0 {
			t.Errorf("row %s: %+v", m, r)
			continue
		}
		if got, want := *r.Ratio, r.DirMedian / *r.RefMedian; got < want*0.999 || got > want*1.001 {
			t.Errorf("row %s: ratio %v, want dir/ref %v", m, got, want)
		}
	}
	if rows["kv_write_files_per_s"].Better != "higher" || rows["kv_write_p99_us"].Better != "lower" {
		t.Errorf("better: %+v %+v", rows["kv_write_files_per_s"], rows["kv_write_p99_us"])
	}
	if _, ok := rows["fio_seqwrite_mib_per_s"]; ok {
		t.Error("fio rows without --fio")
	}
	for _, d := range []string{dir, ref} {
		if left, _ := os.ReadDir(d); len(left) != 0 {
			t.Errorf("%s: %d entries left", d, len(left))
		}
	}

	// The table: one column per directory, a ratio on the KV rows.
	code, out, errs = ctxmemd(t, "bench", "--files", "20", "--size", "64KiB", "--rounds", "1", dir, ref)
	if code != 0 {
		t.Fatalf("table: exit %d: %s", code, errs)
	}
	lines := strings.Split(out, "\n")
	if len(lines) < 3 || !strings.Contains(lines[1], "JOB") || !strings.Contains(lines[1], dir) || !strings.Contains(lines[1], ref) ||
		!strings.Contains(lines[1], "RATIO") {
		t.Fatalf("table header:\n%s", out)
	}
	for _, job := range []string{"KV write (create+write+close)", "KV read, cache dropped", "KV read, cache warm"} {
		found := false
		for _, l := range lines {
			if f := strings.Fields(l); strings.HasPrefix(l, job) && len(f) > 4 && strings.HasSuffix(f[len(f)-2], "x") {
				found = true
			}
		}
		if !found {
			t.Errorf("no %q row with a ratio:\n%s", job, out)
		}
	}

	// Without REFDIR: one column, no ratio.
	code, out, errs = ctxmemd(t, "bench", "--files", "5", "--size", "4KiB", "--rounds", "1", dir)
	if code != 0 || !strings.Contains(out, dir) || strings.Contains(out, "RATIO") {
		t.Errorf("one directory: exit %d\n%s\n%s", code, out, errs)
	}
}

// TestBenchUsageErrors: a missing or non-directory DIR, bad flags and --fio
// without fio on PATH exit 2 before anything is created.
func TestBenchUsageErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "no-such-dir")
	cases := []struct {
		args []string
		msg  string
	}{
		{[]string{"bench", missing}, missing + " does not exist"},
		{[]string{"bench", dir, missing}, missing + " does not exist"},
		{[]string{"bench", file}, "is not a directory"},
		{[]string{"bench"}, "want DIR [REFDIR]"},
		{[]string{"bench", dir, dir, dir}, "want DIR [REFDIR]"},
		{[]string{"bench", "--size", "lots", dir}, "--size"},
		{[]string{"bench", "--size", "0", dir}, "--size"},
		{[]string{"bench", "--files", "0", dir}, "--files"},
		{[]string{"bench", "--rounds", "0", dir}, "--rounds"},
	}
	for _, c := range cases {
		code, _, errs := ctxmemd(t, c.args...)
		if code != exitUsage || !strings.Contains(errs, c.msg) {
			t.Errorf("%v: exit %d (want %d), stderr %q (want %q)", c.args, code, exitUsage, errs, c.msg)
		}
	}
	t.Setenv("PATH", t.TempDir())
	code, _, errs := ctxmemd(t, "bench", "--fio", dir)
	if code != exitUsage || !strings.Contains(errs, "fio") || !strings.Contains(errs, "PATH") {
		t.Errorf("--fio without fio: exit %d, stderr %q", code, errs)
	}
	if left, _ := os.ReadDir(dir); len(left) != 1 {
		t.Errorf("%d entries in %s, want only f", len(left), dir)
	}
}

// TestBenchFio runs the fio jobs too when fio is installed (a few seconds).
func TestBenchFio(t *testing.T) {
	testenv.RequireTool(t, "fio", "Debian: fio")
	if testing.Short() {
		t.Skip("-short")
	}
	dir, ref := t.TempDir(), t.TempDir()
	code, out, errs := ctxmemd(t, "bench", "--files", "5", "--size", "4KiB", "--rounds", "1", "--fio", "--json", dir, ref)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rep benchReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	rows := map[string]benchRow{}
	for _, r := range rep.Rows {
		rows[r.Metric] = r
	}
	for _, m := range []string{"fio_seqwrite_mib_per_s", "fio_seqread_mib_per_s", "fio_randread_iops", "fio_randread_p99_us"} {
		if r, ok := rows[m]; !ok || r.DirMedian <= 0 || r.RefMedian == nil || r.Ratio == nil {
			t.Errorf("row %s: %+v", m, r)
		}
	}
	for _, d := range []string{dir, ref} {
		if left, _ := os.ReadDir(d); len(left) != 0 {
			t.Errorf("%s: %d entries left", d, len(left))
		}
	}
}
