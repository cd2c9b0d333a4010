package tests

// End-to-end test of a daemon restart during an object-store outage
// (issue 11 item 2): the daemon must mount and serve G2/G3 with G4
// degraded, and recover G4's blocks in the background once S3 answers.
//
//	CTXMEM_E2E=1 CTXMEM_REQUIRE_TOOLS=1 go test -count=1 -run 'TestE2ES3RestartDuringOutage' -v ./tests/

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	osexec "os/exec"

	"github.com/ctxmem/ctxmemd/internal/testenv"
	"github.com/ctxmem/ctxmemd/tests/harness"
)

// metricValue scrapes url and returns the value of the sample whose line
// starts with series (name{labels}), or "" if absent.
func metricValue(t *testing.T, url, series string) string {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Errorf("scrape %s: %v", url, err)
		return ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// TestE2ES3RestartDuringOutage: files are written with S3 up, some so that
// they end up in G4 only (G3 disabled, G2 overrun), some into G3 (a later
// start with G3 enabled); the daemon is stopped, the S3 server is stopped,
// and the daemon is started again. It must mount; G3 files read back
// byte-exact; a G4-only file fails with EIO within a bound (never ENOENT,
// never wrong bytes) and is not dropped; new files can be written and
// fsynced (to G3); status and metrics show G4 degraded and recovering.
// Then the S3 server is started again on the same port and directory:
// within a bound the G4-only files read back byte-exact, without a
// restart, and status and metrics show G4 ok.
func TestE2ES3RestartDuringOutage(t *testing.T) {
	srv, d := startS3Daemon(t, "16MiB")
	ns := d.Namespace()
	var cold []s3File
	for i := range 6 {
		cold = append(cold, s3File{name: fmt.Sprintf("cold %d +%%ü.kv", i), size: 1<<20 + int64(i)*4096})
	}
	for _, f := range cold {
		if err := writePattern(filepath.Join(ns, f.name), f.name, f.size); err != nil {
			t.Fatal(err)
		}
	}
	fillers := pushOutOfG2(t, ns, 5, func() bool { return allG4(ns, cold) })
	if !allG4(ns, cold) {
		t.Fatalf("the cold files are not G4-only after %d filler files", len(fillers))
	}
	if err := d.Stop(); err != nil {
		t.Fatalf("%v\n%s", err, d.Log())
	}

	// Second start, S3 up, with G3: the hot files go to G3.
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	metricsURL := "http://" + metricsAddr + "/metrics"
	d.SetOptions(harness.Options{DRAM: "16MiB", G3Size: "256MiB", G4: s3URL(srv, srv.Bucket, s3Prefix),
		Extra: []string{"--metrics", metricsAddr}, MountTimeout: 60 * time.Second})
	d.StartAgain()
	hot := []s3File{{"hot 1 +%.kv", 700 << 10}, {"hot 2 ü.kv", 2 << 20}}
	for _, f := range hot {
		if err := writePattern(filepath.Join(ns, f.name), f.name, f.size); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Stop(); err != nil {
		t.Fatalf("%v\n%s", err, d.Log())
	}

	// Third start, S3 down.
	srv.Stop()
	start := time.Now()
	d.StartAgain()
	t.Logf("mounted %v after the start with S3 down", time.Since(start).Round(time.Millisecond))
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("start with S3 down took %v, want < 30 s", took)
	}
	st, err := d.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if g4, ok := st.Tier("G4"); !ok || !g4.Degraded || !g4.Recovering {
		t.Errorf("status with S3 down at start: G4 %+v; want degraded and recovering", g4)
	}
	if v := metricValue(t, metricsURL, `ctxmem_tier_degraded{tier="G4"}`); v != "1" {
		t.Errorf("ctxmem_tier_degraded{tier=\"G4\"} = %q during the outage, want 1", v)
	}
	if v := metricValue(t, metricsURL, `ctxmem_tier_recovering{tier="G4"}`); v != "1" {
		t.Errorf("ctxmem_tier_recovering{tier=\"G4\"} = %q during the outage, want 1", v)
	}
	out, err := ctxmemdCmd(d, "status")
	t.Logf("ctxmemd status during the outage:\n%s", out)
	if err != nil || !strings.Contains(out, "listing pending") {
		t.Errorf("ctxmemd status (text) does not say G4's listing is pending: %v", err)
	}
	ents, err := os.ReadDir(ns)
	if err != nil || len(ents) != len(cold)+len(fillers)+len(hot) {
		t.Fatalf("readdir during the outage: %d entries (want %d), %v", len(ents), len(cold)+len(fillers)+len(hot), err)
	}
	for _, f := range hot {
		r := timedRead(maxFailTime, func() ([]byte, error) { return readDirect(filepath.Join(ns, f.name)) })
		if r.hung || r.err != nil {
			t.Fatalf("G3 file %q with S3 down: %v (hung %v)", f.name, r.err, r.hung)
		}
		if what := checkPattern(r.data, f.name, f.size); what != "" {
			t.Fatalf("G3 file %q with S3 down: %s", f.name, what)
		}
		tiers, _ := blockTiers(filepath.Join(ns, f.name))
		t.Logf("G3 file %q reads back byte-exact with S3 down (tiers %v)", f.name, tiers)
	}
	for _, f := range cold[:3] {
		r := timedRead(2*maxFailTime, func() ([]byte, error) { return readDirect(filepath.Join(ns, f.name)) })
		switch {
		case r.hung:
			t.Fatalf("read of G4-only %q with S3 down hangs (> %v)", f.name, 2*maxFailTime)
		case r.err == nil:
			t.Fatalf("read of G4-only %q with S3 down succeeded (%s)", f.name, checkPattern(r.data, f.name, f.size))
		case !errors.Is(r.err, unix.EIO):
			t.Fatalf("read of G4-only %q with S3 down: %v, want EIO", f.name, r.err)
		case r.took > maxFailTime:
			t.Errorf("read of G4-only %q took %v to fail, want < %v", f.name, r.took, maxFailTime)
		}
		t.Logf("G4-only %q with S3 down: %v in %v", f.name, r.err, r.took.Round(time.Millisecond))
		if _, err := os.Stat(filepath.Join(ns, f.name)); err != nil {
			t.Fatalf("G4-only %q dropped after a failed read during the outage: %v", f.name, err)
		}
	}
	nf := s3File{"written during the outage.kv", 1 << 20}
	if err := writePattern(filepath.Join(ns, nf.name), nf.name, nf.size); err != nil {
		t.Fatalf("write+fsync of a new file with S3 down (G3 is up): %v", err)
	}

	// S3 back on the same port and directory: the G4-only files come back.
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	ok := testenv.Poll(90*time.Second, func() bool {
		st, err := d.Status(context.Background())
		g4, _ := st.Tier("G4")
		return err == nil && !g4.Degraded && !g4.Recovering
	})
	t.Logf("G4 ok in status %v after S3 came back", time.Since(back).Round(time.Millisecond))
	if !ok {
		t.Fatalf("G4 still degraded 90 s after S3 came back\n%s", tail(d.Log(), 4000))
	}
	for _, f := range append(append(append([]s3File{}, cold...), hot...), nf) {
		r := timedRead(60*time.Second, func() ([]byte, error) { return readDirect(filepath.Join(ns, f.name)) })
		if r.hung || r.err != nil {
			t.Fatalf("S3 back: %q: %v (hung %v)", f.name, r.err, r.hung)
		}
		if what := checkPattern(r.data, f.name, f.size); what != "" {
			t.Fatalf("S3 back: %q: WRONG BYTES: %s", f.name, what)
		}
	}
	t.Logf("S3 back: %d files read back byte-exact, %v after S3 came back", len(cold)+len(hot)+1, time.Since(back).Round(time.Millisecond))
	if v := metricValue(t, metricsURL, `ctxmem_tier_degraded{tier="G4"}`); v != "0" {
		t.Errorf("ctxmem_tier_degraded{tier=\"G4\"} = %q after recovery, want 0", v)
	}
	if v := metricValue(t, metricsURL, `ctxmem_tier_recovering{tier="G4"}`); v != "0" {
		t.Errorf("ctxmem_tier_recovering{tier=\"G4\"} = %q after recovery, want 0", v)
	}
	st, _ = d.Status(context.Background())
	if n := statCounter(t, st, "objects_lost", ""); n != 0 {
		t.Errorf("%d objects lost across the outage", n)
	}
	log := d.Log()
	if n := strings.Count(log, "G4 listing still failing"); n > 2 {
		t.Errorf("the background listing logged %d failure lines; want one per state change", n)
	}
	if strings.Contains(log, "panic:") {
		t.Fatal("daemon log shows a panic")
	}
}

// ctxmemdCmd runs `ctxmemd <args> --admin <socket>` and returns its output.
func ctxmemdCmd(d *harness.Daemon, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	out, err := osexec.CommandContext(ctx, d.Binary(), append(args, "--admin", d.Admin)...).CombinedOutput()
	return string(out), err
}
