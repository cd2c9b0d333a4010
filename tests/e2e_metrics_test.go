package tests

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/tests/harness"

	"github.com/ctxmem/ctxmemd/internal/testenv"
)

// TestE2EMetricsServed scrapes a running daemon's /metrics after file and
// NBD traffic (issue 16 items 4 and 5): the hit ratio and per-namespace
// lookups agree with ctxmemd status, the FUSE and NBD latency histograms
// and NBD counters have counted the requests, and the control plane
// reports itself connected.
func TestE2EMetricsServed(t *testing.T) {
	bin := needE2E(t)
	testenv.RequireTool(t, "nbdcopy", "Debian: libnbd-bin")
	sock := filepath.Join(t.TempDir(), "nbd.sock")
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	url := "http://" + addr + "/metrics"
	d := harness.Start(t, bin, harness.Options{DRAM: "64MiB", G3Size: "256MiB",
		Extra: []string{"--nbd", "unix://" + sock, "--nbd-size", "16MiB", "--metrics", addr}})
	ns := d.Namespace()
	for i := range 4 {
		if err := os.WriteFile(filepath.Join(ns, fmt.Sprint("kv", i)), make([]byte, 300<<10), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		if _, err := os.ReadFile(filepath.Join(ns, fmt.Sprint("kv", i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		if _, err := os.Stat(filepath.Join(ns, fmt.Sprint("missing", i))); !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	waitSocket(t, sock)
	src := filepath.Join(t.TempDir(), "src")
	data := make([]byte, 16<<20)
	rand.Read(data) // zeros would go as WRITE_ZEROES, or not at all
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("nbdcopy", "--flush", src, "nbd+unix:///default?socket="+sock).CombinedOutput(); err != nil {
		t.Fatalf("nbdcopy: %v\n%s", err, out)
	}

	num := func(series string) float64 {
		t.Helper()
		v := metricValue(t, url, series)
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Errorf("%s = %q", series, v)
		}
		return f
	}
	st, err := d.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	l := st.Lookups
	if l.Misses != 2 || l.HitTotal() != 3 {
		t.Errorf("status lookups %+v, want 3 hits and 2 misses", l)
	}
	if got := num(`ctxmem_lookup_misses_total{namespace="default"}`); got != float64(l.Misses) {
		t.Errorf("lookup misses metric %v, status %d", got, l.Misses)
	}
	if got := num(`ctxmem_hit_ratio{kind="found_in_any_tier"}`); got != l.FoundInAnyTier() {
		t.Errorf("found_in_any_tier %v, status %v", got, l.FoundInAnyTier())
	}
	if got := num(`ctxmem_hit_ratio{kind="served_from_g2"}`); got != l.ServedFromG2() {
		t.Errorf("served_from_g2 %v, status %v", got, l.ServedFromG2())
	}
	if got := num(`ctxmem_namespace_objects{namespace="default"}`); got != 4 {
		t.Errorf("namespace objects %v, want 4", got)
	}
	if got := num(`ctxmem_namespace_bytes{namespace="default"}`); got != 4*300<<10 {
		t.Errorf("namespace bytes %v, want %d (the four files; the NBD export is not a file)", got, 4*300<<10)
	}
	if num(`ctxmem_fuse_request_duration_seconds_count{op="create"}`) < 4 || num(`ctxmem_fuse_request_duration_seconds_count{op="lookup"}`) < 2 {
		t.Error("FUSE latency histogram did not count the creates and lookups")
	}
	if num(`ctxmem_nbd_request_duration_seconds_count{op="write"}`) < 1 || num(`ctxmem_nbd_request_duration_seconds_count{op="flush"}`) < 1 {
		t.Error("NBD latency histogram did not count the writes and flush")
	}
	if num(`ctxmem_nbd_bytes_total{direction="write"}`) != 16<<20 || num(`ctxmem_nbd_connections_total`) < 1 {
		t.Error("NBD counters")
	}
	deadline := time.Now().Add(20 * time.Second)
	for num(`ctxmem_control_connected`) != 1 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	if num(`ctxmem_control_connected`) != 1 {
		t.Error("control plane not connected")
	}
}
