package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ctxmem/ctxmemd/admin"
	"github.com/ctxmem/ctxmemd/config"
	"github.com/ctxmem/ctxmemd/hitratio"
	"github.com/ctxmem/ctxmemd/tiering"
)

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show a running daemon's tiers, hit ratios and counters",
		Description: "Connects to the admin socket: --admin, else admin/data_dir from the same flags, " +
			"environment and config file `run` uses.",
		Flags: []cli.Flag{
			config.ConfigFileFlag(),
			&cli.StringFlag{Name: "admin", Usage: "admin socket path [$CTXMEM_ADMIN]", DefaultText: "<data_dir>/admin.sock"},
			&cli.StringFlag{Name: "data-dir", Usage: "data directory of the daemon [$CTXMEM_DATA_DIR]", DefaultText: "./" + config.DevRoot + "/data"},
			&cli.BoolFlag{Name: "json", Usage: "print the status as one JSON object"},
			&cli.BoolFlag{Name: "cluster", Usage: "show every host of the cluster, its tiers, and the scheduler leader"},
		},
		Action: func(c *cli.Context) error {
			sock := c.String("admin")
			if sock == "" {
				cfg, err := config.FromCLI(c)
				if err != nil {
					return withCode(exitUsage, err)
				}
				sock = cfg.Admin
			}
			cl := admin.NewClient(sock)
			defer cl.Close()
			if c.Bool("cluster") {
				return clusterStatus(c.Context, c, cl)
			}
			st, err := cl.Status(c.Context)
			if errors.Is(err, admin.ErrPermission) {
				return withCode(exitUsage, err)
			}
			if errors.Is(err, admin.ErrNotRunning) {
				return withCode(exitNotRunning, fmt.Errorf("%w (is ctxmemd running? use --admin or --data-dir)", err))
			}
			if err != nil {
				return withCode(exitFailure, err)
			}
			if c.Bool("json") {
				enc := json.NewEncoder(c.App.Writer)
				enc.SetIndent("", "  ")
				return enc.Encode(st)
			}
			return writeStatus(c.App.Writer, st)
		},
	}
}

// tierState is a tier's STATE column: its health as `status --json`
// reports it (health, health_reason): up, DEGRADED, DOWN or BYPASSED with
// the reason, FULL for a tier degraded by a full device; DEGRADED too while
// a tier is recovering or its backend reports itself unhealthy (degraded
// with health up). G2, which has no health machine, is "ok".
func tierState(t tiering.TierUsage) string {
	switch {
	case t.Recovering:
		return "DEGRADED (started during an outage: listing pending; blocks only here read as EIO)"
	case t.Health == "bypassed":
		return fmt.Sprintf("BYPASSED (%s; not used until the bypass is lifted)", t.HealthReason)
	case t.Health == "down":
		return fmt.Sprintf("DOWN (%s; not used until a probe succeeds)", t.HealthReason)
	case t.Health == "degraded" && t.Full && (t.HealthReason == "full" || t.HealthReason == ""):
		return "FULL (health degraded: no space for new blocks)"
	case t.Health == "degraded":
		state := fmt.Sprintf("DEGRADED (%s)", t.HealthReason)
		if t.Full {
			state += "; FULL (no space for new blocks)"
		}
		return state
	case t.Degraded:
		return "DEGRADED (backend not answering)"
	case t.Full:
		return "FULL (no space for new blocks)"
	case t.Health != "":
		return t.Health
	}
	return "ok"
}

// writeStatus prints st as human tables.
func writeStatus(w io.Writer, st admin.Status) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	up := time.Duration(st.UptimeSeconds * float64(time.Second)).Round(time.Second)
	fmt.Fprintf(tw, "ctxmemd %s\tpid %d, up %s\n", st.Version, st.PID, up)
	fmt.Fprintf(tw, "mount\t%s\n", st.Mount)
	fmt.Fprintf(tw, "data dir\t%s\n\n", st.DataDir)
	fmt.Fprintln(tw, "TIER\tUSED\tCAPACITY\tUSE\tBLOCKS\tSTATE")
	for _, t := range st.Tiers {
		capTxt, use := "unbounded", "-"
		if t.CapacityBytes > 0 {
			capTxt = config.HumanSize(t.CapacityBytes)
			use = fmt.Sprintf("%.1f%%", 100*float64(t.UsedBytes)/float64(t.CapacityBytes))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", t.Name, config.HumanSize(t.UsedBytes), capTxt, use, t.Blocks, tierState(t))
	}
	s := st.Stats
	if s.Degraded != "" {
		fmt.Fprintf(tw, "\nstore\tDEGRADED: %s\n", s.Degraded)
	}
	l := st.Lookups
	fmt.Fprintln(tw)
	fmt.Fprintf(tw, "hit ratio\t%s %.1f%%, %s %.1f%% (of %d lookups: hits %s; misses %d)\n",
		hitratio.LabelG2, 100*l.ServedFromG2(), hitratio.LabelAny, 100*l.FoundInAnyTier(), l.Lookups(), tierCounts(l.Hits), l.Misses)
	fmt.Fprintf(tw, "blocks read\t%d by tier: %s; %d found in no tier (lost)\n", s.BlockReads, joinCounts(s.BlockHits), s.BlockMisses)
	if len(st.RestoreCost) > 0 {
		var parts []string
		for _, t := range hitratio.Tiers()[1:] {
			if c, ok := st.RestoreCost[t]; ok {
				note := ""
				if c.Samples == 0 {
					note = " (default)"
				}
				parts = append(parts, fmt.Sprintf("%s %v%s", t, c.BlockRead.Round(time.Microsecond), note))
			}
		}
		fmt.Fprintf(tw, "restore cost\tper block read: %s\n", strings.Join(parts, ", "))
	}
	if st.G4Lifecycle != "" {
		fmt.Fprintf(tw, "G4 lifecycle\t%s\n", st.G4Lifecycle)
	}
	fmt.Fprintf(tw, "dirty\t%s of %s (writer waits %d)\n", config.HumanSize(s.DirtyBytes), config.HumanSize(s.DirtyLimitBytes), s.WriterWaits)
	fmt.Fprintf(tw, "evictions\t%s\n", joinCounts(s.Evictions))
	fmt.Fprintf(tw, "demotions\t%s; promotions %d\n", joinCounts(s.Demotions), s.Promotions)
	if s.G4RunReads > 0 {
		fmt.Fprintf(tw, "G4 run reads\t%d (%d blocks brought up beside the one asked for)\n", s.G4RunReads, s.G4RunBlocks)
	}
	if s.Prestaged > 0 {
		useful := 100 * float64(s.PrestageUseful) / float64(s.Prestaged)
		demand := max(s.Promotions-s.Prestaged, 0)
		coverage := 100 * float64(s.PrestageUseful) / float64(max(s.PrestageUseful+demand, 1))
		fmt.Fprintf(tw, "prestage\t%d blocks (%s) brought up: %d read (%.1f%% useful), %d left G2 unread (%s wasted); coverage %.1f%% of lower-tier reads\n",
			s.Prestaged, config.HumanSize(s.PrestagedBytes), s.PrestageUseful, useful, s.PrestageWasted,
			config.HumanSize(s.PrestageWastedBytes), coverage)
	}
	fmt.Fprintf(tw, "admissions refused\t%d; dropped %s\n", s.AdmissionsDenied, joinCounts(s.Dropped))
	fmt.Fprintf(tw, "CRC errors\t%d\n", s.CRCErrors)
	if s.G3PutBytes > 0 {
		fmt.Fprintf(tw, "G3 compaction\t%d blocks (%s) copied forward for %s put; write amplification %.2f\n", s.G3CompactedBlocks,
			config.HumanSize(s.G3CompactedBytes), config.HumanSize(s.G3PutBytes), float64(s.G3PutBytes+s.G3CompactedBytes)/float64(s.G3PutBytes))
	}
	fmt.Fprintf(tw, "garbage\t%d block copies queued for deletion (%d deleted, %d failed attempts retried)\n", s.GCPending, s.GCDeleted, s.GCFailed)
	if p := st.Passthrough; p.On {
		fmt.Fprintf(tw, "passthrough\ton: %d opens served from memory files (%d objects have one, %d open now); daemon served READ %d, WRITE %d\n",
			s.PassthroughOpens, s.PassthroughObjects, s.PassthroughOpen, p.DaemonReads, p.DaemonWrites)
	} else {
		fmt.Fprintf(tw, "passthrough\toff (%s); daemon served READ %d, WRITE %d\n", p.Reason, p.DaemonReads, p.DaemonWrites)
	}
	if k := st.KernelEntries; k.Limit > 0 {
		fmt.Fprintf(tw, "kernel entries\t%d files looked up (bound %d); %d invalidated, %d forgotten since mount\n", k.Files, k.Limit, k.Invalidated, k.Forgotten)
	} else {
		fmt.Fprintf(tw, "kernel entries\t%d files looked up (no bound); %d forgotten since mount\n", k.Files, k.Forgotten)
	}
	fmt.Fprintf(tw, "objects\t%d (%d lost since start)\n", s.Objects, s.ObjectsLost)
	if len(st.Namespaces) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "NAMESPACE\tOBJECTS\tBYTES\tBLOCK\tQUOTA\tLOOKUPS\tG2\tANY TIER\tMODEL")
		for _, n := range st.Namespaces {
			q := "-"
			if n.QuotaBytes > 0 {
				q = config.HumanSize(n.QuotaBytes)
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%d\t%.1f%%\t%.1f%%\t%s\n", n.Name, n.Objects, config.HumanSize(n.Bytes),
				config.FormatSize(int64(n.BlockSize)), q, n.Lookups.Lookups(), 100*n.Lookups.ServedFromG2(),
				100*n.Lookups.FoundInAnyTier(), n.ModelID)
		}
		for _, n := range st.Namespaces {
			if n.RestoreBudget > 0 {
				avg := time.Duration(0)
				if n.RestoreSkipped > 0 {
					avg = n.RestoreSkippedPredicted / time.Duration(n.RestoreSkipped)
				}
				fmt.Fprintf(tw, "restore budget %s\t%v: %d opens answered as misses (predicted %v on average), prestaged meanwhile\n",
					n.Name, n.RestoreBudget, n.RestoreSkipped, avg.Round(time.Microsecond))
			}
			if n.TokensPerBlock == 0 {
				continue
			}
			saved := ""
			if n.PrefillUsPerToken > 0 {
				saved = fmt.Sprintf(", %.1f s of prefill avoided at %g µs/token", n.PrefillAvoidedS, n.PrefillUsPerToken)
			}
			fmt.Fprintf(tw, "value %s\t%d tokens found (%d per file)%s; upper bounds: prefix order is not seen here\n",
				n.Name, n.TokensFound, n.TokensPerBlock, saved)
		}
	}
	if cs := st.Control; cs != nil {
		conn := "connected"
		if !cs.Connected {
			conn = "DISCONNECTED (serving locally; telemetry buffered)"
		}
		fmt.Fprintf(tw, "\ncontrol plane\tcluster %s, host %s, bus %s, %s\n", cs.Cluster, cs.Host, cs.Bus, conn)
		var sc struct {
			Published  int64 `json:"published_messages"`
			Applied    int64 `json:"commands_applied"`
			Duplicates int64 `json:"commands_duplicate"`
			Failed     int64 `json:"commands_failed"`
			Queued     int   `json:"queued_messages"`
			Dropped    int64 `json:"dropped_messages"`
		}
		if json.Unmarshal(cs.Sidecar, &sc) == nil {
			fmt.Fprintf(tw, "sidecar\t%d messages published, %d queued, %d dropped; commands %d applied, %d duplicate, %d failed\n",
				sc.Published, sc.Queued, sc.Dropped, sc.Applied, sc.Duplicates, sc.Failed)
		}
		var sch struct {
			ID     string `json:"id"`
			Leader bool   `json:"leader"`
		}
		if len(cs.Scheduler) > 0 && json.Unmarshal(cs.Scheduler, &sch) == nil {
			role := "standby"
			if sch.Leader {
				role = "LEADER"
			}
			fmt.Fprintf(tw, "scheduler replica\t%s (%s)\n", sch.ID, role)
		}
	}
	for _, l := range st.Links {
		state := "DOWN"
		if l.Up {
			state = "up"
		}
		fmt.Fprintf(tw, "\nlink %s\t%s (%s) since %s\n", l.Name, state, l.OperState, l.Changed.Format(time.RFC3339))
	}
	return tw.Flush()
}

// joinCounts renders a counter map as "G2 3, G3 1" (sorted), or "0".
// tierCounts lists hit counts in tier order ("G2 5, G3 1, G3.5 0, G4 0").
func tierCounts(m map[string]int64) string {
	var parts []string
	for _, t := range hitratio.Tiers() {
		parts = append(parts, fmt.Sprintf("%s %d", t, m[t]))
	}
	return strings.Join(parts, ", ")
}

func joinCounts(m map[string]int64) string {
	if len(m) == 0 {
		return "0"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
