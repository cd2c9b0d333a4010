package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// table is the benchmark's output.
type table struct {
	loop   []loopRow
	report *reportResult
}

func (t *table) print(w io.Writer, o options) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	if len(t.loop) > 0 {
		fmt.Fprintf(w, "Control loop: 1 scheduler (own process), %d hosts x %d files of 4 KiB, %d new files and %d re-reads "+
			"per host per second, heat half-life %s, sink grace %s, NATS: %s\n", o.hosts, o.objects, o.churn, loopReads,
			loopHalfLife, loopGrace, t.loop[0].Server)
		fmt.Fprintln(tw, "interval\toffered rep/s\ttelemetry in/s\tprocessed/s\tbacklog\treports/s\tevents/s\t"+
			"commands/s\tacks/s\tapplied/s\tpending\thosts\tscheduler CPU\tserver CPU\thosts CPU\t")
		for _, r := range t.loop {
			srv := "(in hosts)"
			if r.ServerCPUPct >= 0 {
				srv = fmt.Sprintf("%.0f%%", r.ServerCPUPct)
			}
			fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.0f\t%d\t%.1f\t%.0f\t%.1f\t%.1f\t%.1f\t%d\t%d\t%.0f%%\t%s\t%.0f%%\t\n",
				r.Interval, r.OfferedRps, r.TelemetryPS, r.ConsumedPS, r.BacklogEnd, r.ReportsPS, r.EventsPS,
				r.CommandsPS, r.AcksPS, r.AppliedPS, r.PendingEnd, r.SeenHosts, r.SchedCPUPct, srv, r.HostsCPUPct)
		}
		_ = tw.Flush()
		for _, r := range t.loop {
			burst := "not drained within " + burstLimit.String()
			if r.Burst >= 0 {
				burst = fmt.Sprintf("%d commands applied in %s (%.0f/s)", r.Hosts*o.objects, r.Burst.Round(100*time.Millisecond),
					float64(r.Hosts*o.objects)/r.Burst.Seconds())
			}
			fmt.Fprintf(w, "  %s: initial burst (every file cold at once): %s; window %s; acks %s; malformed %d; "+
				"telemetry dropped by hosts %d\n", r.Interval, burst, r.Window.Round(100*time.Millisecond), r.AckMix,
				r.Malformed, r.DroppedHosts)
		}
		fmt.Fprintln(w, "  (CPU in % of one core; rates per second over the window; backlog and pending at its end)")
	}
	if r := t.report; r != nil {
		if len(t.loop) > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "Report cost: one host tracking %d files (1 block each; tracked %d), %d touched between reports, "+
			"%d reports per row\n", r.Objects, r.Tracked, r.Touched, r.Rounds)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "work per report\tprocess CPU\tthread CPU\twall p50\twall p99\t% of a core at 1 s\tgoal\t")
		fmt.Fprintf(tw, "BuildReport + encode\t%s\t%s\t%s\t%s\t%.3f%%\t< 2%%\t\n", us(r.BuildCPU), us(r.BuildThr),
			us(r.BuildP50), us(r.BuildP99), pct(r.BuildCPU, time.Second))
		fmt.Fprintf(tw, "+ liveness Put + JetStream publish\t%s\t-\t%s\t%s\t%.3f%%\t\t\n", us(r.PubCPU),
			us(r.PubP50), us(r.PubP99), pct(r.PubCPU, time.Second))
		fmt.Fprintf(tw, "(data path) %d Accessed calls between reports\t-\t%s\t-\t-\t%.3f%%\t\t\n", r.Touched, us(r.TouchCPU),
			pct(r.TouchCPU, time.Second))
		_ = tw.Flush()
		fmt.Fprintf(w, "report: %d hot + %d cold objects, %d bytes msgpack, %d bytes allocated per build+encode; "+
			"idle process before: %.1f%% of a core; setup %s; RSS %d MiB\n",
			r.Hot, r.Cold, r.ReportBytes, r.AllocPerReport, r.IdlePct, r.Setup.Round(100*time.Millisecond), r.RSSMiB)
		fmt.Fprintln(w, "(publish row: the NATS server runs in this process, so its CPU is included)")
	}
}

// us renders d in microseconds.
func us(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond)) }
