// Command ctxmem-controlplane-bench measures ctxmemd's control plane (issue 5) and prints one
// table:
//
//  1. Control loop under load: one scheduler replica against a real NATS
//     server (the nats-server binary when it is on PATH, else the embedded
//     server with a loopback listener) and -hosts simulated hosts. Each
//     host is an in-process sidecar.Agent over its own tiering.Store (small
//     G2, local-directory G4) with -objects files of one 4 KiB block, its
//     own NATS connection, and a driver that every report interval writes
//     new files, deletes the oldest and re-reads a few (so cold files keep
//     appearing and sink commands keep flowing: heat half-life 200 ms,
//     sink grace 500 ms). Every initial file turns cold at once: the time
//     the hosts take to apply that burst of sinks is reported, and the
//     window starts after it. The scheduler runs in a child process (this
//     program with -role scheduler) so that its CPU is measured on its
//     own. Measured over -duration after a warm-up: telemetry messages/s
//     stored and delivered to the scheduler and the backlog left,
//     reports/s the scheduler processed (Stats().Reports), commands/s it
//     sent, acks/s it got back (by status), commands/s the hosts applied,
//     and the CPU of the scheduler, the NATS server and the hosts.
//
//  2. Report cost on a big host: one Agent over a tiering.Store tracking
//     -report-objects files of one 4 KiB block (1 byte written each; G2
//     64 MiB, the rest in a G3 directory), 1 % of them touched between
//     reports. Measured over -report-rounds reports: process CPU
//     (getrusage RUSAGE_SELF) of Agent.BuildReport + msgpack encode, and of
//     build + encode + JetStream publish to an in-process NATS server, as
//     % of one core at a 1 s report interval (goal < 2 %).
//
// Usage (make bench runs the first form):
//
//	go run ./cmd/ctxmem-controlplane-bench       # full run (~3 min)
//	go run ./cmd/ctxmem-controlplane-bench -hosts 4 -duration 3s -report-objects 20000
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// options are the command-line settings.
type options struct {
	hosts          int
	objects        int
	intervals      []time.Duration
	duration       time.Duration
	warmup         time.Duration
	churn          int
	natsServer     string // path of the nats-server binary, "" = embedded
	reportObjects  int
	reportRounds   int
	reportTouchPct float64
	dir            string
	skipLoop       bool
	skipReport     bool
	role, url      string // internal: "-role scheduler -url URL" runs the scheduler child
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	var intervals string
	fs.IntVar(&o.hosts, "hosts", 64, "simulated hosts")
	fs.IntVar(&o.objects, "objects", 300, "files per simulated host")
	fs.StringVar(&intervals, "intervals", "1s,200ms", "report intervals to run, comma-separated (one table row each)")
	fs.DurationVar(&o.duration, "duration", 20*time.Second, "measurement window per interval")
	fs.DurationVar(&o.warmup, "warmup", 5*time.Second, "settling time before each window, after the initial burst of sinks is drained")
	fs.IntVar(&o.churn, "churn", 5, "new files per host per second (the oldest are deleted)")
	fs.StringVar(&o.natsServer, "nats-server", "auto", "nats-server binary: auto (from PATH, else embedded), embedded, or a path")
	fs.IntVar(&o.reportObjects, "report-objects", 1_000_000, "files tracked by the big host")
	fs.IntVar(&o.reportRounds, "report-rounds", 100, "reports measured on the big host")
	fs.Float64Var(&o.reportTouchPct, "report-touch", 1, "percent of the big host's files touched between reports")
	fs.StringVar(&o.dir, "dir", "", "scratch directory (default: a new one under $TMPDIR, removed at exit)")
	fs.BoolVar(&o.skipLoop, "skip-loop", false, "skip the control-loop part")
	fs.BoolVar(&o.skipReport, "skip-report", false, "skip the big-host report part")
	fs.StringVar(&o.role, "role", "", "internal: scheduler = run the scheduler child process")
	fs.StringVar(&o.url, "url", "", "internal: NATS URL of the scheduler child")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	for _, s := range strings.Split(intervals, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil || d < 10*time.Millisecond {
			return o, fmt.Errorf("-intervals: %q is not a duration of at least 10ms", s)
		}
		o.intervals = append(o.intervals, d)
	}
	if o.hosts < 1 || o.objects < 1 || o.reportObjects < 1 || o.reportRounds < 1 || o.churn < 0 {
		return o, fmt.Errorf("-hosts, -objects, -report-objects and -report-rounds must be positive")
	}
	return o, nil
}

func main() {
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if o.role == "scheduler" {
		if err := runSchedulerChild(ctx, o.url, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "bench scheduler:", err)
			os.Exit(1)
		}
		return
	}
	if _, err := run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// run runs the selected parts, prints the table to w and returns it.
func run(ctx context.Context, o options, w io.Writer) (*table, error) {
	dir := o.dir
	if dir == "" {
		d, err := os.MkdirTemp("", "ctxmem-cp-bench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var t table
	if !o.skipLoop {
		for _, iv := range o.intervals {
			row, err := runLoop(ctx, o, iv, dir, log)
			if err != nil {
				return nil, fmt.Errorf("control loop at %s: %w", iv, err)
			}
			t.loop = append(t.loop, row)
		}
	}
	if !o.skipReport {
		r, err := runReportCost(ctx, o, dir, log)
		if err != nil {
			return nil, fmt.Errorf("report cost: %w", err)
		}
		t.report = &r
	}
	t.print(w, o)
	return &t, nil
}
