package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ctxmem/ctxmemd/admin"
	"github.com/ctxmem/ctxmemd/config"
	"github.com/ctxmem/ctxmemd/sidecar/bus"
	"github.com/ctxmem/ctxmemd/sidecar/client"
	"github.com/ctxmem/ctxmemd/sidecar/msg"
	"github.com/ctxmem/ctxmemd/sidecar/scheduler"
)

func schedulerCommand() *cli.Command {
	return &cli.Command{
		Name:  "scheduler",
		Usage: "run a scheduler replica against an existing NATS cluster (--nats URL)",
		Description: "Schedulers are stateless: run as many replicas as wanted; exactly one acts at a time " +
			"(leadership is a JetStream key-value lease). Uses the same options as run: cluster, nats and its " +
			"credentials, cold_threshold, sink_grace, report_interval, log_level.",
		Flags: append(config.Flags(), &cli.StringFlag{Name: "id", Usage: "replica id (default <hostname>-<pid>-<random>)"}),
		Action: func(c *cli.Context) error {
			cfg, err := config.FromCLI(c)
			if err != nil {
				return withCode(exitUsage, err)
			}
			if !cfg.ControlPlane() || cfg.EmbeddedNATS() {
				return withCode(exitUsage, errors.New("ctxmemd scheduler needs --nats URL (a daemon with the embedded NATS runs its own replica)"))
			}
			log := newLogger(c.App.ErrWriter, cfg)
			nc, err := bus.Connect(busOptions(cfg, "ctxmemd scheduler"), true)
			if err != nil {
				return withCode(exitFailure, err)
			}
			defer nc.Close()
			s, err := scheduler.New(scheduler.Config{Names: msg.For(cfg.Cluster), ID: c.String("id"),
				ColdThreshold: cfg.ColdThreshold, Grace: cfg.SinkGrace, Limits: busLimits(cfg), Log: log})
			if err != nil {
				return withCode(exitUsage, err)
			}
			ctx, stop := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			log.Info("scheduler replica running", "id", s.ID(), "cluster", cfg.Cluster, "nats", cfg.NATS)
			return s.Run(ctx, nc)
		},
	}
}

func prestageCommand() *cli.Command {
	return &cli.Command{
		Name:      "prestage",
		Usage:     "bring files of a namespace to G2 on the host(s) holding them, through the cluster scheduler",
		ArgsUsage: "NAMESPACE PATH...",
		Description: "PATHs are relative to the namespace directory. The request goes through the local daemon " +
			"(admin socket) to the acting scheduler, which sends a prestage command with the deadline to every host " +
			"holding each path. Exit status 1 when some path was not brought to G2 on any host.",
		Flags: append(adminFlags(),
			&cli.DurationFlag{Name: "deadline", Value: 5 * time.Second, Usage: "time budget; blocks not in G2 by then are abandoned"},
			&cli.StringFlag{Name: "host", Usage: "only this host"},
			&cli.BoolFlag{Name: "json", Usage: "print the scheduler's reply as JSON"},
		),
		Action: func(c *cli.Context) error {
			if c.NArg() < 2 {
				return withCode(exitUsage, errors.New("usage: ctxmemd prestage [flags] NAMESPACE PATH..."))
			}
			for _, a := range c.Args().Slice() {
				if strings.HasPrefix(a, "-") {
					return withCode(exitUsage, fmt.Errorf("%q after NAMESPACE: flags go before the arguments (ctxmemd prestage [flags] NAMESPACE PATH...)", a))
				}
			}
			cl, err := adminClient(c)
			if err != nil {
				return err
			}
			defer cl.Close()
			var rep msg.PrestageReply
			err = cl.ClusterPrestage(c.Context, admin.ClusterPrestageRequest{Namespace: c.Args().First(),
				Paths: c.Args().Slice()[1:], DeadlineMs: c.Duration("deadline").Milliseconds(), Host: c.String("host")}, &rep)
			if err != nil {
				return adminErr(err)
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, rep)
			}
			tw := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "PATH\tHOST\tSTATUS\tBLOCKS\tTOOK\tERROR")
			ok := map[string]bool{}
			for _, r := range rep.Results {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", r.Path, r.Host, r.Status, r.Blocks,
					(time.Duration(r.TookUs) * time.Microsecond).String(), r.Error)
				ok[r.Path] = ok[r.Path] || r.Status == msg.AckOK
			}
			_ = tw.Flush()
			for _, p := range c.Args().Slice()[1:] {
				if !ok[strings.TrimPrefix(p, "/")] {
					return withCode(exitFailure, fmt.Errorf("%s: not prestaged on any host", p))
				}
			}
			return nil
		},
	}
}

// adminFlags are the flags of a command that talks to the local daemon:
// how to find its admin socket.
func adminFlags() []cli.Flag {
	return []cli.Flag{
		config.ConfigFileFlag(),
		&cli.StringFlag{Name: "admin", Usage: "admin socket path [$CTXMEM_ADMIN]", DefaultText: "<data_dir>/admin.sock"},
		&cli.StringFlag{Name: "data-dir", Usage: "data directory of the daemon [$CTXMEM_DATA_DIR]", DefaultText: "./" + config.DevRoot + "/data"},
	}
}

// adminClient returns a client for the daemon's admin socket (--admin,
// else the configuration's).
func adminClient(c *cli.Context) (*admin.Client, error) {
	sock := c.String("admin")
	if sock == "" {
		cfg, err := config.FromCLI(c)
		if err != nil {
			return nil, withCode(exitUsage, err)
		}
		sock = cfg.Admin
	}
	return admin.NewClient(sock), nil
}

func adminErr(err error) error {
	if errors.Is(err, admin.ErrPermission) {
		return withCode(exitUsage, err)
	}
	if errors.Is(err, admin.ErrNotRunning) {
		return withCode(exitNotRunning, fmt.Errorf("%w (is ctxmemd running? use --admin or --data-dir)", err))
	}
	return withCode(exitFailure, err)
}

// writeCluster prints the cluster view.
func writeCluster(w io.Writer, cv client.Cluster) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "cluster %s\n", cv.Name)
	if cv.Leader != nil {
		fmt.Fprintf(tw, "scheduler leader\t%s (%s) renewed %s ago\n", cv.Leader.ID, cv.Leader.Host,
			time.Since(time.Unix(0, cv.Leader.Since)).Round(time.Millisecond))
	} else {
		fmt.Fprintln(tw, "scheduler leader\tnone (hosts keep their local watermark policy)")
	}
	var reps []string
	for _, r := range cv.Replicas {
		reps = append(reps, r.ID)
	}
	fmt.Fprintf(tw, "scheduler replicas\t%s\n\n", strings.Join(reps, ", "))
	fmt.Fprintln(tw, "HOST\tSEEN\tOBJECTS\tG2\tG3\tG3.5\tG4\tBLOCK HITS\tCMDS\tVERSION")
	for _, h := range cv.Hosts {
		tiers := map[string]string{}
		for _, t := range h.Tiers {
			v := config.HumanSize(t.Used)
			if t.Capacity > 0 {
				v += "/" + config.HumanSize(t.Capacity)
			}
			if t.Degraded {
				v += "!"
			}
			tiers[t.Name] = v
		}
		var hits int64
		for _, n := range h.Hits.BlockHits {
			hits += n
		}
		ratio := "-"
		if h.Hits.Blocks > 0 {
			ratio = fmt.Sprintf("%.1f%%", 100*float64(hits)/float64(h.Hits.Blocks))
		}
		pool := "-"
		if p := h.Pool; p != nil {
			pool = fmt.Sprintf("%d/%d extents, %d shared, %d imported", len(p.Held), p.Extents, p.Shares, p.Imports)
			if p.Bypass {
				pool += " BYPASS"
			}
		}
		fmt.Fprintf(tw, "%s\t%s ago\t%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", h.Host,
			time.Since(time.Unix(0, h.Time)).Round(100*time.Millisecond), h.Objects,
			orDash(tiers["G2"]), orDash(tiers["G3"]), pool, orDash(tiers["G4"]), ratio, h.Applied, h.Version)
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// clusterStatus fetches and prints the cluster view (status --cluster).
func clusterStatus(ctx context.Context, c *cli.Context, cl *admin.Client) error {
	var cv client.Cluster
	if err := cl.Cluster(ctx, &cv); err != nil {
		return adminErr(err)
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, cv)
	}
	return writeCluster(c.App.Writer, cv)
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// newLogger is the text logger of commands other than run.
func newLogger(w io.Writer, cfg config.Config) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: cfg.SlogLevel()}))
}
