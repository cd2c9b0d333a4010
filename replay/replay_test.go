package replay

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxmem/ctxmemd/internal/testenv"
)

const bb = 4096

func synthetic() []Request {
	ids := [][]int64{
		{1, 2, 3},    // 3 misses
		{1, 2, 4},    // 2 hits, 1 miss
		{1, 2, 3, 5}, // 3 hits, 1 miss
		{6},          // 1 miss
		{1, 2, 3, 5}, // 4 hits: the only all-hit request
		{7, 7},       // 1 miss, then 1 hit
	}
	var out []Request
	for i, h := range ids {
		out = append(out, Request{Timestamp: int64(i), HashIDs: h})
	}
	return out
}

func TestSyntheticExactCounts(t *testing.T) {
	for _, conc := range []int{1, 4} {
		dir := t.TempDir()
		res, err := Run(context.Background(), synthetic(), Options{Mount: dir, BlockBytes: bb, Concurrency: conc})
		if err != nil {
			t.Fatal(err)
		}
		if res.Requests != 6 || res.Blocks != 17 || res.BlockHits != 10 || res.BlockMisses != 7 ||
			res.VerifyFailures != 0 || res.WriteErrors != 0 {
			t.Errorf("conc %d: %+v", conc, res)
		}
		if res.BytesWritten != 7*bb || res.BytesRead != 10*bb {
			t.Errorf("conc %d: written %d read %d", conc, res.BytesWritten, res.BytesRead)
		}
		if want := 10.0 / 17; res.BlockHitRatio != want || res.ByteHitRatio != want {
			t.Errorf("conc %d: ratios %g %g want %g", conc, res.BlockHitRatio, res.ByteHitRatio, want)
		}
		if conc == 1 && (res.RequestHits != 1 || res.RequestHitRatio != 1.0/6) {
			t.Errorf("request hits %d ratio %g", res.RequestHits, res.RequestHitRatio)
		}
		if len(res.HitsByTier) != 5 || res.HitsByTier[TierUnknown]+res.HitsByTier["G2"]+res.HitsByTier["G3"]+
			res.HitsByTier["G3.5"]+res.HitsByTier["G4"] != 10 {
			t.Errorf("hits by tier %v", res.HitsByTier)
		}
		// Seven block files, no temp files left.
		ents, _ := os.ReadDir(dir)
		if len(ents) != 7 {
			t.Errorf("%d files in mount, want 7", len(ents))
		}
		for _, e := range ents {
			if strings.Contains(e.Name(), ".tmp.") {
				t.Errorf("stray temp file %s", e.Name())
			}
		}
		// A second pass over the same directory hits everything.
		res, err = Run(context.Background(), synthetic(), Options{Mount: dir, BlockBytes: bb, Concurrency: conc})
		if err != nil || res.BlockHits != 17 || res.BlockMisses != 0 || res.RequestHits != 6 || res.BytesWritten != 0 {
			t.Errorf("second pass: %+v, %v", res, err)
		}
	}
}

func TestTierXattrCounted(t *testing.T) {
	dir := t.TempDir()
	reqs := []Request{{HashIDs: []int64{1, 2, 3}}}
	if _, err := Run(context.Background(), reqs, Options{Mount: dir, BlockBytes: bb}); err != nil {
		t.Fatal(err)
	}
	set := map[int64]string{1: "G3*2 G4", 2: "G2", 3: "G3.5*1"}
	for id, v := range set {
		if err := unix.Setxattr(filepath.Join(dir, LayoutFlat.RelPath(id)), TierXattr, []byte(v), 0); err != nil {
			testenv.Skip(t, "user xattrs not supported here: %v", err)
		}
	}
	res, err := Run(context.Background(), append(reqs, Request{HashIDs: []int64{1}}), Options{Mount: dir, BlockBytes: bb})
	if err != nil {
		t.Fatal(err)
	}
	// A hit counts at the slowest tier the file needs ("G3*2 G4": G4).
	want := map[string]int64{"G2": 1, "G3": 0, "G3.5": 1, "G4": 2, TierUnknown: 0}
	for k, v := range want {
		if res.HitsByTier[k] != v {
			t.Errorf("hits_by_tier[%s] = %d, want %d (%v)", k, res.HitsByTier[k], v, res.HitsByTier)
		}
	}
	if ParseTierRuns("") != TierUnknown || ParseTierRuns("G4*10") != "G4" || ParseTierRuns(" G2 G3") != "G3" || ParseTierRuns("G2*4") != "G2" {
		t.Error("ParseTierRuns")
	}
}

func TestCorruptionDetected(t *testing.T) {
	dir := t.TempDir()
	if _, err := Run(context.Background(), synthetic(), Options{Mount: dir, BlockBytes: bb, Concurrency: 1}); err != nil {
		t.Fatal(err)
	}
	// Flip one byte of block 3 at offset 1234, truncate block 5, append to block 6.
	p3 := filepath.Join(dir, LayoutFlat.RelPath(3))
	data, _ := os.ReadFile(p3)
	data[1234] ^= 0x40
	if err := os.WriteFile(p3, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(dir, LayoutFlat.RelPath(5)), bb-1); err != nil {
		t.Fatal(err)
	}
	f, _ := os.OpenFile(filepath.Join(dir, LayoutFlat.RelPath(6)), os.O_APPEND|os.O_WRONLY, 0)
	f.Write([]byte{0})
	f.Close()

	var logs bytes.Buffer
	res, err := Run(context.Background(), synthetic(), Options{Mount: dir, BlockBytes: bb, Concurrency: 2,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), FailureLogs: 100})
	if err != nil {
		t.Fatal(err)
	}
	// Block 3 appears 3 times, block 5 twice, block 6 once.
	if res.VerifyFailures != 6 || res.BlockHits != 11 || res.BlockMisses != 0 {
		t.Errorf("failures %d hits %d misses %d, want 6, 11, 0", res.VerifyFailures, res.BlockHits, res.BlockMisses)
	}
	l := logs.String()
	for _, w := range []string{"wrong byte", p3, "offset=1234", "short file", "longer than a block"} {
		if !strings.Contains(l, w) {
			t.Errorf("log lacks %q:\n%s", w, l)
		}
	}
	// The cap on detailed logs holds.
	logs.Reset()
	res, _ = Run(context.Background(), synthetic(), Options{Mount: dir, BlockBytes: bb,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), FailureLogs: 2})
	if n := strings.Count(logs.String(), "\n"); res.VerifyFailures != 6 || n != 2 {
		t.Errorf("failures %d, %d log lines; want 6 and 2", res.VerifyFailures, n)
	}
}

func TestVanishedIsMiss(t *testing.T) {
	dir := t.TempDir()
	r := &runner{opts: Options{Mount: dir, BlockBytes: bb, Layout: LayoutFlat, Logger: slog.New(slog.DiscardHandler), FailureLogs: 1},
		hosts: []host{{mount: dir}}, inflight: map[claimKey]chan struct{}{}, seen: map[claimKey]struct{}{}}
	w := &worker{r: r, rbuf: make([]byte, bb+1), wbuf: make([]byte, bb), xbuf: make([]byte, 64), cnt: make([]counts, 1), tiers: map[string]int64{}}
	if got := w.read(0, filepath.Join(dir, "gone.bin"), 9); got != readVanished {
		t.Errorf("read of a vanished file = %v, want readVanished", got)
	}
	if w.cnt[0].verifyFailures != 0 {
		t.Error("a vanished file is not a verification failure")
	}
}

func TestLayouts(t *testing.T) {
	patterns := map[Layout]string{
		LayoutFlat:    `^[0-9a-f]{16}\.bin$`,
		LayoutSGLang:  `^[0-9a-f]{64}_Llama-3\.1-8B_0_1\.bin$`,
		LayoutVLLM:    `^Llama-3\.1-8B_[0-9a-f]{12}_r0/([0-9a-f]{3})/([0-9a-f]{2})_g0/[0-9a-f]{16}\.bin$`,
		LayoutLMCache: `^Llama-3\.1-8B@1@0@[0-9a-f]{16}@bfloat16\.pt$`,
		LayoutNIXL:    `^([0-9a-f]{2})/[0-9a-f]{16}_k$`,
	}
	for _, l := range Layouts() {
		re := regexp.MustCompile(patterns[l])
		seen := map[string]bool{}
		for id := range int64(2000) {
			p := l.RelPath(id)
			if !re.MatchString(p) {
				t.Fatalf("%s: %q does not match %s", l, p, re)
			}
			if seen[p] {
				t.Fatalf("%s: two ids map to %q", l, p)
			}
			seen[p] = true
		}
		dir := t.TempDir()
		res, err := Run(context.Background(), synthetic(), Options{Mount: dir, Layout: l, BlockBytes: 1000})
		if err != nil || res.BlockHits != 10 || res.VerifyFailures != 0 {
			t.Errorf("%s: %+v %v", l, res, err)
		}
		if _, err := os.Stat(filepath.Join(dir, l.RelPath(7))); err != nil {
			t.Errorf("%s: %v", l, err)
		}
	}
	if _, err := ParseLayout("nope"); err == nil || !strings.Contains(err.Error(), "vllm") {
		t.Errorf("ParseLayout error: %v", err)
	}
}

func TestPattern(t *testing.T) {
	for _, n := range []int{0, 1, 7, 8, 9, 4096, 4099} {
		p := make([]byte, n)
		Fill(42, p)
		if off := Verify(42, p); off != -1 {
			t.Fatalf("len %d: clean block fails at %d", n, off)
		}
		for off := range n {
			if Expected(42, off) != p[off] {
				t.Fatalf("Expected(42,%d) disagrees with Fill", off)
			}
		}
		for _, off := range []int{0, n / 2, n - 1} {
			if n == 0 {
				break
			}
			p[off] ^= 1
			if got := Verify(42, p); got != off {
				t.Errorf("len %d: flip at %d reported at %d", n, off, got)
			}
			p[off] ^= 1
		}
	}
	a, b := make([]byte, 64), make([]byte, 64)
	Fill(1, a)
	Fill(2, b)
	if bytes.Equal(a, b) || Verify(2, a) == -1 {
		t.Error("different ids give the same pattern")
	}
}

func TestReadTrace(t *testing.T) {
	in := `{"timestamp": 5, "input_length": 10, "output_length": 1, "hash_ids": [3]}

{"timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": [1, 2]}
{"timestamp": 5, "input_length": 10, "output_length": 1, "hash_ids": [4]}
`
	reqs, err := ReadTrace(strings.NewReader(in), 0)
	if err != nil || len(reqs) != 3 || reqs[0].HashIDs[1] != 2 || reqs[1].HashIDs[0] != 3 || reqs[2].HashIDs[0] != 4 {
		t.Errorf("ReadTrace = %+v, %v", reqs, err)
	}
	reqs, _ = ReadTrace(strings.NewReader(in), 1)
	if len(reqs) != 1 || reqs[0].Timestamp != 5 {
		t.Errorf("limit: %+v", reqs)
	}
	if _, err := ReadTrace(strings.NewReader("{\"timestamp\":1}\n{bad\n"), 0); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("bad line: %v", err)
	}
	// Gzip is recognised by its magic bytes, in a reader and in a file
	// whatever its name.
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write([]byte(in))
	zw.Close()
	reqs, err = ReadTrace(bytes.NewReader(z.Bytes()), 0)
	if err != nil || len(reqs) != 3 || reqs[0].HashIDs[1] != 2 {
		t.Errorf("ReadTrace(gzip) = %+v, %v", reqs, err)
	}
	p := filepath.Join(t.TempDir(), "trace.jsonl")
	if err := os.WriteFile(p, z.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if reqs, err = LoadTrace(p, 0); err != nil || len(reqs) != 3 {
		t.Errorf("LoadTrace(gzip without .gz) = %+v, %v", reqs, err)
	}
}

func TestSpeedAndCancel(t *testing.T) {
	reqs := []Request{{Timestamp: 0, HashIDs: []int64{1}}, {Timestamp: 300, HashIDs: []int64{1}}}
	start := time.Now()
	res, err := Run(context.Background(), reqs, Options{Mount: t.TempDir(), BlockBytes: bb, Speed: 10})
	if err != nil || res.BlockHits != 1 {
		t.Fatal(res, err)
	}
	if el := time.Since(start); el < 30*time.Millisecond { // 300 ms of trace at 10x
		t.Errorf("speed 10 replayed 300 ms of trace in %v", el)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err = Run(ctx, []Request{{Timestamp: 0}, {Timestamp: 1e9}}, Options{Mount: t.TempDir(), Speed: 1})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled run: %v", err)
	}
	if _, err := Run(context.Background(), nil, Options{Mount: filepath.Join(t.TempDir(), "nope")}); err == nil {
		t.Error("missing mount accepted")
	}
}

func TestProgressAndTable(t *testing.T) {
	var bar, tbl bytes.Buffer
	res, err := Run(context.Background(), synthetic(), Options{Mount: t.TempDir(), BlockBytes: bb, Progress: &bar})
	if err != nil {
		t.Fatal(err)
	}
	if bar.Len() == 0 {
		t.Error("no progress output")
	}
	if err := res.WriteTable(&tbl); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"served from G2 0.0000", "found in any tier 0.5882", "hits G3.5", "verification failures", "read latency p99"} {
		if !strings.Contains(tbl.String(), w) {
			t.Errorf("table lacks %q:\n%s", w, tbl.String())
		}
	}
}

// TestRealTrace replays the first 500 requests of the Mooncake trace into
// a plain directory (an infinite cache) and checks the hit count against an
// independent count of repeated block ids.
func TestRealTrace(t *testing.T) {
	reqs, err := LoadTrace("", 500) // the bundled trace
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 500 {
		t.Fatalf("loaded %d requests", len(reqs))
	}
	seen := map[int64]bool{}
	var refs, hits int64
	for _, q := range reqs {
		for _, id := range q.HashIDs {
			refs++
			if seen[id] {
				hits++
			}
			seen[id] = true
		}
	}
	res, err := Run(context.Background(), reqs, Options{Mount: t.TempDir(), BlockBytes: 4096, Concurrency: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("500 requests: %d blocks, %d hits (%.4f), %d distinct; %.1f MiB/s, read p50 %.1fµs p99 %.1fµs",
		res.Blocks, res.BlockHits, res.BlockHitRatio, len(seen), res.MiBPerSec, res.ReadLatencyP50us, res.ReadLatencyP99us)
	if res.VerifyFailures != 0 || res.WriteErrors != 0 {
		t.Errorf("failures %d, write errors %d", res.VerifyFailures, res.WriteErrors)
	}
	if res.Blocks != refs || res.BlockHits != hits || res.BlockMisses != int64(len(seen)) {
		t.Errorf("blocks %d hits %d misses %d; infinite cache: %d refs, %d hits, %d distinct",
			res.Blocks, res.BlockHits, res.BlockMisses, refs, hits, len(seen))
	}
	if res.BlockHitRatio != float64(hits)/float64(refs) {
		t.Errorf("hit ratio %g want %g", res.BlockHitRatio, float64(hits)/float64(refs))
	}
}

func BenchmarkVerify256K(b *testing.B) {
	p := make([]byte, 256<<10)
	Fill(7, p)
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		if Verify(7, p) != -1 {
			b.Fatal("mismatch")
		}
	}
}

func BenchmarkFill256K(b *testing.B) {
	p := make([]byte, 256<<10)
	b.SetBytes(int64(len(p)))
	for i := 0; b.Loop(); i++ {
		Fill(int64(i), p)
	}
}

// TestPrefixHitsAndTokens: only the hits before a request's first miss
// count as prefix hits, and tokens and prefill time follow from them.
func TestPrefixHitsAndTokens(t *testing.T) {
	dir := t.TempDir()
	reqs := []Request{{HashIDs: []int64{1, 2, 3}}, {HashIDs: []int64{1, 2, 9, 3}}, {HashIDs: []int64{7, 1}}}
	res, err := Run(context.Background(), reqs, Options{Mount: dir, BlockBytes: bb, Concurrency: 1, TokensPerBlock: 16, PrefillUsPerToken: 50})
	if err != nil {
		t.Fatal(err)
	}
	// Hits: 1, 2, 3 of the second request, 1 of the third; prefix hits:
	// 1 and 2 of the second (3 comes after the miss of 9; the third
	// starts with a miss).
	if res.BlockHits != 4 || res.PrefixHits != 2 || res.TokensHit != 32 || res.TokensPerBlock != 16 {
		t.Fatalf("hits %d prefix %d tokens %d (per block %d)", res.BlockHits, res.PrefixHits, res.TokensHit, res.TokensPerBlock)
	}
	if res.PrefixHitRatio != 2.0/9 || res.RecomputeAvoidedS != 32*50/1e6 {
		t.Fatalf("prefix ratio %v, avoided %v s", res.PrefixHitRatio, res.RecomputeAvoidedS)
	}
	var tbl strings.Builder
	if err := res.WriteTable(&tbl); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"prefix hits", "2 blocks, ratio 0.2222", "tokens not recomputed  32 (16 per block)", "prefill avoided", "0.0 s at 50 µs/token"} {
		if !strings.Contains(tbl.String(), w) {
			t.Errorf("table lacks %q:\n%s", w, tbl.String())
		}
	}
	if _, err := Run(context.Background(), reqs, Options{Mount: dir, TokensPerBlock: -1}); err == nil {
		t.Error("negative tokens per block accepted")
	}
}
