package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/tests/harness"
)

// reloadFixture drives config reloads of one daemon whose dram and g3_size
// come from its config file (the harness passes neither flag).
type reloadFixture struct {
	t *testing.T
	d *harness.Daemon
}

func newReloadFixture(t *testing.T) *reloadFixture {
	return &reloadFixture{t: t, d: harness.Start(t, needE2E(t), harness.Options{})}
}

// write rewrites the config file in place.
func (f *reloadFixture) write(body string) {
	f.t.Helper()
	if err := os.WriteFile(f.d.Config, []byte(body), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// replace replaces the config file by rename, as editors do.
func (f *reloadFixture) replace(body string) {
	f.t.Helper()
	tmp := filepath.Join(filepath.Dir(f.d.Config), ".ctxmemd.yaml.swp")
	if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
		f.t.Fatal(err)
	}
	if err := os.Rename(tmp, f.d.Config); err != nil {
		f.t.Fatal(err)
	}
}

// capacity returns the capacity `ctxmemd status --json` reports for tier.
func (f *reloadFixture) capacity(tier string) int64 {
	f.t.Helper()
	c, err := f.tryCapacity(tier)
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

func (f *reloadFixture) tryCapacity(tier string) (int64, error) {
	st, err := f.d.Status(context.Background())
	if err != nil {
		return 0, err
	}
	g, ok := st.Tier(tier)
	if !ok {
		return 0, fmt.Errorf("status has no tier %s: %s", tier, st.Raw)
	}
	return g.CapacityBytes, nil
}

// waitCapacity polls status for up to 10 s until tier has capacity want;
// status errors are retried (the admin socket opens after the mount the
// harness waits for).
func (f *reloadFixture) waitCapacity(tier string, want int64, how string) {
	f.t.Helper()
	var c int64
	var err error
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if c, err = f.tryCapacity(tier); err == nil && c == want {
			return
		}
	}
	f.t.Fatalf("%s: %s capacity %d (%v), want %d", how, tier, c, err, want)
}

// mark returns the current length of the log: waitLog looks only past it.
func (f *reloadFixture) mark() int { return len(f.d.Log()) }

// waitLog waits up to 10 s for a log line written after mark that holds
// every one of parts, and returns it.
func (f *reloadFixture) waitLog(mark int, parts ...string) string {
	f.t.Helper()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		log := f.d.Log()
		if len(log) >= mark {
			for _, line := range strings.Split(log[mark:], "\n") {
				if containsAll(line, parts) {
					return line
				}
			}
		}
		if time.Now().After(end) {
			f.t.Fatalf("no log line with %q after the change; log since:\n%s", parts, log[min(mark, len(log)):])
		}
	}
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// TestE2EConfigReload changes the config file under a running daemon: by
// rewriting it in place, by replacing it with rename (as editors do), and
// with SIGHUP; an invalid file keeps the running config; a key that cannot
// change live is logged as needing a restart.
func TestE2EConfigReload(t *testing.T) {
	f := newReloadFixture(t)
	d := f.d
	f.write("dram: 64MiB\n")
	d.Restart()
	f.waitCapacity("G2", 64<<20, "start")
	f.write("dram: 96MiB\n")
	f.waitCapacity("G2", 96<<20, "file rewritten in place")
	f.replace("dram: 128MiB\n")
	f.waitCapacity("G2", 128<<20, "file replaced by rename")

	m := f.mark()
	f.replace("dram: not-a-size\n")
	f.waitLog(m, "keeping the running config")
	if f.capacity("G2") != 128<<20 {
		t.Fatal("an invalid file changed the running config")
	}

	m = f.mark()
	f.replace("dram: 160MiB\ng4_ttl: 48h\n")
	f.waitCapacity("G2", 160<<20, "replace with a non-reloadable key")
	f.waitLog(m, "need a restart", "g4_ttl")
	// SIGHUP re-reads the file too.
	m = f.mark()
	if err := syscall.Kill(d.PID(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	f.waitLog(m, "SIGHUP: reloading config")
	if _, err := os.Stat(d.Namespace()); err != nil {
		t.Fatalf("mount gone after reloads: %v", err)
	}
}

// TestE2EConfigReloadLive changes the settings that apply live — heat
// thresholds and half-life, G3 watermarks and size — and adds namespaces
// by editing the file. The values are read back from the running daemon:
// G3 capacity from `ctxmemd status --json`, the rest from the "config
// reloaded" log line, which reports what the core and G3 say they run with
// (status has no field for them).
func TestE2EConfigReloadLive(t *testing.T) {
	f := newReloadFixture(t)
	d := f.d
	// conf renders the file: dram 64 MiB plus the given G3 size and,
	// unless empty, the heat and watermark settings with this cold
	// threshold.
	conf := func(g3Size, cold string) string {
		s := "dram: 64MiB\ng3_size: " + g3Size + "\n"
		if cold != "" {
			s += "cold_threshold: " + cold + "\nwarm_threshold: 70\nheat_half_life: 2m\ng3_high: 0.8\ng3_low: 0.6\n"
		}
		return s
	}
	f.write(conf("256MiB", ""))
	d.Restart()
	f.waitCapacity("G3", 256<<20, "start")

	// Heat knobs and G3 watermarks.
	m := f.mark()
	f.replace(conf("256MiB", "25"))
	line := f.waitLog(m, "config reloaded")
	for _, want := range []string{"cold_threshold=25 ", "warm_threshold=70 ", "heat_half_life=2m0s ", "g3_high=0.8 ", "g3_low=0.6 "} {
		if !strings.Contains(line, want) {
			t.Fatalf("reload line lacks %q: %s", want, line)
		}
	}
	if strings.Contains(d.Log()[m:], "need a restart") {
		t.Fatalf("a live change was logged as needing a restart:\n%s", d.Log()[m:])
	}
	f.checkStatusWatermark("G3", 0.8)

	// G3 size: grow, then shrink, live.
	f.replace(conf("512MiB", "25"))
	f.waitCapacity("G3", 512<<20, "grow G3")
	f.replace(conf("128MiB", "25"))
	f.waitCapacity("G3", 128<<20, "shrink G3")

	// A size too small for G3 (one 32 MiB segment under the 0.8
	// watermark) is refused by validation and keeps the whole running
	// config: the heat change made in the same edit is not applied.
	m = f.mark()
	f.replace(conf("40MiB", "20"))
	f.waitLog(m, "keeping the running config", "g3_size: 40MiB holds fewer than two 32MiB segments")
	if c := f.capacity("G3"); c != 128<<20 {
		t.Fatalf("refused g3_size: capacity %d, want 128MiB", c)
	}
	m = f.mark()
	f.replace(strings.Replace(conf("128MiB", "25"), "dram: 64MiB", "dram: 72MiB", 1))
	line = f.waitLog(m, "config reloaded")
	if !strings.Contains(line, "applied=dirty_bytes,dram ") || !strings.Contains(line, "cold_threshold=25 ") || !strings.Contains(line, "g3_size=128MiB ") {
		t.Fatalf("after a refused reload the running values changed: %s", line)
	}
	f.waitCapacity("G2", 72<<20, "dram after a refused reload")
}

// checkStatusWatermark checks the high watermark status reports for tier,
// when status reports one for it.
func (f *reloadFixture) checkStatusWatermark(tier string, want float64) {
	f.t.Helper()
	st, err := f.d.Status(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	var raw struct {
		Tiers []struct {
			Name string   `json:"name"`
			High *float64 `json:"high_watermark"`
		} `json:"tiers"`
	}
	if err := json.Unmarshal(st.Raw, &raw); err != nil {
		f.t.Fatal(err)
	}
	for _, tr := range raw.Tiers {
		if tr.Name == tier && tr.High != nil && *tr.High != want {
			f.t.Fatalf("status: %s high_watermark %v, want %v", tier, *tr.High, want)
		}
	}
}

// TestE2EConfigReloadNamespaces adds a namespace by editing the file: its
// directory appears in the mount at once (even after a failed lookup of
// it), a file written there reads back, also after a restart; an invalid
// namespace keeps the running config; removing one needs a restart; one
// removed at a restart and added back by a reload is served again at
// once with its files.
func TestE2EConfigReloadNamespaces(t *testing.T) {
	f := newReloadFixture(t)
	d := f.d
	// The default namespace declared as the daemon serves it when none is
	// declared (root-owned, 1777, global block size): not a change.
	const base = "dram: 64MiB\ng3_size: 256MiB\nnamespaces:\n  - name: default\n    mode: \"1777\"\n    uid: 0\n    gid: 0\n"
	const extra = "  - name: extra\n    mode: \"0777\"\n    quota: 8MiB\n    block_size: 64KiB\n"
	f.write(base)
	d.Restart()
	dir := filepath.Join(d.Mount, "extra")
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) { // a negative dentry, cached
		t.Fatalf("extra before it is declared: %v", err)
	}

	m := f.mark()
	f.replace(base + extra)
	f.waitLog(m, "config reloaded", "namespaces=default,extra")
	if strings.Contains(d.Log()[m:], "need a restart") {
		t.Fatalf("adding a namespace was logged as needing a restart:\n%s", d.Log()[m:])
	}
	st, err := os.Stat(dir)
	if err != nil || !st.IsDir() || st.Mode().Perm() != 0o777 {
		t.Fatalf("new namespace directory: %v, %v", st, err)
	}
	ents, err := os.ReadDir(d.Mount)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != "default,extra" {
		t.Fatalf("ls %s: %v", d.Mount, names)
	}
	data := bytes.Repeat([]byte("kv-block-"), 100000) // 900 KB
	file := filepath.Join(dir, "seq-0001.kv")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(file); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back from the new namespace: %d bytes, %v", len(got), err)
	}
	if err := os.WriteFile(filepath.Join(dir, "big"), make([]byte, 9<<20), 0o644); !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("write past the new namespace's quota: %v, want EDQUOT", err)
	}
	os.Remove(filepath.Join(dir, "big"))

	// Invalid namespace config: the whole file is refused, so the valid
	// namespace declared with it is not added either.
	m = f.mark()
	f.replace(base + extra + "  - name: third\n  - name: \"bad/name\"\n")
	f.waitLog(m, "keeping the running config", "bad/name")
	time.Sleep(500 * time.Millisecond)
	if _, err := os.Stat(filepath.Join(d.Mount, "third")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a namespace from a refused file was added: %v", err)
	}
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("extra after a refused file: %v", err)
	}

	// Recorded: a restart with the same file serves it with its files.
	f.replace(base + extra)
	d.Restart()
	if got, err := os.ReadFile(file); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("after restart: %d bytes, %v", len(got), err)
	}

	// Removing a namespace needs a restart: it stays served meanwhile.
	m = f.mark()
	f.replace(base)
	f.waitLog(m, "need a restart", "namespaces[extra] (removed)")
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("removed namespace no longer served before a restart: %v", err)
	}

	// Removed at a restart, then added back by a reload (a new user's
	// run: it needed a second restart to appear): served at once, with
	// the files it had, and its quota usage.
	d.Restart()
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("extra served after a restart without it: %v", err)
	}
	m = f.mark()
	f.replace(base + extra)
	f.waitLog(m, "config reloaded", "namespaces=default,extra")
	if strings.Contains(d.Log()[m:], "need a restart") {
		t.Fatalf("adding a namespace back was logged as needing a restart:\n%s", d.Log()[m:])
	}
	if got, err := os.ReadFile(file); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("file of a namespace added back: %d bytes, %v", len(got), err)
	}
	if err := os.WriteFile(filepath.Join(dir, "big"), make([]byte, 7<<20+512<<10), 0o644); !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("write past the quota of a namespace added back, its file counted: %v, want EDQUOT", err)
	}
}
