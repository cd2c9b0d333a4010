package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/ctxmem/ctxmemd/admin"
	"github.com/ctxmem/ctxmemd/config"
	"github.com/ctxmem/ctxmemd/hitratio"
	"github.com/ctxmem/ctxmemd/tiering"
)

func topCommand() *cli.Command {
	return &cli.Command{
		Name:  "top",
		Usage: "show a running daemon's live rates per tier, refreshed every --interval",
		Description: "Samples the admin socket's status every --interval and prints what changed in between, " +
			"per second: KV lookups (hits by serving tier, misses) and the interval's hit ratio, blocks read by tier, " +
			"promotions, demotions and evictions by tier, and each tier's use. On a terminal the screen is redrawn; " +
			"otherwise (or with --count) one block is printed per interval. --json prints one object per interval.",
		Flags: append(adminFlags(),
			&cli.DurationFlag{Name: "interval", Aliases: []string{"n"}, Value: 2 * time.Second, Usage: "time between samples"},
			&cli.IntFlag{Name: "count", Usage: "stop after this many intervals (0: until Ctrl-C)"},
			&cli.BoolFlag{Name: "json", Usage: "print each interval's rates as one JSON object per line"},
		),
		Action: topAction,
	}
}

// topRates are the per-second rates of one interval of `ctxmemd top`.
type topRates struct {
	At        time.Time `json:"time"`
	IntervalS float64   `json:"interval_s"`
	// LookupHits are KV lookup hits per second by serving tier; Misses
	// lookup misses per second (package hitratio).
	LookupHits map[string]float64 `json:"lookup_hits_per_s"`
	Misses     float64            `json:"lookup_misses_per_s"`
	// G2Ratio and AnyRatio are the interval's hit ratios (0-1; 0 with no
	// lookup in the interval).
	G2Ratio  float64 `json:"g2_hit_ratio"`
	AnyRatio float64 `json:"any_tier_hit_ratio"`
	// BlockReads are block reads per second by the tier that served them.
	BlockReads map[string]float64 `json:"block_reads_per_s"`
	Promotions float64            `json:"promotions_per_s"`
	Demotions  map[string]float64 `json:"demotions_per_s"`
	Evictions  map[string]float64 `json:"evictions_per_s"`
	// DirtyBytes is the dirty G2 bytes at the end of the interval.
	DirtyBytes int64               `json:"dirty_bytes"`
	Tiers      []tiering.TierUsage `json:"tiers"`
}

// rates computes topRates between two status samples taken dt apart.
func rates(prev, cur admin.Status, dt time.Duration) topRates {
	sec := dt.Seconds()
	per := func(a, b int64) float64 { return float64(b-a) / sec }
	perMap := func(a, b map[string]int64) map[string]float64 {
		out := map[string]float64{}
		for k, v := range b {
			out[k] = per(a[k], v)
		}
		return out
	}
	d := hitratio.Counts{Hits: map[string]int64{}, Misses: cur.Lookups.Misses - prev.Lookups.Misses}
	for k, v := range cur.Lookups.Hits {
		d.Hits[k] = v - prev.Lookups.Hits[k]
	}
	r := topRates{At: time.Now(), IntervalS: sec, LookupHits: map[string]float64{}, Misses: float64(d.Misses) / sec,
		G2Ratio: d.ServedFromG2(), AnyRatio: d.FoundInAnyTier(),
		BlockReads: perMap(prev.Stats.BlockHits, cur.Stats.BlockHits), Promotions: per(prev.Stats.Promotions, cur.Stats.Promotions),
		Demotions: perMap(prev.Stats.Demotions, cur.Stats.Demotions), Evictions: perMap(prev.Stats.Evictions, cur.Stats.Evictions),
		DirtyBytes: cur.Stats.DirtyBytes, Tiers: cur.Tiers}
	for k, v := range d.Hits {
		r.LookupHits[k] = float64(v) / sec
	}
	return r
}

func topAction(c *cli.Context) error {
	if c.Duration("interval") < 100*time.Millisecond {
		return withCode(exitUsage, fmt.Errorf("--interval %v: want at least 100ms", c.Duration("interval")))
	}
	if c.Int("count") < 0 {
		return withCode(exitUsage, fmt.Errorf("--count %d: want 0 or more", c.Int("count")))
	}
	cl, err := adminClient(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx := c.Context
	prev, err := cl.Status(ctx)
	if err != nil {
		return adminErr(err)
	}
	t0 := time.Now()
	redraw := !c.Bool("json") && c.Int("count") == 0 && isTerminal(c.App.Writer)
	tick := time.NewTicker(c.Duration("interval"))
	defer tick.Stop()
	for n := 0; c.Int("count") == 0 || n < c.Int("count"); n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		cur, err := cl.Status(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return adminErr(err)
		}
		t1 := time.Now()
		r := rates(prev, cur, t1.Sub(t0))
		prev, t0 = cur, t1
		if c.Bool("json") {
			if err := json.NewEncoder(c.App.Writer).Encode(r); err != nil {
				return err
			}
			continue
		}
		if redraw {
			fmt.Fprint(c.App.Writer, "\x1b[H\x1b[2J") // home, clear
		}
		if err := writeTop(c.App.Writer, cur, r); err != nil {
			return err
		}
		if !redraw {
			fmt.Fprintln(c.App.Writer)
		}
	}
	return nil
}

// writeTop prints one interval's rates as a table.
func writeTop(w io.Writer, st admin.Status, r topRates) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "ctxmemd %s\t%s, every %.1fs at %s\n", st.Version, st.Mount, r.IntervalS, r.At.Format("15:04:05"))
	var hits float64
	for _, v := range r.LookupHits {
		hits += v
	}
	pct := func(v float64) string {
		if hits+r.Misses == 0 {
			return "-" // no lookup in the interval
		}
		return fmt.Sprintf("%.1f%%", 100*v)
	}
	fmt.Fprintf(tw, "lookups/s\t%.1f hits (%s), %.1f misses; %s %s, %s %s\n", hits, perSecond(r.LookupHits),
		r.Misses, hitratio.LabelG2, pct(r.G2Ratio), hitratio.LabelAny, pct(r.AnyRatio))
	fmt.Fprintf(tw, "dirty\t%s\n\n", config.HumanSize(r.DirtyBytes))
	fmt.Fprintln(tw, "TIER\tUSED\tCAPACITY\tBLOCKS\tBLOCK READS/s\tDEMOTED IN/s\tEVICTED/s")
	for _, t := range r.Tiers {
		capTxt := "unbounded"
		if t.CapacityBytes > 0 {
			capTxt = config.HumanSize(t.CapacityBytes)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%.1f\t%.1f\t%.1f\n", t.Name, config.HumanSize(t.UsedBytes), capTxt, t.Blocks,
			r.BlockReads[t.Name], r.Demotions[t.Name], r.Evictions[t.Name])
	}
	fmt.Fprintf(tw, "\npromotions/s\t%.1f\n", r.Promotions)
	return tw.Flush()
}

// perSecond lists rates in tier order ("G2 5.0, G3 1.0, G3.5 0.0, G4 0.0").
func perSecond(m map[string]float64) string {
	var parts []string
	for _, t := range hitratio.Tiers() {
		parts = append(parts, fmt.Sprintf("%s %.1f", t, m[t]))
	}
	return strings.Join(parts, ", ")
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
