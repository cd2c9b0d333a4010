package main

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ctxmem/ctxmemd/admin"
	"github.com/ctxmem/ctxmemd/config"
	"github.com/ctxmem/ctxmemd/heat/sim"
	"github.com/ctxmem/ctxmemd/metrics"
	"github.com/ctxmem/ctxmemd/mrc"
	"github.com/ctxmem/ctxmemd/traces"
)

// curveStatus returns the mount's curves for Status, block sizes from the
// namespaces' mean file sizes (st.Namespaces filled).
func curveStatus(set *mrc.Set, nss []admin.NamespaceStatus) *admin.Curves {
	if set == nil {
		return nil
	}
	per := map[string]float64{}
	var bytes, objects int64
	fallback := 0.0
	for _, n := range nss {
		per[n.Name] = float64(n.BlockSize)
		if n.Objects > 0 {
			per[n.Name] = float64(n.Bytes) / float64(n.Objects)
		}
		bytes, objects = bytes+n.Bytes, objects+n.Objects
		if fallback == 0 {
			fallback = float64(n.BlockSize)
		}
	}
	if objects > 0 {
		fallback = float64(bytes) / float64(objects)
	}
	tot, rows := set.Snapshot()
	out := &admin.Curves{Total: admin.CurveFrom("", tot, fallback), Namespaces: make([]admin.CurveStatus, 0, len(rows))}
	for _, r := range rows {
		bb, ok := per[r.Namespace]
		if !ok {
			bb = fallback
		}
		out.Namespaces = append(out.Namespaces, admin.CurveFrom(r.Namespace, r.Curve, bb))
	}
	return out
}

func curveCommand() *cli.Command {
	return &cli.Command{
		Name:      "curve",
		Usage:     "plot the hit ratio versus cache capacity (miss-ratio curve) as SVG or CSV",
		ArgsUsage: " ",
		Description: "Reads the running daemon's online curve (admin socket; SHARDS-sampled reuse distances of every KV " +
			"lookup since mount, docs/curves.md) and writes hit ratio versus capacity in blocks, with a mark at the G2 and " +
			"G2+G3 capacities (tier capacity / mean block size). --namespace picks one namespace's curve (default: the " +
			"whole mount). --trace FILE or --bundled computes the curve offline from a trace (Mooncake JSON lines), " +
			"with --g2/--g3 sizes and --block-size for the marks. --format csv prints blocks,bytes,hit_ratio rows.",
		Flags: []cli.Flag{
			config.ConfigFileFlag(),
			&cli.StringFlag{Name: "admin", Usage: "admin socket path [$CTXMEM_ADMIN]", DefaultText: "<data_dir>/admin.sock"},
			&cli.StringFlag{Name: "data-dir", Usage: "data directory of the daemon [$CTXMEM_DATA_DIR]", DefaultText: "./" + config.DevRoot + "/data"},
			&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Usage: "output file (default: standard output)"},
			&cli.StringFlag{Name: "format", Value: "svg", Usage: "svg or csv"},
			&cli.StringFlag{Name: "namespace", Usage: "one namespace's curve (default: the total)"},
			&cli.StringFlag{Name: "trace", Usage: "offline: compute the curve from this trace file (no daemon)"},
			&cli.BoolFlag{Name: "bundled", Usage: "offline: compute the curve from the bundled Mooncake trace"},
			&cli.Float64Flag{Name: "rate", Value: 1, Usage: "offline: SHARDS sampling rate (1 = exact)"},
			&cli.IntFlag{Name: "max-keys", Value: -1, Usage: "offline: fixed-size SHARDS key bound (-1: none)"},
			&cli.StringFlag{Name: "g2", Usage: "offline: G2 size in bytes for the mark (e.g. 4GiB)"},
			&cli.StringFlag{Name: "g3", Usage: "offline: G3 size in bytes for the mark"},
			&cli.StringFlag{Name: "block-size", Value: config.FormatSize(defaultSimBlockSize()), Usage: "offline: bytes per block (default: the daemon's block_size default, as sim)"},
		},
		Action: func(c *cli.Context) error {
			format := c.String("format")
			if format != "svg" && format != "csv" {
				return withCode(exitUsage, fmt.Errorf("--format %q: want svg or csv", format))
			}
			var cv admin.CurveStatus
			var marks []curveMark
			var err error
			if c.String("trace") != "" || c.Bool("bundled") {
				cv, marks, err = offlineCurve(c)
			} else {
				cv, marks, err = daemonCurve(c)
			}
			if err != nil {
				return err
			}
			w := c.App.Writer
			if p := c.String("out"); p != "" && p != "-" {
				f, err := os.Create(p)
				if err != nil {
					return withCode(exitFailure, err)
				}
				defer f.Close()
				w = f
			}
			if format == "csv" {
				err = writeCurveCSV(w, cv)
			} else {
				err = writeCurveSVG(w, cv, marks)
			}
			if err != nil {
				return withCode(exitFailure, err)
			}
			if f, ok := w.(*os.File); ok && f != os.Stdout {
				return withCode(exitFailure, f.Close())
			}
			return nil
		},
	}
}

// curveMark is a vertical mark at a capacity (blocks).
type curveMark struct {
	Label  string
	Blocks float64
}

func daemonCurve(c *cli.Context) (admin.CurveStatus, []curveMark, error) {
	sock := c.String("admin")
	if sock == "" {
		cfg, err := config.FromCLI(c)
		if err != nil {
			return admin.CurveStatus{}, nil, withCode(exitUsage, err)
		}
		sock = cfg.Admin
	}
	cl := admin.NewClient(sock)
	defer cl.Close()
	st, err := cl.Status(c.Context)
	switch {
	case errors.Is(err, admin.ErrPermission):
		return admin.CurveStatus{}, nil, withCode(exitUsage, err)
	case errors.Is(err, admin.ErrNotRunning):
		return admin.CurveStatus{}, nil, withCode(exitNotRunning, fmt.Errorf("%w (is ctxmemd running? use --admin or --data-dir)", err))
	case err != nil:
		return admin.CurveStatus{}, nil, withCode(exitFailure, err)
	case st.Curves == nil:
		return admin.CurveStatus{}, nil, withCode(exitFailure, errors.New("the daemon reports no curves (no mount)"))
	}
	cv := st.Curves.Total
	if ns := c.String("namespace"); ns != "" {
		found := false
		for _, n := range st.Curves.Namespaces {
			if n.Namespace == ns {
				cv, found = n, true
			}
		}
		if !found {
			return admin.CurveStatus{}, nil, withCode(exitUsage, fmt.Errorf("no curve for namespace %q (no lookups yet?)", ns))
		}
	}
	var g2, g3 int64
	for _, t := range st.Tiers {
		switch t.Name {
		case "G2":
			g2 = t.CapacityBytes
		case "G3":
			g3 = t.CapacityBytes
		}
	}
	return cv, tierMarks(g2, g3, cv.BlockBytes), nil
}

// tierMarks returns marks at G2 and G2+G3 (bytes; 0 = none or unbounded).
func tierMarks(g2, g3 int64, blockBytes float64) []curveMark {
	if blockBytes <= 0 {
		return nil
	}
	var out []curveMark
	if g2 > 0 {
		out = append(out, curveMark{"G2", float64(g2) / blockBytes})
		if g3 > 0 {
			out = append(out, curveMark{"G2+G3", float64(g2+g3) / blockBytes})
		}
	}
	return out
}

func offlineCurve(c *cli.Context) (admin.CurveStatus, []curveMark, error) {
	var r io.Reader = traces.Bundled()
	if p := c.String("trace"); p != "" {
		f, err := traces.Open(p)
		if err != nil {
			return admin.CurveStatus{}, nil, withCode(exitUsage, err)
		}
		defer f.Close()
		r = f
	}
	t, err := sim.Load(r)
	if err != nil {
		return admin.CurveStatus{}, nil, withCode(exitUsage, err)
	}
	size := func(name string) (int64, error) {
		s := c.String(name)
		if s == "" {
			return 0, nil
		}
		v, err := config.ParseSize(s)
		if err != nil {
			return 0, withCode(exitUsage, fmt.Errorf("--%s: %w", name, err))
		}
		return v, nil
	}
	bs, err := size("block-size")
	if err != nil {
		return admin.CurveStatus{}, nil, err
	}
	g2, err := size("g2")
	if err != nil {
		return admin.CurveStatus{}, nil, err
	}
	g3, err := size("g3")
	if err != nil {
		return admin.CurveStatus{}, nil, err
	}
	m := mrc.New(mrc.Config{Rate: c.Float64("rate"), MaxKeys: c.Int("max-keys")})
	for _, b := range t.Blocks {
		m.Observe(mrc.Hash64(b))
	}
	return admin.CurveFrom("", m.Snapshot(), float64(bs)), tierMarks(g2, g3, float64(bs)), nil
}

func writeCurveCSV(w io.Writer, cv admin.CurveStatus) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"blocks", "bytes", "hit_ratio"})
	for _, p := range cv.Points {
		_ = cw.Write([]string{strconv.FormatFloat(p.Blocks, 'f', -1, 64), strconv.FormatFloat(p.Bytes, 'f', 0, 64),
			strconv.FormatFloat(p.HitRatio, 'f', 6, 64)})
	}
	cw.Flush()
	return cw.Error()
}

// writeCurveSVG draws hit ratio (0–1, y) against capacity in blocks (log
// x), with gridlines, the curve and the tier marks.
func writeCurveSVG(w io.Writer, cv admin.CurveStatus, marks []curveMark) error {
	const W, H, left, right, top, bottom = 800.0, 480.0, 70.0, 30.0, 40.0, 60.0
	pw, ph := W-left-right, H-top-bottom
	hi := 1.0
	for _, p := range cv.Points {
		hi = max(hi, p.Blocks)
	}
	for _, m := range marks {
		hi = max(hi, m.Blocks*1.5)
	}
	decades := math.Max(1, math.Ceil(math.Log10(hi)))
	x := func(b float64) float64 { return left + pw*math.Log10(max(b, 1))/decades }
	y := func(r float64) float64 { return top + ph*(1-r) }
	var s strings.Builder
	fmt.Fprintf(&s, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(&s, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" font-family="sans-serif" font-size="12">`+"\n", W, H, W, H)
	fmt.Fprintf(&s, `<rect width="%g" height="%g" fill="white"/>`+"\n", W, H)
	title := "ctxmemd: LRU hit ratio vs capacity"
	if cv.Namespace != "" {
		title += ", namespace " + cv.Namespace
	}
	fmt.Fprintf(&s, `<text x="%g" y="22" font-size="15">%s (%d lookups, sampling rate %.4g)</text>`+"\n", left, xmlEscape(title), cv.Refs, cv.SamplingRate)
	for i := 0; i <= 10; i++ { // horizontal gridlines every 0.1
		r := float64(i) / 10
		fmt.Fprintf(&s, `<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#ddd"/>`+"\n", left, y(r), left+pw, y(r))
		fmt.Fprintf(&s, `<text x="%g" y="%.1f" text-anchor="end">%.1f</text>`+"\n", left-6, y(r)+4, r)
	}
	for d := 0; d <= int(decades); d++ { // vertical gridlines per decade
		b := math.Pow(10, float64(d))
		fmt.Fprintf(&s, `<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="#ddd"/>`+"\n", x(b), top, x(b), top+ph)
		fmt.Fprintf(&s, `<text x="%.1f" y="%g" text-anchor="middle">%s</text>`+"\n", x(b), top+ph+18, blocksLabel(b))
	}
	fmt.Fprintf(&s, `<rect x="%g" y="%g" width="%g" height="%g" fill="none" stroke="black"/>`+"\n", left, top, pw, ph)
	fmt.Fprintf(&s, `<text x="%g" y="%g" text-anchor="middle">capacity (blocks, log scale)</text>`+"\n", left+pw/2, H-14)
	fmt.Fprintf(&s, `<text x="16" y="%g" text-anchor="middle" transform="rotate(-90 16 %g)">hit ratio</text>`+"\n", top+ph/2, top+ph/2)
	if len(cv.Points) > 0 {
		var pts []string
		for _, p := range cv.Points {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(p.Blocks), y(p.HitRatio)))
		}
		fmt.Fprintf(&s, `<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="%s"/>`+"\n", strings.Join(pts, " "))
	}
	for i, m := range marks {
		fmt.Fprintf(&s, `<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="#d62728" stroke-dasharray="5,4"/>`+"\n", x(m.Blocks), top, x(m.Blocks), top+ph)
		fmt.Fprintf(&s, `<text x="%.1f" y="%g" fill="#d62728">%s: %s blocks, %.3f</text>`+"\n", x(m.Blocks)+4, top+14+16*float64(i),
			xmlEscape(m.Label), blocksLabel(m.Blocks), cv.HitRatio(m.Blocks))
	}
	s.WriteString("</svg>\n")
	_, err := io.WriteString(w, s.String())
	return err
}

func blocksLabel(b float64) string {
	switch {
	case b >= 1e9:
		return strconv.FormatFloat(b/1e9, 'g', 3, 64) + "G"
	case b >= 1e6:
		return strconv.FormatFloat(b/1e6, 'g', 3, 64) + "M"
	case b >= 1e3:
		return strconv.FormatFloat(b/1e3, 'g', 3, 64) + "k"
	}
	return strconv.FormatFloat(b, 'g', 3, 64)
}

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}

// metricsCurves converts Status curves for the metrics snapshot.
func metricsCurves(c *admin.Curves) []metrics.Curve {
	if c == nil {
		return nil
	}
	conv := func(s admin.CurveStatus) metrics.Curve {
		return metrics.Curve{Namespace: s.Namespace, Refs: s.Refs, MaxHitRatio: s.MaxHitRatio,
			MeanDistance: s.MeanDistanceBlocks, Points: s.Points}
	}
	out := []metrics.Curve{conv(c.Total)}
	for _, n := range c.Namespaces {
		out = append(out, conv(n))
	}
	return out
}
