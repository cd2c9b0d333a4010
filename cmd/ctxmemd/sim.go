package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/ctxmem/ctxmemd/heat/sim"
	"github.com/ctxmem/ctxmemd/traces"
)

func simCommand() *cli.Command {
	return &cli.Command{
		Name:  "sim",
		Usage: "simulate cache policies on a trace and compare block hit ratios (no mount needed)",
		Description: "Policies: lru, lru2, arc, opt, wtinylfu[:window=F,protected=F,sample=N], " +
			"policy[:order=decay|lru2|lru,halflife=D,sample=N,admit=on|off] (the daemon's heat policy). " +
			"Repeat --policy for several; capacities are in blocks. Trace: JSON lines, plain or gzip-compressed; " +
			"without --trace, the Mooncake conversation trace built into the binary.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "trace", Usage: "trace file (JSON lines, plain or gzip)",
				DefaultText: "the bundled Mooncake conversation trace"},
			&cli.StringFlag{Name: "capacity", Usage: "cache sizes in blocks, comma-separated", Value: joinInts(sim.DefaultCapacities())},
			&cli.StringSliceFlag{Name: "policy", Usage: "policy spec (repeatable)", Value: cli.NewStringSlice(sim.DefaultPolicies()...)},
			&cli.IntFlag{Name: "requests", Usage: "simulate only the first N requests (0 = all)"},
			&cli.BoolFlag{Name: "json", Usage: "print the results as a JSON list"},
		},
		Action: simAction,
	}
}

// simResult is the JSON form of one sim.Result.
type simResult struct {
	Policy   string  `json:"policy"`
	Capacity int     `json:"capacity_blocks"`
	Refs     int64   `json:"refs"`
	Hits     int64   `json:"hits"`
	HitRatio float64 `json:"hit_ratio"`
	ElapsedS float64 `json:"elapsed_s"`
}

func simAction(c *cli.Context) error {
	var caps []int
	for _, f := range strings.Split(c.String("capacity"), ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return withCode(exitUsage, fmt.Errorf("--capacity %q: want positive block counts separated by commas", c.String("capacity")))
		}
		caps = append(caps, n)
	}
	f, err := traces.Open(c.String("trace")) // decompresses gzip, so firstLines sees lines
	if err != nil {
		return withCode(exitUsage, err)
	}
	defer f.Close()
	var r io.Reader = f
	if n := c.Int("requests"); n > 0 {
		if r, err = firstLines(f, n); err != nil {
			return withCode(exitFailure, err)
		}
	}
	results, err := sim.Run(r, caps, c.StringSlice("policy"))
	if errors.Is(err, sim.ErrPolicy) || errors.Is(err, sim.ErrTrace) {
		return withCode(exitUsage, err)
	}
	if err != nil {
		return withCode(exitFailure, err)
	}
	out := make([]simResult, 0, len(results))
	for _, x := range results {
		out = append(out, simResult{Policy: x.Policy, Capacity: x.Capacity, Refs: x.Refs, Hits: x.Hits,
			HitRatio: x.HitRatio, ElapsedS: x.Elapsed.Seconds()})
	}
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CAPACITY\tPOLICY\tREFS\tHITS\tHIT RATIO\tTIME")
	for _, x := range out {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%.4f\t%.2fs\n", x.Capacity, x.Policy, x.Refs, x.Hits, x.HitRatio, x.ElapsedS)
	}
	return tw.Flush()
}

// firstLines returns the first n non-blank lines of r.
func firstLines(r io.Reader, n int) (io.Reader, error) {
	var buf bytes.Buffer
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for kept := 0; kept < n && sc.Scan(); {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		buf.Write(sc.Bytes())
		buf.WriteByte('\n')
		kept++
	}
	return &buf, sc.Err()
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}
