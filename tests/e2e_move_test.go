package tests

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxmem/ctxmemd/tests/harness"
)

// TestE2EMoveVerbs runs `ctxmemd evict|sink|warmup|pin|unpin` on a
// directory of a running daemon with no control plane (issue 16 item 6):
// every file under it moves, as user.ctxmem.tier shows, and a path off
// the mount is refused with exit 2.
func TestE2EMoveVerbs(t *testing.T) {
	bin := needE2E(t)
	d := harness.Start(t, bin, harness.Options{DRAM: "256MiB", G3Size: "1GiB"})
	dir := filepath.Join(d.Namespace(), "kv", "layer0")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var files []string
	for i := range 6 {
		p := filepath.Join(dir, "blk"+string(rune('a'+i)))
		if err := os.WriteFile(p, make([]byte, 1<<20), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
	}
	run := func(args ...string) (int, string) {
		cmd := exec.Command(bin, append([]string{args[0], "--admin", d.Admin}, args[1:]...)...)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, string(out)
	}
	expect := func(verb, tier string) {
		t.Helper()
		if code, out := run(verb, filepath.Join(d.Namespace(), "kv")); code != 0 || !strings.Contains(out, "6 files, 0 failed") {
			t.Fatalf("%s: exit %d: %s", verb, code, out)
		}
		for _, f := range files {
			if v := tierOf(t, f); !allIn(v, tier) {
				t.Fatalf("after %s: %s is in %q, want all %s", verb, f, v, tier)
			}
		}
	}
	expect("evict", "G3")
	expect("warmup", "G2")
	expect("sink", "G4")
	du := func() string {
		t.Helper()
		out, err := exec.Command(bin, "du", "--json", filepath.Join(d.Namespace(), "kv")).CombinedOutput()
		if err != nil {
			t.Fatalf("du: %v: %s", err, out)
		}
		return string(out)
	}
	// du sums the directory by tier: 6 files of 1 MiB, all in G4 now.
	if out := du(); !strings.Contains(out, `"files": 6`) || !strings.Contains(out, `"G4": 6291456`) {
		t.Fatalf("du after sink: %s", out)
	}
	expect("warmup", "G2")
	if out := du(); !strings.Contains(out, `"G2": 6291456`) {
		t.Fatalf("du after warmup: %s", out)
	}
	if out, err := exec.Command(bin, "ls", files[0]).CombinedOutput(); err != nil || !strings.Contains(string(out), "G2") {
		t.Fatalf("ls: %v: %s", err, out)
	}
	// A missing path among others: the others are still listed, the
	// missing one reported, exit 2.
	out, err := exec.Command(bin, "ls", files[0], filepath.Join(d.Namespace(), "kv", "missing")).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), filepath.Base(files[0])) || !strings.Contains(string(out), "missing") {
		t.Fatalf("ls of a file and a missing path: %v (want exit 2): %s", err, out)
	}
	if code, out := run("pin", files[0]); code != 0 {
		t.Fatalf("pin: exit %d: %s", code, out)
	}
	if code, out := run("evict", files[0]); code != 1 || !strings.Contains(out, "pinned") {
		t.Fatalf("evict of a pinned file: exit %d (want 1): %s", code, out)
	}
	if code, out := run("unpin", files[0]); code != 0 {
		t.Fatalf("unpin: exit %d: %s", code, out)
	}
	if code, out := run("evict", t.TempDir()); code != 2 || !strings.Contains(out, "not on the mount") {
		t.Fatalf("path off the mount: exit %d (want 2): %s", code, out)
	}
}
