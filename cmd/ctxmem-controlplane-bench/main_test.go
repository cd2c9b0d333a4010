package main

import (
	"bytes"
	"context"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain lets the test binary act as the scheduler child process
// (startSchedProc runs os.Executable() with "-role scheduler -url URL").
func TestMain(m *testing.M) {
	if len(os.Args) == 5 && os.Args[1] == "-role" && os.Args[2] == "scheduler" && os.Args[3] == "-url" {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() { // ends with the process
			sig := make(chan os.Signal, 1)
			signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
			<-sig
			cancel()
		}()
		if err := runSchedulerChild(ctx, os.Args[4], os.Stdout); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestBenchSmall runs both parts at a tiny size: the program works end
// to end (the full size runs in make bench), sinks flow and the report
// has its lists.
func TestBenchSmall(t *testing.T) {
	o, err := parseFlags([]string{"-hosts", "2", "-objects", "20", "-churn", "3", "-intervals", "200ms",
		"-warmup", "500ms", "-duration", "1500ms", "-report-objects", "3000", "-report-rounds", "5", "-dir", t.TempDir()}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tab, err := run(ctx, o, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Logf("\n%s", out.String())
	if len(tab.loop) != 1 || tab.report == nil {
		t.Fatalf("table %+v", tab)
	}
	l, r := tab.loop[0], tab.report
	if l.ReportsPS <= 0 || l.CommandsPS <= 0 || l.AcksPS <= 0 || l.AppliedPS <= 0 || l.SeenHosts != 2 || l.Burst <= 0 {
		t.Errorf("control loop row %+v: want reports, commands, acks and applied commands flowing", l)
	}
	if r.Tracked != 3000 || r.Hot != 64 || r.Cold != 256 || r.ReportBytes == 0 || r.BuildCPU <= 0 && r.BuildP50 <= 0 {
		t.Errorf("report cost %+v", r)
	}
	for _, want := range []string{"Control loop:", "Report cost: one host tracking 3000 files", "BuildReport + encode",
		"64 hot + 256 cold objects", "initial burst"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

func TestParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"-intervals", "1s, 50ms"}, os.Stderr)
	if err != nil || len(o.intervals) != 2 || o.intervals[1] != 50*time.Millisecond || o.hosts != 64 || o.reportObjects != 1_000_000 {
		t.Fatalf("%+v %v", o, err)
	}
	for _, bad := range [][]string{{"-intervals", "5ms"}, {"-intervals", "x"}, {"-hosts", "0"}} {
		if _, err := parseFlags(bad, &bytes.Buffer{}); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

func TestPidCPU(t *testing.T) {
	end := time.Now().Add(50 * time.Millisecond)
	for time.Now().Before(end) { // burn a little CPU
	}
	d, err := pidCPU(os.Getpid())
	if err != nil || d <= 0 {
		t.Fatalf("pidCPU(self) = %v, %v", d, err)
	}
	if p := processCPU(); p < d-20*time.Millisecond {
		t.Fatalf("getrusage %v < /proc %v", p, d)
	}
}
