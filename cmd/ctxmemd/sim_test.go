package main

import (
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ctxmem/ctxmemd/hitratio"
)

// simJSONRows runs ctxmemd sim with args and --format json and decodes the
// rows.
func simJSONRows(t *testing.T, args ...string) ([]simResult, string) {
	t.Helper()
	code, out, errs := ctxmemd(t, append(append([]string{"sim"}, args...), "--format", "json")...)
	if code != 0 {
		t.Fatalf("sim %v: exit %d, stderr %s", args, code, errs)
	}
	var rows []simResult
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("sim %v: %v\n%s", args, err, out)
	}
	return rows, out
}

// TestSimBytesToBlocks: --g2 and --g3 sizes become floor(size / block
// size) blocks, with --block-size or the daemon's default block size.
func TestSimBytesToBlocks(t *testing.T) {
	trace := writeTrace(t, t.TempDir(), [][]int64{{1, 2, 3}, {1, 2, 3}})
	rows, out := simJSONRows(t, "--trace", trace, "--policy", "lru", "--block-size", "64KiB",
		"--g2", "1MiB, 1.5MiB,100000", "--g3", "0,300KiB")
	want := []struct {
		g2Bytes, g3Bytes int64
		g2, g3           int
	}{
		{1 << 20, 0, 16, 0}, {1 << 20, 300 << 10, 16, 4},
		{3 << 19, 0, 24, 0}, {3 << 19, 300 << 10, 24, 4},
		{100000, 0, 1, 0}, {100000, 300 << 10, 1, 4}, // 100000 / 65536 rounds down
	}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d:\n%s", len(rows), len(want), out)
	}
	for i, w := range want {
		r := rows[i]
		if r.BlockSize != 64<<10 || r.G2Bytes != w.g2Bytes || r.G3Bytes != w.g3Bytes || r.G2Blocks != w.g2 || r.G3Blocks != w.g3 {
			t.Errorf("row %d: %+v, want %+v", i, r, w)
		}
	}
	// The --capacity form's keys appear only with --capacity.
	if strings.Contains(out, `"hit_ratio"`) || strings.Contains(out, `"capacity_blocks"`) || rows[0].BlockKeys != nil {
		t.Errorf("block-count keys without --capacity:\n%s", out)
	}

	// Without --block-size: the daemon's block_size default.
	bs := defaultSimBlockSize()
	rows, _ = simJSONRows(t, "--trace", trace, "--policy", "lru", "--g2", "1GiB", "--g3", "3GiB")
	if len(rows) != 1 || rows[0].BlockSize != bs || rows[0].G2Blocks != int((1<<30)/bs) || rows[0].G3Blocks != int((3<<30)/bs) {
		t.Errorf("default block size %d: %+v", bs, rows)
	}
	if bs != 256<<10 {
		t.Logf("note: the daemon's default block size is now %d", bs)
	}

	// Neither --g2 nor --capacity: the reference capacities in blocks.
	rows, _ = simJSONRows(t, "--trace", trace, "--policy", "lru")
	if len(rows) != 3 || rows[0].G2Blocks != 5000 || rows[0].G2Bytes != 5000*bs || rows[2].G2Blocks != 20000 {
		t.Errorf("default sizes: %+v", rows)
	}

	// --capacity keeps working, with its JSON keys, and converts to bytes.
	rows, _ = simJSONRows(t, "--trace", trace, "--policy", "lru", "--capacity", "3,1", "--block-size", "4KiB")
	if len(rows) != 2 || rows[0].BlockKeys == nil || rows[0].Capacity != 3 || rows[0].G2Blocks != 3 ||
		rows[0].G2Bytes != 3<<12 || rows[0].Hits != 3 || rows[0].G2Hits != 3 || rows[0].HitRatio != 0.5 || rows[1].G2Bytes != 4096 {
		t.Errorf("--capacity: %+v", rows)
	}
}

// TestSimCSV: --format csv prints a header and one row per policy, G2 and
// G3 size, plain numbers; --out writes it to a file (replacing it).
func TestSimCSV(t *testing.T) {
	dir := t.TempDir()
	trace := writeTrace(t, dir, [][]int64{{1, 2, 3}, {1, 2, 3, 4}, {5, 1, 2}, {3, 6}})
	outFile := filepath.Join(dir, "sim.csv")
	if err := os.WriteFile(outFile, []byte("old contents\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := ctxmemd(t, "sim", "--trace", trace, "--block-size", "4KiB", "--g2", "8KiB,16KiB", "--g3", "0,64KiB",
		"--policy", "lru", "--policy", "opt", "--format", "csv", "--out", outFile)
	if code != 0 || out != "" {
		t.Fatalf("sim --out: exit %d, stdout %q, stderr %s", code, out, errs)
	}
	b, err := os.ReadFile(outFile)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(strings.NewReader(string(b))).ReadAll()
	if err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if len(recs) != 1+2*2*2 || !slices.Equal(recs[0], simCSVHeader) {
		t.Fatalf("header %v and %d rows:\n%s", recs[0], len(recs)-1, b)
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	num := func(rec []string, name string) int64 {
		t.Helper()
		n, err := strconv.ParseInt(rec[col[name]], 10, 64)
		if err != nil {
			t.Fatalf("%s %q is not an integer: %v", name, rec[col[name]], err)
		}
		return n
	}
	frac := func(rec []string, name string) float64 {
		t.Helper()
		x, err := strconv.ParseFloat(rec[col[name]], 64)
		if err != nil || x < 0 || x > 1 {
			t.Fatalf("%s %q is not a ratio: %v", name, rec[col[name]], err)
		}
		return x
	}
	i := 1
	for _, g2 := range []int64{8 << 10, 16 << 10} {
		for _, g3 := range []int64{0, 64 << 10} {
			for _, p := range []string{"lru", "opt"} {
				rec := recs[i]
				i++
				if len(rec) != len(simCSVHeader) || rec[col["policy"]] != p || num(rec, "g2_bytes") != g2 || num(rec, "g3_bytes") != g3 ||
					num(rec, "block_size") != 4096 || num(rec, "g2_blocks") != g2/4096 || num(rec, "g3_blocks") != g3/4096 {
					t.Errorf("row %d: %v, want %s G2 %d G3 %d", i-1, rec, p, g2, g3)
				}
				refs, h2, h3 := num(rec, "refs"), num(rec, "g2_hits"), num(rec, "g3_hits")
				if refs != 12 || num(rec, "misses") != refs-h2-h3 || frac(rec, "g2_hit_ratio") != float64(h2)/float64(refs) ||
					frac(rec, "any_tier_hit_ratio") != float64(h2+h3)/float64(refs) ||
					num(rec, "g3_bytes_written") != 4096*num(rec, "g3_writes") {
					t.Errorf("row %d: inconsistent counts %v", i-1, rec)
				}
				if _, err := strconv.ParseFloat(rec[col["elapsed_s"]], 64); err != nil {
					t.Errorf("row %d: elapsed_s %q", i-1, rec[col["elapsed_s"]])
				}
			}
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 { // trace.jsonl and sim.csv, no temporary file left
		t.Errorf("directory holds %v", ents)
	}
	// The same CSV on standard output.
	code, out, _ = ctxmemd(t, "sim", "--trace", trace, "--block-size", "4KiB", "--g2", "8KiB", "--policy", "lru", "--format", "CSV")
	if recs, err := csv.NewReader(strings.NewReader(out)).ReadAll(); code != 0 || err != nil || len(recs) != 2 {
		t.Errorf("csv on stdout: exit %d, %v\n%s", code, err, out)
	}
}

// TestSimTwoTier: on the bundled trace, a G3 adds hits: "found in any
// tier" is at least "served from G2", which does not depend on G3.
func TestSimTwoTier(t *testing.T) {
	rows, out := simJSONRows(t, "--requests", "300", "--g2", "64MiB", "--g3", "0,1GiB",
		"--policy", "lru", "--policy", "policy", "--policy", "opt")
	if len(rows) != 6 {
		t.Fatalf("%d rows:\n%s", len(rows), out)
	}
	var gained bool
	for i, r := range rows {
		if r.AnyTierHitRatio < r.G2HitRatio || r.Misses != r.Refs-r.G2Hits-r.G3Hits || r.G3BytesWritten != r.G3Writes*r.BlockSize {
			t.Errorf("row %d: %+v", i, r)
		}
		if r.G3Bytes == 0 && (r.G3Hits != 0 || r.G3Writes != 0 || r.AnyTierHitRatio != r.G2HitRatio) {
			t.Errorf("row %d: G3 activity without a G3: %+v", i, r)
		}
		if i >= 3 {
			alone := rows[i-3]
			if alone.Policy != r.Policy || alone.G2Hits != r.G2Hits || alone.Refs != r.Refs {
				t.Errorf("%s: G2 hits %d with G3, %d without", r.Policy, r.G2Hits, alone.G2Hits)
			}
			if r.G3Hits > 0 && r.AnyTierHitRatio > r.G2HitRatio {
				gained = true
			}
		}
	}
	if !gained {
		t.Errorf("G3 added no hits:\n%s", out)
	}

	// The table names the two ratios as the rest of ctxmemd does.
	code, table, errs := ctxmemd(t, "sim", "--requests", "50", "--g2", "64MiB", "--g3", "1GiB", "--policy", "lru")
	if code != 0 || !strings.Contains(table, hitratio.LabelG2) || !strings.Contains(table, hitratio.LabelAny) ||
		strings.Count(table, "\n") != 2 || !strings.Contains(table, "64MiB") || !strings.Contains(table, "1GiB") {
		t.Errorf("table: exit %d, stderr %s\n%s", code, errs, table)
	}
}

// TestSimUsage: bad sizes, formats and flag combinations exit 2 before
// simulating, naming the flag.
func TestSimUsage(t *testing.T) {
	dir := t.TempDir()
	trace := writeTrace(t, dir, [][]int64{{1}})
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--capacity", "10", "--g2", "1GiB"}, "mutually exclusive"},
		{[]string{"--capacity", "10", "--g3", "1GiB"}, "mutually exclusive"},
		{[]string{"--g2", "4XB"}, `"4XB"`},
		{[]string{"--g2", "0"}, "positive"},
		{[]string{"--g2", "1GiB,0"}, "positive"},
		{[]string{"--g2", "-1GiB"}, "negative"},
		{[]string{"--g2", "1GiB,"}, "--g2"},
		{[]string{"--g2", "100KiB"}, "less than one block"},
		{[]string{"--g2", "1GiB", "--g3", "lots"}, "--g3"},
		{[]string{"--g2", "1GiB", "--g3", "1KiB"}, "less than one block"},
		{[]string{"--format", "xml"}, "--format"},
		{[]string{"--json", "--format", "csv"}, "conflicts"},
		{[]string{"--block-size", "0"}, "--block-size"},
		{[]string{"--block-size", "big"}, "--block-size"},
		{[]string{"--policy", "nope"}, "nope"},
		{[]string{"--out", filepath.Join(dir, "no", "such", "dir", "x.csv")}, "--out"},
		{[]string{"extra"}, "no arguments"},
	} {
		code, _, errs := ctxmemd(t, append([]string{"sim", "--trace", trace}, c.args...)...)
		if code != exitUsage || !strings.Contains(errs, c.msg) {
			t.Errorf("sim %v: exit %d, stderr %q; want %d and %q", c.args, code, errs, exitUsage, c.msg)
		}
	}
	// --json alone and with --format json is fine.
	for _, args := range [][]string{{"--json"}, {"--json", "--format", "json"}} {
		code, out, errs := ctxmemd(t, append([]string{"sim", "--trace", trace, "--g2", "1MiB", "--policy", "lru"}, args...)...)
		var rows []simResult
		if code != 0 || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 1 {
			t.Errorf("sim %v: exit %d, %s, stderr %s", args, code, out, errs)
		}
	}
}
