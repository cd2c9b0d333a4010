package tests

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/tests/harness"
)

// TestE2EConfigReload changes the config file under a running daemon: by
// rewriting it in place, by replacing it with rename (as editors do), and
// with SIGHUP; an invalid file keeps the running config; a key that cannot
// change live is logged as needing a restart.
func TestE2EConfigReload(t *testing.T) {
	bin := needE2E(t)
	d := harness.Start(t, bin, harness.Options{G3Size: "256MiB"}) // dram from the file below
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(d.Config, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	replace := func(body string) {
		t.Helper()
		tmp := filepath.Join(filepath.Dir(d.Config), ".ctxmemd.yaml.swp")
		if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, d.Config); err != nil {
			t.Fatal(err)
		}
	}
	g2 := func() int64 {
		st, err := d.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		g, _ := st.Tier("G2")
		return g.CapacityBytes
	}
	waitG2 := func(want int64, how string) {
		t.Helper()
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			if g2() == want {
				return
			}
		}
		t.Fatalf("%s: G2 capacity %d, want %d", how, g2(), want)
	}
	// The harness passes --dram only when asked, so the file decides it.
	write("dram: 64MiB\n")
	d.Restart()
	waitG2(64<<20, "start")
	write("dram: 96MiB\n")
	waitG2(96<<20, "file rewritten in place")
	replace("dram: 128MiB\n")
	waitG2(128<<20, "file replaced by rename")

	replace("dram: not-a-size\n")
	time.Sleep(time.Second)
	if g2() != 128<<20 {
		t.Fatal("an invalid file changed the running config")
	}
	if !strings.Contains(d.Log(), "keeping the running config") {
		t.Fatal("an invalid file was not reported")
	}

	replace("dram: 160MiB\nheat_half_life: 2m\n")
	waitG2(160<<20, "replace with a non-reloadable key")
	if !strings.Contains(d.Log(), "need a restart") || !strings.Contains(d.Log(), "heat_half_life") {
		t.Fatal("a non-reloadable change was not logged as needing a restart")
	}
	// SIGHUP re-reads the file too.
	if err := syscall.Kill(d.PID(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(5 * time.Second); !strings.Contains(d.Log(), "SIGHUP: reloading config"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("SIGHUP did not reload")
		}
	}
	if _, err := os.Stat(d.Namespace()); err != nil {
		t.Fatalf("mount gone after reloads: %v", err)
	}
}
