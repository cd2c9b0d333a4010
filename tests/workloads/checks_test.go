package workloads

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// These tests plant broken files and check the workloads' checks catch
// them, so a passing workload run means something.

func newTestRun(t *testing.T) (*run, *registry, string) {
	t.Helper()
	return newRun("T", Params{}.withDefaults()), newRegistry(), t.TempDir()
}

func TestReadObjectCatchesShortTornAndWrongFiles(t *testing.T) {
	r, g, dir := newTestRun(t)
	const size = 16384
	buf := make([]byte, size)
	cases := map[string]func(o *object) []byte{
		"short": func(o *object) []byte {
			b := make([]byte, size-4096)
			Fill(b, o.key, g.newGen(o), 0)
			return b
		},
		"torn": func(o *object) []byte {
			b := make([]byte, size)
			Fill(b, o.key, g.newGen(o), 0)
			Fill(b[8192:], o.key, g.newGen(o), 8192)
			return b
		},
		"stale generation": func(o *object) []byte {
			b := make([]byte, size)
			Fill(b, o.key, 999, 0)
			g.newGen(o)
			return b
		},
	}
	for name, mk := range cases {
		o := g.get(filepath.Join(dir, strings.ReplaceAll(name, " ", "_")), name, size)
		if err := os.WriteFile(o.path, mk(o), 0o644); err != nil {
			t.Fatal(err)
		}
		before := r.failures.Load()
		if res := r.readObject(g, o, buf, false, name); res != readWrong || r.failures.Load() != before+1 {
			t.Errorf("%s file: readObject = %v, failures %d→%d; want readWrong and one failure", name, res, before, r.failures.Load())
		}
	}
	good := g.get(filepath.Join(dir, "good"), "good", size)
	b := make([]byte, size)
	Fill(b, good.key, g.newGen(good), 0)
	os.WriteFile(good.path, b, 0o644)
	if res := r.readObject(g, good, buf, false, "good"); res != readOK {
		t.Errorf("good file: %v", res)
	}
	if res := r.readObject(g, g.get(filepath.Join(dir, "absent"), "absent", size), buf, false, "absent"); res != readGone {
		t.Errorf("absent file: %v", res)
	}
}

func TestFinalAuditCatchesStrayAndMissingFiles(t *testing.T) {
	r, g, dir := newTestRun(t)
	const size = 4096
	buf := make([]byte, size)
	kept := g.get(filepath.Join(dir, "kept"), "kept", size)
	b := make([]byte, size)
	Fill(b, kept.key, g.newGen(kept), 0)
	os.WriteFile(kept.path, b, 0o644)
	g.setPresent(kept, true)
	if got := r.finalAudit(g, dir, buf, false); got != size || r.failures.Load() != 0 {
		t.Fatalf("clean dir: audited %d bytes, %d failures", got, r.failures.Load())
	}
	os.WriteFile(filepath.Join(dir, "kept.tmp.1.2.3"), b, 0o644) // stray temp
	missing := g.get(filepath.Join(dir, "missing"), "missing", size)
	g.newGen(missing)
	g.setPresent(missing, true) // published but not on disk
	r.finalAudit(g, dir, buf, false)
	if r.failures.Load() != 2 {
		t.Fatalf("stray temp + missing object: %d failures, want 2: %v", r.failures.Load(), r.msgs)
	}
	r2 := newRun("T", Params{AllowLoss: true}.withDefaults())
	g.setPresent(missing, true)
	os.Remove(filepath.Join(dir, "kept.tmp.1.2.3"))
	r2.finalAudit(g, dir, buf, false)
	if r2.failures.Load() != 0 || r2.lost.Load() != 1 {
		t.Fatalf("AllowLoss: failures %d lost %d, want 0 and 1", r2.failures.Load(), r2.lost.Load())
	}
}

func TestExpectGoneAndStatfsChecks(t *testing.T) {
	r, _, dir := newTestRun(t)
	p := filepath.Join(dir, "f")
	os.WriteFile(p, []byte("x"), 0o644)
	r.expectGone(p, "still there")
	if r.failures.Load() != 2 {
		t.Fatalf("existing file: %d failures, want 2 (stat and open)", r.failures.Load())
	}
	os.Remove(p)
	r.expectGone(p, "gone")
	if r.failures.Load() != 2 {
		t.Fatalf("unlinked file flagged: %v", r.msgs)
	}
	if _, ok := r.statvfs(dir, "statvfs"); !ok {
		t.Fatalf("statvfs of %s inconsistent: %v", dir, r.msgs)
	}
	r.p.StatfsTracksUsage = true
	r.statfsWait = 200 * time.Millisecond
	s, _ := r.statvfs(dir, "statvfs")
	s.bfree += 1 << 40 / uint64(s.frsize) // pretend a TiB was free before: nothing freed since
	r.expectFreeMove(dir, s, 1<<30, "no space freed")
	if r.failures.Load() != 3 {
		t.Fatalf("free space that did not move was not flagged: %v", r.msgs)
	}
}
