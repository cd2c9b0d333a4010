package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func envMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParseSize(t *testing.T) {
	good := map[string]int64{
		"0": 0, "4096": 4096, "512MiB": 512 << 20, "4GiB": 4 << 30, "1G": 1 << 30, "1g": 1 << 30,
		"1GB": 1 << 30, "256k": 256 << 10, "256 KiB": 256 << 10, "1.5GiB": 3 << 29, "2T": 2 << 40,
		" 32MiB ": 32 << 20, "10B": 10,
	}
	for in, want := range good {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "GiB", "-1", "4XB", "1.2.3M", "99999999999T", "0x10", "4 G i B"} {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want error", in, got)
		}
	}
	for _, n := range []int64{0, 1, 1000, 4096, 256 << 10, 3 << 29, 10 << 30, 5 << 40} {
		s := FormatSize(n)
		back, err := ParseSize(s)
		if err != nil || back != n {
			t.Errorf("FormatSize(%d) = %q parses back as %d, %v", n, s, back, err)
		}
	}
	if HumanSize(300) != "300 B" || HumanSize(3<<29) != "1.5 GiB" {
		t.Errorf("HumanSize: %s %s", HumanSize(300), HumanSize(3<<29))
	}
	if FormatSize(256<<10) != "256KiB" || FormatSize(10<<30) != "10GiB" {
		t.Errorf("FormatSize picks the wrong unit: %s %s", FormatSize(256<<10), FormatSize(10<<30))
	}
}

func TestDefaults(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	c, err := Load(Inputs{File: filepath.Join(dir, "absent.yaml")})
	if err != nil {
		t.Fatal(err)
	}
	if c.File != "" {
		t.Errorf("File = %q for a missing default file", c.File)
	}
	want := Config{
		Mount: filepath.Join(dir, DevRoot, "mnt"), DataDir: filepath.Join(dir, DevRoot, "data"),
		DRAM: 1 << 30, DRAMHigh: 0.90, DRAMLow: 0.75, DirtyBytes: 256 << 20, BlockSize: 256 << 10,
		G3Dir: filepath.Join(dir, DevRoot, "data", "g3"), G3Size: 10 << 30, G3SegmentSize: 32 << 20,
		G3High: 0.9, G3Low: 0.75, G4: "file://" + filepath.Join(dir, DevRoot, "data", "g4"),
		G4TTL: 72 * time.Hour, G2Policy: "decay", HeatHalfLife: 60 * time.Second, ColdThreshold: 30, WarmThreshold: 60,
		Admin: filepath.Join(dir, DevRoot, "data", "admin.sock"), Metrics: "127.0.0.1:9464", LogLevel: "info",
	}
	c.given = nil
	if !equalConfig(c, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", c, want)
	}
	c2, _ := Load(Inputs{File: filepath.Join(dir, "absent.yaml")})
	if !c2.UsesDevRoot() || c2.Source("dram") != SourceDefault {
		t.Errorf("defaults should report SourceDefault and UsesDevRoot")
	}
	if err := c2.EnsureDirs(); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{c2.Mount, c2.DataDir, c2.G3Dir, filepath.Join(c2.DataDir, "g4")} {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			t.Errorf("EnsureDirs did not create %s: %v", d, err)
		}
	}
}

func equalConfig(a, b Config) bool {
	a.given, b.given = nil, nil
	if len(a.Namespaces) != len(b.Namespaces) {
		return false
	}
	for i := range a.Namespaces {
		if a.Namespaces[i] != b.Namespaces[i] {
			return false
		}
	}
	a.Namespaces, b.Namespaces = nil, nil
	return a.Mount == b.Mount && a.DataDir == b.DataDir && a.DRAM == b.DRAM && a.DRAMHigh == b.DRAMHigh &&
		a.DRAMLow == b.DRAMLow && a.DirtyBytes == b.DirtyBytes && a.BlockSize == b.BlockSize &&
		a.G3Dir == b.G3Dir && a.G3Size == b.G3Size && a.G3SegmentSize == b.G3SegmentSize &&
		a.G3High == b.G3High && a.G3Low == b.G3Low && a.G4 == b.G4 && a.G4TTL == b.G4TTL &&
		a.G2Policy == b.G2Policy && a.HeatHalfLife == b.HeatHalfLife && a.ColdThreshold == b.ColdThreshold &&
		a.WarmThreshold == b.WarmThreshold && a.Admin == b.Admin && a.Metrics == b.Metrics &&
		a.LogLevel == b.LogLevel && a.File == b.File
}

// TestPrecedence sets dram in all four layers, and other keys in fewer, and
// checks flag > env > file > default for each.
func TestPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "c.yaml", `
data_dir: `+dir+`/filedata
dram: 2GiB
dram_high: 0.8
g4_ttl: 24h
cold_threshold: 20
metrics: ""
`)
	env := envMap(map[string]string{
		"CTXMEM_DRAM":      "3GiB",
		"CTXMEM_DRAM_HIGH": "85%",
		"CTXMEM_LOG_LEVEL": "debug",
	})
	flags := map[string]string{"dram": "4GiB", "mount": dir + "/m"}
	c, err := Load(Inputs{File: file, FileExplicit: true, Env: env, Flags: flags})
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		key  string
		got  any
		want any
		src  Source
	}{
		{"dram", c.DRAM, int64(4 << 30), SourceFlag},
		{"mount", c.Mount, dir + "/m", SourceFlag},
		{"dram_high", c.DRAMHigh, 0.85, SourceEnv},
		{"log_level", c.LogLevel, "debug", SourceEnv},
		{"data_dir", c.DataDir, dir + "/filedata", SourceFile},
		{"g4_ttl", c.G4TTL, 24 * time.Hour, SourceFile},
		{"cold_threshold", c.ColdThreshold, 20.0, SourceFile},
		{"metrics", c.Metrics, "", SourceFile},
		{"dram_low", c.DRAMLow, 0.75, SourceDefault},
		{"dirty_bytes", c.DirtyBytes, int64(1 << 30), SourceDefault}, // derived: dram/4 of the flag's 4GiB
		{"admin", c.Admin, dir + "/filedata/admin.sock", SourceDefault},
		{"g3_dir", c.G3Dir, dir + "/filedata/g3", SourceDefault},
	}
	for _, ck := range checks {
		if ck.got != ck.want {
			t.Errorf("%s = %v, want %v", ck.key, ck.got, ck.want)
		}
		if c.Source(ck.key) != ck.src {
			t.Errorf("%s source = %v, want %v", ck.key, c.Source(ck.key), ck.src)
		}
	}
	if c.File != file {
		t.Errorf("File = %q", c.File)
	}
	// Without the flag, env wins over the file; without env, the file wins.
	c, err = Load(Inputs{File: file, FileExplicit: true, Env: env})
	if err != nil || c.DRAM != 3<<30 {
		t.Errorf("env layer: dram = %d, %v", c.DRAM, err)
	}
	c, err = Load(Inputs{File: file, FileExplicit: true})
	if err != nil || c.DRAM != 2<<30 || c.DRAMHigh != 0.8 {
		t.Errorf("file layer: dram = %d high %g, %v", c.DRAM, c.DRAMHigh, err)
	}
}

func TestConfigFileMissing(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if _, err := Load(Inputs{File: filepath.Join(dir, "nope.yaml"), FileExplicit: true}); err == nil ||
		!strings.Contains(err.Error(), "nope.yaml") {
		t.Errorf("missing explicit file: err = %v", err)
	}
	if _, err := Load(Inputs{File: filepath.Join(dir, "nope.yaml")}); err != nil {
		t.Errorf("missing default file should be fine: %v", err)
	}
	// An empty file is fine too.
	if _, err := Load(Inputs{File: writeFile(t, dir, "empty.yaml", "# nothing\n"), FileExplicit: true}); err != nil {
		t.Errorf("empty file: %v", err)
	}
}

func TestValidationErrors(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	cases := []struct {
		name  string
		yaml  string
		env   map[string]string
		flags map[string]string
		want  []string // substrings of the error
	}{
		{name: "bad size flag", flags: map[string]string{"dram": "4XB"}, want: []string{"dram", "--dram", `"4XB"`, "unknown unit"}},
		{name: "bad size env", env: map[string]string{"CTXMEM_G3_SIZE": "lots"}, want: []string{"g3_size", "CTXMEM_G3_SIZE"}},
		{name: "bad size yaml", yaml: "dirty_bytes: 12 parsecs\n", want: []string{"line 1", "dirty_bytes", "unknown unit"}},
		{name: "watermarks", flags: map[string]string{"dram-high": "0.7", "dram-low": "0.8"}, want: []string{"dram_low", "below dram_high"}},
		{name: "g3 watermarks", yaml: "g3_high: 0.5\ng3_low: 0.5\n", want: []string{"g3_low"}},
		{name: "fraction range", flags: map[string]string{"g3-high": "1.5"}, want: []string{"g3_high", "outside"}},
		{name: "block not pow2", flags: map[string]string{"block-size": "100KiB"}, want: []string{"block_size", "power of two"}},
		{name: "block too small", flags: map[string]string{"block-size": "2KiB"}, want: []string{"block_size"}},
		{name: "block too big", flags: map[string]string{"block-size": "8MiB"}, want: []string{"block_size"}},
		{name: "unknown yaml key", yaml: "dram: 1GiB\ndramm: 2GiB\n", want: []string{`unknown key "dramm"`, "line 2", `did you mean "dram"`}},
		{name: "key after {}", yaml: "# c\n{}\ndram: banana\n", want: []string{"content after the first document"}},
		{name: "two documents", yaml: "dram: 1GiB\n---\nlog_level: debug\n", want: []string{"a second YAML document", "line 2"}},
		{name: "bad tokens_per_block", yaml: "namespaces:\n  - name: a\n    tokens_per_block: many\n", want: []string{"tokens_per_block", "token count"}},
		{name: "bad restore budget", yaml: "namespaces:\n  - name: a\n    restore_budget: soon\n", want: []string{"restore_budget", "duration"}},
		{name: "bad prefill cost", yaml: "namespaces:\n  - name: a\n    prefill_us_per_token: -1\n", want: []string{"prefill_us_per_token", "µs per token"}},
		{name: "unknown ns key", yaml: "namespaces:\n  - name: a\n    modle_id: x\n", want: []string{`unknown key "modle_id"`, `"model_id"`}},
		{name: "list as scalar", yaml: "dram: [1, 2]\n", want: []string{"dram", "single value"}},
		{name: "thresholds", flags: map[string]string{"cold-threshold": "70"}, want: []string{"cold_threshold", "below warm_threshold"}},
		{name: "score range", flags: map[string]string{"warm-threshold": "101"}, want: []string{"warm_threshold"}},
		{name: "log level", env: map[string]string{"CTXMEM_LOG_LEVEL": "loud"}, want: []string{"log_level", "loud"}},
		{name: "metrics addr", flags: map[string]string{"metrics": "localhost"}, want: []string{"metrics", "host:port"}},
		{name: "g4 scheme", flags: map[string]string{"g4": "ftp://x/y"}, want: []string{"g4", "unsupported scheme"}},
		{name: "g4 two slashes", flags: map[string]string{"g4": "file://relative/dir"}, want: []string{"g4", "three slashes"}},
		{name: "ttl", flags: map[string]string{"g4-ttl": "soon"}, want: []string{"g4_ttl", "duration"}},
		{name: "g4 size", flags: map[string]string{"g4-size": "lots"}, want: []string{"g4_size", "--g4-size", `"lots"`, "or auto"}},
		{name: "g4 size negative", env: map[string]string{"CTXMEM_G4_SIZE": "-1"}, want: []string{"g4_size", "negative"}},
		{name: "g4 size below a block", flags: map[string]string{"g4-size": "64KiB"}, want: []string{"g4_size", "largest block size"}},
		{name: "g4 lifecycle", yaml: "g4_lifecycle: yes\n", want: []string{"line 1: g4_lifecycle", "want auto or off"}},
		{name: "g4 lifecycle env", env: map[string]string{"CTXMEM_G4_LIFECYCLE": "no"}, want: []string{`environment CTXMEM_G4_LIFECYCLE="no": g4_lifecycle`, "want auto or off"}},
		{name: "g4 lifecycle flag", flags: map[string]string{"g4-lifecycle": "sometimes"}, want: []string{`flag --g4-lifecycle="sometimes": g4_lifecycle`}},
		{name: "g4 pack size", flags: map[string]string{"g4-pack-size": "512KiB"}, want: []string{"g4_pack_size", "1MiB to 256MiB"}},
		{name: "g4 watermarks", yaml: "g4_high: 0.8\ng4_low: 0.9\n", want: []string{"g4_low", "below g4_high"}},
		{name: "g4 fraction range", flags: map[string]string{"g4-high": "120%"}, want: []string{"g4_high", "outside"}},
		{name: "data in mount", flags: map[string]string{"mount": dir + "/m", "data-dir": dir + "/m/data"}, want: []string{"data_dir", "inside the mount"}},
		{name: "segment < block", flags: map[string]string{"g3-segment-size": "128KiB"}, want: []string{"g3_segment_size"}},
		{name: "dirty > dram", flags: map[string]string{"dirty-bytes": "2GiB"}, want: []string{"dirty_bytes"}},
		{name: "nbd on g3 without g4", flags: map[string]string{"nbd": "unix:///tmp/x.sock", "g4": "none"}, want: []string{"g4", "NBD exports"}},
		{name: "write timeout too short", flags: map[string]string{"write-timeout": "10ms"}, want: []string{"write_timeout"}},
		{name: "socket too long", flags: map[string]string{"admin": "/" + strings.Repeat("x", 120)}, want: []string{"admin", "longer than"}},
		{name: "ns dup", yaml: "namespaces:\n  - name: a\n  - name: a\n", want: []string{"declared twice"}},
		{name: "ns bad name", yaml: "namespaces:\n  - name: a/b\n", want: []string{"not a valid directory name"}},
		{name: "ns bad mode", yaml: "namespaces:\n  - name: a\n    mode: \"0999\"\n", want: []string{"mode", "octal"}},
		{name: "ns bad block", yaml: "namespaces:\n  - name: a\n    block_size: 3KiB\n", want: []string{"namespaces[0]", "power of two"}},
		{name: "dup key", yaml: "dram: 1G\ndram: 2G\n", want: []string{"given twice"}},
		{name: "not mapping", yaml: "- dram\n", want: []string{"mapping"}},
		{name: "unknown flag", flags: map[string]string{"nope": "1"}, want: []string{"unknown flag --nope"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := Inputs{File: filepath.Join(dir, "absent.yaml"), Env: envMap(tc.env), Flags: tc.flags}
			if tc.yaml != "" {
				in.File, in.FileExplicit = writeFile(t, t.TempDir(), "c.yaml", tc.yaml), true
			}
			_, err := Load(in)
			if err == nil {
				t.Fatalf("no error, want one mentioning %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestNamespacesYAML(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	file := writeFile(t, dir, "c.yaml", `
block_size: 512KiB
namespaces:
  - name: llama8b
    uid: 1000
    gid: 1001
    mode: "0750"
    quota: 100GiB
    block_size: 2MiB
    model_id: meta-llama/Llama-3.1-8B
    model_revision: 0e9e39f
    tokenizer_revision: 1a2b
    kv_dtype: bfloat16
    layout_version: 1
    tenant: acme
    tokens_per_block: 32
    prefill_us_per_token: 45.5
    restore_budget: 20ms
  - name: scratch
    mode: 01777
`)
	c, err := Load(Inputs{File: file, FileExplicit: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Namespaces) != 2 {
		t.Fatalf("namespaces = %+v", c.Namespaces)
	}
	want := Namespace{Name: "llama8b", UID: 1000, GID: 1001, Mode: 0o750, Quota: 100 << 30, BlockSize: 2 << 20,
		ModelID: "meta-llama/Llama-3.1-8B", ModelRevision: "0e9e39f", TokenizerRevision: "1a2b",
		KVDtype: "bfloat16", LayoutVersion: "1", Tenant: "acme", TokensPerBlock: 32, PrefillUsPerToken: 45.5, RestoreBudget: 20 * time.Millisecond}
	if c.Namespaces[0] != want {
		t.Errorf("ns0 = %+v\nwant %+v", c.Namespaces[0], want)
	}
	s := c.Namespaces[1]
	if s.UID != os.Getuid() || s.GID != os.Getgid() || s.Mode != 0o777|os.ModeSticky || s.BlockSize != 512<<10 {
		t.Errorf("ns1 defaults = %+v", s)
	}
	if s.UnixMode() != 0o1777 || c.Namespaces[0].UnixMode() != 0o750 {
		t.Errorf("UnixMode = %#o, %#o", s.UnixMode(), c.Namespaces[0].UnixMode())
	}
	// Namespaces are YAML-only: no flag or env exists for them.
	for _, o := range Options() {
		if strings.Contains(o.Key, "namespace") {
			t.Errorf("namespaces must not be a flag/env option: %+v", o)
		}
	}
}

func TestG4Forms(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	for in, want := range map[string]string{
		"none": "none", "NONE": "none", "file:///srv/g4": "file:///srv/g4", "/srv/x": "file:///srv/x",
		"./rel": "file://" + filepath.Join(dir, "rel"), "s3://bucket/pfx": "s3://bucket/pfx", "": "file://" + filepath.Join(dir, DevRoot, "data", "g4"),
	} {
		c, err := Load(Inputs{File: filepath.Join(dir, "absent"), Flags: map[string]string{"g4": in}})
		if err != nil || c.G4 != want {
			t.Errorf("g4 %q → %q, %v; want %q", in, c.G4, err, want)
		}
	}
	c, _ := Load(Inputs{File: filepath.Join(dir, "absent"), Flags: map[string]string{"g4": "none"}})
	if c.G4Enabled() {
		t.Error("none must disable G4")
	}
	if _, ok := c.G4Path(); ok {
		t.Error("none has no path")
	}
}

func TestG4Size(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	absent := filepath.Join(dir, "absent")
	c, err := Load(Inputs{File: absent})
	if err != nil {
		t.Fatal(err)
	}
	if c.G4Size != G4SizeAuto || c.G4High != 0.95 || c.G4Low != 0.85 {
		t.Fatalf("defaults: g4_size %d, g4_high %g, g4_low %g", c.G4Size, c.G4High, c.G4Low)
	}
	sum := strings.Join(c.Summary(), "\n")
	for _, w := range []string{"g4_size = auto (default)", "g4_high = 0.95 (default)", "g4_low = 0.85 (default)"} {
		if !strings.Contains(sum, w) {
			t.Errorf("summary lacks %q", w)
		}
	}
	for in, want := range map[string]int64{"auto": G4SizeAuto, " AUTO ": G4SizeAuto, "0": 0, "500GiB": 500 << 30, "2T": 2 << 40, "4MiB": 4 << 20} {
		c, err := Load(Inputs{File: absent, Flags: map[string]string{"g4-size": in}})
		if err != nil || c.G4Size != want || c.Source("g4_size") != SourceFlag {
			t.Errorf("g4_size %q → %d, %v; want %d", in, c.G4Size, err, want)
		}
	}
	// YAML and environment; an explicit size applies to s3 too.
	file := writeFile(t, dir, "c.yaml", "g4: s3://bucket/pfx\ng4_size: 1TiB\ng4_high: 90%\ng4_low: 0.5\n")
	c, err = Load(Inputs{File: file, FileExplicit: true})
	if err != nil || c.G4Size != 1<<40 || c.G4High != 0.9 || c.G4Low != 0.5 || c.G4 != "s3://bucket/pfx" || c.Source("g4_size") != SourceFile {
		t.Fatalf("yaml: %+v, %v", c, err)
	}
	c, err = Load(Inputs{File: file, FileExplicit: true, Env: envMap(map[string]string{"CTXMEM_G4_SIZE": "0"})})
	if err != nil || c.G4Size != 0 || c.Source("g4_size") != SourceEnv {
		t.Fatalf("env: g4_size %d, %v", c.G4Size, err)
	}
	// A size at least the largest namespace block is needed.
	file = writeFile(t, dir, "ns.yaml", "g4_size: 1MiB\nnamespaces:\n  - name: a\n    block_size: 2MiB\n")
	if _, err := Load(Inputs{File: file, FileExplicit: true}); err == nil || !strings.Contains(err.Error(), "g4_size") {
		t.Fatalf("g4_size below a namespace block: %v", err)
	}
}

func TestMarkdownTable(t *testing.T) {
	md := MarkdownTable()
	lines := strings.Split(strings.TrimSuffix(md, "\n"), "\n")
	opts := Options()
	if len(lines) != len(opts)+5 { // header, rule, config row, options, namespaces, pool_targets
		t.Fatalf("%d lines for %d options:\n%s", len(lines), len(opts), md)
	}
	for i, o := range opts {
		l := lines[3+i]
		for _, want := range []string{"`" + o.Key + "`", "`--" + o.Flag + "`", "`" + o.Env + "`", "`" + o.Default + "`", o.Help} {
			if !strings.Contains(l, want) {
				t.Errorf("row %q lacks %q", l, want)
			}
		}
		if strings.Count(l, " |") != 5 {
			t.Errorf("row %q does not have 5 cells", l)
		}
	}
	// Every flag/env/key is unique and consistently derived.
	seen := map[string]bool{}
	for _, o := range opts {
		for _, n := range []string{"key " + o.Key, "flag " + o.Flag, "env " + o.Env} {
			if seen[n] {
				t.Errorf("duplicate name %s", n)
			}
			seen[n] = true
		}
		if o.Env != "CTXMEM_"+strings.ToUpper(o.Key) || o.Flag != strings.ReplaceAll(o.Key, "_", "-") {
			t.Errorf("names of %s not derived from the key: %s %s", o.Key, o.Flag, o.Env)
		}
	}
}

// TestReadmeTable checks that the options table of docs/configuration.md
// (between the markers below; the README links to it) is exactly
// MarkdownTable(). CTXMEM_UPDATE_README=1 rewrites the table instead.
func TestReadmeTable(t *testing.T) {
	const begin, end = "<!-- config-table:begin -->\n", "<!-- config-table:end -->"
	doc := filepath.Join("..", "docs", "configuration.md")
	data, err := os.ReadFile(doc)
	if err != nil {
		t.Fatalf("the options table lives in %s: %v", doc, err)
	}
	s := string(data)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		t.Fatalf("%s has no config-table markers (%q ... %q)", doc, begin, end)
	}
	if got := s[i+len(begin) : j]; got != MarkdownTable() {
		if os.Getenv("CTXMEM_UPDATE_README") == "1" {
			s = s[:i+len(begin)] + MarkdownTable() + s[j:]
			if err := os.WriteFile(doc, []byte(s), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Errorf("%s: config table is stale; run CTXMEM_UPDATE_README=1 go test -run TestReadmeTable ./config/, or replace it with config.MarkdownTable():\n%s", doc, MarkdownTable())
	}
}

func TestSummary(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	c, err := Load(Inputs{File: filepath.Join(dir, "absent"), Flags: map[string]string{"dram": "2G"}})
	if err != nil {
		t.Fatal(err)
	}
	sum := strings.Join(c.Summary(), "\n")
	for _, w := range []string{"dram = 2GiB (flag)", "dram_low = 0.75 (default)", "config file = (none)", "mount = " + filepath.Join(dir, DevRoot, "mnt") + " (default)"} {
		if !strings.Contains(sum, w) {
			t.Errorf("summary lacks %q:\n%s", w, sum)
		}
	}
}

func TestYAMLExports(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "c.yaml")
	os.WriteFile(p, []byte("exports:\n  - name: swap\n    size: 2GiB\n    read_only: false\n  - name: golden\n    size: 64MiB\n    block_size: 256KiB\n    read_only: true\n"), 0o644)
	c, err := Load(Inputs{File: p, FileExplicit: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Exports) != 2 || c.Exports[0] != (Export{Name: "swap", Size: 2 << 30}) ||
		c.Exports[1] != (Export{Name: "golden", Size: 64 << 20, BlockSize: 256 << 10, ReadOnly: true}) {
		t.Fatalf("exports %+v", c.Exports)
	}
	for _, bad := range []string{"exports:\n  - name: x\n", "exports:\n  - name: x\n    size: 1G\n    colour: red\n",
		"exports:\n  - name: x\n    size: 1G\n  - name: x\n    size: 1G\n"} {
		os.WriteFile(p, []byte(bad), 0o644)
		if _, err := Load(Inputs{File: p, FileExplicit: true}); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

// TestExportsInANamespace: exports[].namespace must name a configured
// namespace, and the exports of a namespace with a quota must fit it.
func TestExportsInANamespace(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "c.yaml")
	const nss = "namespaces:\n  - name: kv\n    quota: 64MiB\n  - name: free\n"
	os.WriteFile(p, []byte(nss+"exports:\n  - name: a\n    size: 32MiB\n    namespace: kv\n  - name: b\n    size: 32MiB\n    namespace: kv\n  - name: c\n    size: 1GiB\n    namespace: free\n"), 0o644)
	c, err := Load(Inputs{File: p, FileExplicit: true})
	if err != nil {
		t.Fatal(err)
	}
	if c.Exports[0].Namespace != "kv" || c.Exports[2].Namespace != "free" {
		t.Fatalf("exports %+v", c.Exports)
	}
	for bad, want := range map[string]string{
		nss + "exports:\n  - name: a\n    size: 48MiB\n    namespace: kv\n  - name: b\n    size: 32MiB\n    namespace: kv\n": "more than its quota",
		nss + "exports:\n  - name: a\n    size: 1MiB\n    namespace: nope\n":                                                 "not a configured namespace",
	} {
		os.WriteFile(p, []byte(bad), 0o644)
		_, err := Load(Inputs{File: p, FileExplicit: true})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error saying %q", bad, err, want)
		}
	}
}

// TestValidationReportsRootCause is a new user's run: `dram: 0` printed,
// besides the real error, one about dirty_bytes, which the user never
// set (it is derived from dram). Validate reports only root causes: a
// derived value not given is not reported when its source is; one the
// user gave still is.
func TestValidationReportsRootCause(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	cases := []struct {
		name    string
		yaml    string
		flags   map[string]string
		want    []string
		notWant []string
	}{
		{name: "dram 0", yaml: "dram: 0\n", want: []string{"line 1: dram: 0 is too small"}, notWant: []string{"dirty_bytes"}},
		{name: "dram too small", flags: map[string]string{"dram": "1MiB"}, want: []string{"dram"}, notWant: []string{"dirty_bytes"}},
		{name: "dram 0, dirty given", flags: map[string]string{"dram": "0", "dirty-bytes": "1MiB"},
			want: []string{"dram: 0", `flag --dirty-bytes="1MiB": dirty_bytes`}},
		{name: "data in mount", flags: map[string]string{"mount": dir + "/m", "data-dir": dir + "/m/data"},
			want: []string{"data_dir", "inside the mount"}, notWant: []string{"g3_dir", "admin:", "g4:"}},
		{name: "data in mount, admin given", flags: map[string]string{"mount": dir + "/m", "data-dir": dir + "/m/data", "admin": dir + "/m/a.sock"},
			want: []string{"data_dir", "admin"}, notWant: []string{"g3_dir", "g4:"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := Inputs{File: filepath.Join(dir, "absent.yaml"), Flags: tc.flags}
			if tc.yaml != "" {
				in.File, in.FileExplicit = writeFile(t, t.TempDir(), "c.yaml", tc.yaml), true
			}
			_, err := Load(in)
			if err == nil {
				t.Fatalf("no error, want one mentioning %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(err.Error(), w) {
					t.Errorf("error %q mentions %q, which only follows from the root cause", err, w)
				}
			}
		})
	}
	keys := map[string]bool{}
	for _, o := range Options() {
		keys[o.Key] = true
	}
	for _, o := range Options() {
		if o.from != "" && (!keys[o.from] || o.derive == nil) {
			t.Errorf("option %s derives from %q: not an option, or no derive", o.Key, o.from)
		}
	}
}
