package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/internal/testenv"
	"github.com/ctxmem/ctxmemd/tests/harness"
	"github.com/ctxmem/ctxmemd/tiering"
	"github.com/ctxmem/ctxmemd/tiering/g4"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// fsckPattern is n bytes of tag-numbered records: every 64-byte window
// of it occurs once, in this file only.
func fsckPattern(tag string, n int) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "%s:%09d;", tag, i)
	}
	return b.Bytes()[:n]
}

// flipInG3 flips one byte of every occurrence of needle in the daemon's
// G3 segment files and returns how many it flipped.
func flipInG3(t *testing.T, g3dir string, needle []byte) int {
	t.Helper()
	segs, _ := filepath.Glob(filepath.Join(g3dir, "*.seg"))
	n := 0
	for _, p := range segs {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		for off := 0; ; {
			i := bytes.Index(b[off:], needle)
			if i < 0 {
				break
			}
			i += off
			if _, err := f.WriteAt([]byte{b[i+20] ^ 0x01}, int64(i+20)); err != nil {
				t.Fatal(err)
			}
			n++
			off = i + len(needle)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	return n
}

// TestE2EFsck is issue 16 item 6 end to end: a byte flipped in the G3
// record of a file that lives only in G3 (a) and of one that is also in
// G2 (b) is reported by `ctxmemd fsck --json` (exit 1); `fsck --drop`
// forgets both: a is lost (reads fail, never return the flipped byte), b
// is written back again from G2 and reads right, also from G3; a third
// fsck is clean. `ctxmemd gc` reports an object planted in the local G4
// directory and deletes it (--dry-run only reports). Stopped, the data
// directory passes `fsck --offline` (the corrupt records are superseded
// by tombstones); running, --offline is refused with exit 2.
func TestE2EFsck(t *testing.T) {
	bin := needE2E(t)
	d := harness.Start(t, bin, harness.Options{DRAM: "256MiB", G3Size: "1GiB"})
	ctx := context.Background()
	dir := filepath.Join(d.Namespace(), "fsck")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	const size = 2 << 20
	files := map[string][]byte{}
	for _, name := range []string{"a", "b", "c"} {
		want := fsckPattern("fsck-"+name, size)
		p := filepath.Join(dir, name)
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(want); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil { // written back to G3
			t.Fatal(err)
		}
		f.Close()
		files[p] = want
	}
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	cli := func(args ...string) (int, string, string) {
		t.Helper()
		cmd := exec.Command(bin, append([]string{args[0], "--admin", d.Admin}, args[1:]...)...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, out.String(), errb.String()
	}
	if code, out, errs := cli("evict", a); code != 0 {
		t.Fatalf("evict a: exit %d: %s %s", code, out, errs)
	}
	if v := tierOf(t, a); !allIn(v, "G3") {
		t.Fatalf("a is in %q, want all G3", v)
	}
	if v := tierOf(t, b); !strings.Contains(v, "G2") {
		t.Fatalf("b is in %q, want G2", v)
	}
	// One byte in the middle of each file: block 1 for any block size up
	// to 1 MiB.
	for _, p := range []string{a, b} {
		if n := flipInG3(t, filepath.Join(d.DataDir, "g3"), files[p][size/2+1000:size/2+1064]); n < 1 {
			t.Fatalf("%s: the needle is in no G3 record (%d)", p, n)
		}
	}
	fsck := func(want int, args ...string) tiering.FsckReport {
		t.Helper()
		code, out, errs := cli(append([]string{"fsck", "--json"}, args...)...)
		var rep tiering.FsckReport
		if code != want || json.Unmarshal([]byte(out), &rep) != nil {
			t.Fatalf("fsck %v: exit %d (want %d): %s\n%s\nlog:\n%s", args, code, want, out, errs, d.Log())
		}
		return rep
	}
	badPaths := func(rep tiering.FsckReport) map[string]tiering.FsckBadCopy {
		m := map[string]tiering.FsckBadCopy{}
		for _, bad := range rep.Bad {
			m[bad.Path] = bad
		}
		return m
	}
	rel := func(p string) string { r, _ := filepath.Rel(d.Mount, p); return r }

	rep := fsck(1)
	bad := badPaths(rep)
	if rep.BadCopies() != 2 || bad[rel(a)].Problem != tiering.FsckCorrupt || bad[rel(b)].Problem != tiering.FsckCorrupt ||
		bad[rel(a)].Tier != tiering.TierG3 || bad[rel(a)].Dropped || len(bad[rel(a)].OtherCopies) != 0 ||
		len(bad[rel(b)].OtherCopies) == 0 || bad[rel(b)].OtherCopies[0] != "G2" {
		t.Fatalf("fsck: %+v", rep)
	}

	rep = fsck(1, "--drop")
	bad = badPaths(rep)
	if rep.BadCopies() != 2 || !bad[rel(a)].Dropped || bad[rel(a)].Outcome != tiering.FsckLost ||
		bad[rel(b)].Outcome != tiering.FsckRewritten || rep.LostObjects != 1 || rep.Rewritten != 1 {
		t.Fatalf("fsck --drop: %+v", rep)
	}
	// a: an error (the file is gone, or EIO), never the flipped byte.
	if got, err := os.ReadFile(a); err == nil && !bytes.Equal(got, files[a]) {
		t.Fatal("a read back wrong bytes after fsck --drop")
	} else if err == nil {
		t.Logf("a still reads its right bytes (kernel page cache)")
	}
	check := func(p string) {
		t.Helper()
		got, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(got, files[p]) {
			t.Fatalf("%s after fsck --drop: %v (right bytes: %v)", p, err, bytes.Equal(got, files[p]))
		}
	}
	check(b)
	check(filepath.Join(dir, "c"))
	if code, out, errs := cli("evict", b); code != 0 {
		t.Fatalf("evict b: exit %d: %s %s", code, out, errs)
	}
	if v := tierOf(t, b); !allIn(v, "G3") {
		t.Fatalf("b after evict is in %q, want all G3", v)
	}
	check(b)
	if rep := fsck(0); !rep.Clean() {
		t.Fatalf("third fsck: %+v", rep)
	}
	if code, out, errs := cli("fsck"); code != 0 || !strings.Contains(out, "fsck: clean") {
		t.Fatalf("fsck (table): exit %d: %s %s", code, out, errs)
	}

	// gc: an object planted in the local G4 directory.
	local, err := g4.NewLocal(filepath.Join(d.DataDir, "g4"))
	if err != nil {
		t.Fatal(err)
	}
	stray := g4.BlockName(g4.DefaultPrefix, tier.Key{Namespace: "default", Object: 1 << 40, Index: 0, Gen: 1})
	body := bytes.Repeat([]byte("stray"), 1000)
	if err := local.Put(ctx, stray, bytes.NewReader(body), int64(len(body)), nil); err != nil {
		t.Fatal(err)
	}
	strayPath, _ := local.Path(stray)
	gc := func(args ...string) tiering.GCTierReport {
		t.Helper()
		code, out, errs := cli(append([]string{"gc", "--json"}, args...)...)
		var r tiering.GCReport
		if code != 0 || json.Unmarshal([]byte(out), &r) != nil {
			t.Fatalf("gc %v: exit %d: %s %s", args, code, out, errs)
		}
		for _, tr := range r.Tiers {
			if tr.Tier == tiering.TierG4 {
				return tr
			}
		}
		t.Fatalf("gc %v: no G4 in %s", args, out)
		return tiering.GCTierReport{}
	}
	wantBytes := int64(len(body) - 64 - len("default"))
	if tr := gc("--dry-run"); tr.Garbage != 1 || tr.Queued != 0 || tr.Bytes != wantBytes {
		t.Fatalf("gc --dry-run: G4 %+v", tr)
	}
	if _, err := os.Stat(strayPath); err != nil {
		t.Fatalf("gc --dry-run deleted the stray object: %v", err)
	}
	if tr := gc(); tr.Garbage != 1 || tr.Queued != 1 || tr.Bytes != wantBytes {
		t.Fatalf("gc: G4 %+v", tr)
	}
	testenv.Eventually(t, 20*time.Second, func() bool {
		_, err := os.Stat(strayPath)
		return os.IsNotExist(err)
	}, "the stray G4 object to be deleted")
	check(b)
	check(filepath.Join(dir, "c"))

	// --offline: refused while the daemon runs; clean once it is stopped.
	offline := []string{"fsck", "--offline", "--config", d.Config, "--data-dir", d.DataDir, "--admin", d.Admin}
	run := func(args ...string) (int, string) {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), string(out)
		} else if err != nil {
			t.Fatal(err)
		}
		return 0, string(out)
	}
	if code, out := run(offline...); code != 2 || !strings.Contains(out, "running") {
		t.Fatalf("fsck --offline with the daemon running: exit %d (want 2): %s", code, out)
	}
	if err := d.Stop(); err != nil {
		t.Fatalf("%v; log:\n%s", err, d.Log())
	}
	if code, out := run(offline...); code != 0 || !strings.Contains(out, "fsck --offline: clean") {
		t.Fatalf("fsck --offline: exit %d: %s", code, out)
	}
}
