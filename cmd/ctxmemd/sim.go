package main

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/ctxmem/ctxmemd/config"
	"github.com/ctxmem/ctxmemd/heat/sim"
	"github.com/ctxmem/ctxmemd/hitratio"
	"github.com/ctxmem/ctxmemd/traces"
)

// Output formats of ctxmemd sim.
const (
	simTable = "table"
	simJSON  = "json"
	simCSV   = "csv"
)

func simCommand() *cli.Command {
	return &cli.Command{
		Name:      "sim",
		Usage:     "simulate cache policies on a trace, G2 alone or G2 over G3, and compare hit ratios (no mount needed)",
		ArgsUsage: " ",
		Description: "Policies: lru, lru2, arc, opt, lru-oracle, wtinylfu[:window=F,protected=F,sample=N], " +
			"policy[:order=decay|lru2|lru,halflife=D,sample=N,admit=on|off,reuse=N] (the daemon's heat policy; reuse is " +
			"the G3 write filter's threshold, 0 writes every G2 victim to G3), adaptive[:halflife=D,sample=N,admit=on|off,reuse=N] " +
			"(the heat policy following the better of its decay order and LRU, measured on sampled shadow caches), " +
			"density[:sample=N,reuse=N,depth=on|off] (evicts the lowest learned hit density per class of reference count and age, " +
			"and depth in the prefix chain, with ghosts of evicted blocks; depth=off leaves depth out), " +
			"arbiter[:halflife=D,sample=N,reuse=N,depth=on|off] (policy's decay order or density, whichever hits more " +
			"on sampled shadow caches). " +
			"Repeat --policy for several. --synthetic SHAPE[,SEED] replays a generated trace (recency, scan, zipf, loop, mix) instead.\n\n" +
			"Sizes are bytes with binary units (4GiB, 512MiB, 1.5G); a tier of S bytes holds floor(S / --block-size) " +
			"blocks. Every combination of --g2 and --g3 sizes is simulated with every policy. With a G3 (--g3 > 0) " +
			"each tier runs its own instance of the policy: a reference G2 lacks is looked up in G3, and a block " +
			"leaving G2 is written to G3 unless G3 holds it already or the policy's write filter says no.\n\n" +
			"Per row: refs (block references), G2 hits, G3 hits, misses; the project's two hit ratios, here over " +
			"block references: \"" + hitratio.LabelG2 + "\" = G2 hits / refs (JSON and CSV: g2_hit_ratio) and \"" +
			hitratio.LabelAny + "\" = (G2 hits + G3 hits) / refs (any_tier_hit_ratio); " +
			"G3 written = G2 victims written to G3 (g3_writes blocks, g3_bytes_written bytes), a proxy for flash " +
			"write volume.\n\n" +
			"--format csv prints a header row and one row per policy, G2 size and G3 size, numbers unformatted " +
			"(bytes as integers, ratios as decimals), for plotting; --out FILE writes the output to FILE.\n\n" +
			"--capacity, the older form, gives G2 sizes in blocks (no G3) and keeps that form's table and JSON keys " +
			"(capacity_blocks, hits, hit_ratio); it cannot be combined with --g2 or --g3.\n\n" +
			"Trace: JSON lines, plain or gzip-compressed; without --trace, the Mooncake conversation trace built " +
			"into the binary. The Mooncake format carries no block size (512 tokens per block; the bytes depend on " +
			"the model), hence --block-size.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "trace", Usage: "trace file (JSON lines, plain or gzip)",
				DefaultText: "the bundled Mooncake conversation trace"},
			&cli.StringFlag{Name: "g2", Usage: "G2 (DRAM) sizes in bytes, comma-separated (4GiB,8GiB); each holds floor(size / --block-size) blocks",
				DefaultText: "the reference sizes " + joinInts(sim.DefaultCapacities()) + " blocks"},
			&cli.StringFlag{Name: "g3", Usage: "G3 (NVMe) sizes in bytes below G2, comma-separated (0,64GiB); 0 = no G3", Value: "0"},
			&cli.StringFlag{Name: "block-size", Usage: "bytes per block, to turn sizes into blocks (the trace format carries none)",
				DefaultText: "the daemon's block_size default, " + config.FormatSize(defaultSimBlockSize())},
			&cli.StringFlag{Name: "capacity", Usage: "G2 sizes in blocks, comma-separated (older form; not with --g2 or --g3)"},
			&cli.StringSliceFlag{Name: "policy", Usage: "policy spec (repeatable)", Value: cli.NewStringSlice(sim.DefaultPolicies()...)},
			&cli.StringFlag{Name: "synthetic", Usage: "replay a generated trace instead: SHAPE[,SEED] with SHAPE one of " +
				strings.Join(sim.SyntheticShapes(), ", ") + " (seed default 1)"},
			&cli.IntFlag{Name: "requests", Usage: "simulate only the first N requests (0 = all)"},
			&cli.StringFlag{Name: "format", Usage: "output format: table, json or csv", Value: simTable},
			&cli.BoolFlag{Name: "json", Usage: "same as --format json"},
			&cli.StringFlag{Name: "out", Usage: "write the output to this file (replaced when complete) instead of standard output"},
		},
		Action: simAction,
	}
}

// simResult is one row of ctxmemd sim: one policy with one G2 and G3 size.
type simResult struct {
	Policy          string  `json:"policy"`
	BlockSize       int64   `json:"block_size"`
	G2Bytes         int64   `json:"g2_bytes"`
	G3Bytes         int64   `json:"g3_bytes"`
	G2Blocks        int     `json:"g2_blocks"`
	G3Blocks        int     `json:"g3_blocks"`
	Refs            int64   `json:"refs"`
	G2Hits          int64   `json:"g2_hits"`
	G3Hits          int64   `json:"g3_hits"`
	Misses          int64   `json:"misses"`
	G2HitRatio      float64 `json:"g2_hit_ratio"`       // hitratio.LabelG2: G2Hits / Refs
	AnyTierHitRatio float64 `json:"any_tier_hit_ratio"` // hitratio.LabelAny: (G2Hits + G3Hits) / Refs
	G3Writes        int64   `json:"g3_writes"`          // blocks written to G3
	G3BytesWritten  int64   `json:"g3_bytes_written"`
	ElapsedS        float64 `json:"elapsed_s"`
	// BlockKeys holds the keys of the --capacity form, present only with
	// --capacity.
	*BlockKeys
}

// BlockKeys are the JSON keys ctxmemd sim printed before sizes in bytes:
// capacity_blocks is g2_blocks, hits g2_hits and hit_ratio g2_hit_ratio.
// (Exported because encoding/json cannot fill an embedded pointer to an
// unexported type.)
type BlockKeys struct {
	Capacity int     `json:"capacity_blocks"`
	Hits     int64   `json:"hits"`
	HitRatio float64 `json:"hit_ratio"`
}

// simCSVHeader is the CSV header: the JSON keys, in order.
var simCSVHeader = []string{"policy", "block_size", "g2_bytes", "g3_bytes", "g2_blocks", "g3_blocks", "refs",
	"g2_hits", "g3_hits", "misses", "g2_hit_ratio", "any_tier_hit_ratio", "g3_writes", "g3_bytes_written", "elapsed_s"}

func (r simResult) csvRecord() []string {
	i := func(n int64) string { return strconv.FormatInt(n, 10) }
	f := func(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }
	return []string{r.Policy, i(r.BlockSize), i(r.G2Bytes), i(r.G3Bytes), i(int64(r.G2Blocks)), i(int64(r.G3Blocks)),
		i(r.Refs), i(r.G2Hits), i(r.G3Hits), i(r.Misses), f(r.G2HitRatio), f(r.AnyTierHitRatio), i(r.G3Writes),
		i(r.G3BytesWritten), f(r.ElapsedS)}
}

// defaultSimBlockSize is the daemon's default block size (the block_size
// option's default), 256 KiB if the options table cannot say.
func defaultSimBlockSize() int64 {
	for _, o := range config.Options() {
		if o.Key == "block_size" {
			if n, err := config.ParseSize(o.Default); err == nil && n > 0 {
				return n
			}
		}
	}
	return 256 << 10
}

// simTier is one tier size: as given in bytes, and in blocks.
type simTier struct {
	bytes  int64
	blocks int
}

// parseTierSizes parses the comma-separated byte sizes of flag name into
// blocks of bs bytes (floor). A size below one block is an error, except
// 0 when zeroOK (no such tier).
func parseTierSizes(name, list string, bs int64, zeroOK bool) ([]simTier, error) {
	var out []simTier
	for f := range strings.SplitSeq(list, ",") {
		n, err := config.ParseSize(f)
		if err != nil {
			return nil, fmt.Errorf("--%s %q: %v", name, list, err)
		}
		switch {
		case n == 0 && zeroOK:
			out = append(out, simTier{})
			continue
		case n == 0:
			return nil, fmt.Errorf("--%s %q: size must be positive", name, list)
		case n < bs:
			return nil, fmt.Errorf("--%s %q: %s is less than one block of %s (--block-size)", name, list,
				strings.TrimSpace(f), config.FormatSize(bs))
		}
		out = append(out, simTier{bytes: n, blocks: int(n / bs)})
	}
	return out, nil
}

// simFormat returns the output format --format and --json ask for.
func simFormat(c *cli.Context) (string, error) {
	f := strings.ToLower(strings.TrimSpace(c.String("format")))
	switch f {
	case simTable, simJSON, simCSV:
	default:
		return "", fmt.Errorf("--format %q: want table, json or csv", c.String("format"))
	}
	if c.Bool("json") {
		if c.IsSet("format") && f != simJSON {
			return "", fmt.Errorf("--json is --format json; it conflicts with --format %s", f)
		}
		f = simJSON
	}
	return f, nil
}

func simAction(c *cli.Context) error {
	if c.NArg() > 0 {
		return withCode(exitUsage, fmt.Errorf("ctxmemd sim takes no arguments (got %q); see ctxmemd sim --help", c.Args().First()))
	}
	format, err := simFormat(c)
	if err != nil {
		return withCode(exitUsage, err)
	}
	bs := defaultSimBlockSize()
	if c.IsSet("block-size") {
		if bs, err = config.ParseSize(c.String("block-size")); err != nil || bs < 1 {
			return withCode(exitUsage, fmt.Errorf("--block-size %q: want a positive size (%v)", c.String("block-size"), err))
		}
	}
	blocksMode := c.IsSet("capacity")
	if blocksMode && (c.IsSet("g2") || c.IsSet("g3")) {
		return withCode(exitUsage, errors.New("--capacity (G2 in blocks) and --g2/--g3 (sizes in bytes) are mutually exclusive: give one"))
	}
	var g2s, g3s []simTier
	switch {
	case blocksMode:
		for f := range strings.SplitSeq(c.String("capacity"), ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 || int64(n) > math.MaxInt64/bs {
				return withCode(exitUsage, fmt.Errorf("--capacity %q: want positive block counts separated by commas", c.String("capacity")))
			}
			g2s = append(g2s, simTier{bytes: int64(n) * bs, blocks: n})
		}
	case c.IsSet("g2"):
		if g2s, err = parseTierSizes("g2", c.String("g2"), bs, false); err != nil {
			return withCode(exitUsage, err)
		}
	default:
		for _, n := range sim.DefaultCapacities() {
			g2s = append(g2s, simTier{bytes: int64(n) * bs, blocks: n})
		}
	}
	if !blocksMode {
		if g3s, err = parseTierSizes("g3", c.String("g3"), bs, true); err != nil {
			return withCode(exitUsage, err)
		}
	} else {
		g3s = []simTier{{}}
	}
	policies := c.StringSlice("policy")
	for _, p := range policies {
		if err := sim.CheckPolicy(p); err != nil {
			return withCode(exitUsage, err)
		}
	}
	if c.Int("requests") < 0 {
		return withCode(exitUsage, errors.New("--requests must be >= 0"))
	}

	w := c.App.Writer
	var out *os.File
	if path := c.String("out"); path != "" {
		// Written beside the target and renamed over it when complete.
		if out, err = os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*"); err != nil {
			return withCode(exitUsage, fmt.Errorf("--out %s: %w", path, err))
		}
		defer func() {
			if out != nil {
				out.Close()
				os.Remove(out.Name())
			}
		}()
		w = out
	}

	var tr *sim.Trace
	if spec := c.String("synthetic"); spec != "" {
		if c.IsSet("trace") || c.IsSet("requests") {
			return withCode(exitUsage, errors.New("--synthetic generates the trace: it cannot be combined with --trace or --requests"))
		}
		if tr, err = sim.ParseSynthetic(spec); err != nil {
			return withCode(exitUsage, fmt.Errorf("--synthetic %q: %w", spec, err))
		}
	} else if tr, err = loadSimTrace(c); err != nil {
		return err
	}

	var rows []simResult
	for _, g2 := range g2s {
		for _, g3 := range g3s {
			for _, p := range policies {
				x, err := sim.SimulateTiers(tr, g2.blocks, g3.blocks, p)
				if errors.Is(err, sim.ErrPolicy) {
					return withCode(exitUsage, err)
				}
				if err != nil {
					return withCode(exitFailure, err)
				}
				row := simResult{Policy: p, BlockSize: bs, G2Bytes: g2.bytes, G3Bytes: g3.bytes,
					G2Blocks: g2.blocks, G3Blocks: g3.blocks, Refs: x.Refs, G2Hits: x.G2Hits, G3Hits: x.G3Hits,
					Misses: x.Misses(), G2HitRatio: x.G2HitRatio(), AnyTierHitRatio: x.AnyTierHitRatio(),
					G3Writes: x.G3Writes, G3BytesWritten: x.G3Writes * bs, ElapsedS: x.Elapsed.Seconds()}
				if blocksMode {
					row.BlockKeys = &BlockKeys{Capacity: g2.blocks, Hits: x.G2Hits, HitRatio: x.G2HitRatio()}
				}
				rows = append(rows, row)
			}
		}
	}

	if err := writeSimResults(w, format, blocksMode, rows); err != nil {
		return withCode(exitFailure, err)
	}
	if out != nil {
		if err := out.Chmod(0o644); err != nil {
			return withCode(exitFailure, err)
		}
		if err := out.Close(); err != nil {
			return withCode(exitFailure, err)
		}
		if err := os.Rename(out.Name(), c.String("out")); err != nil {
			return withCode(exitFailure, err)
		}
		out = nil
	}
	return nil
}

// loadSimTrace loads --trace (or the bundled trace), its first --requests
// requests when set.
func loadSimTrace(c *cli.Context) (*sim.Trace, error) {
	f, err := traces.Open(c.String("trace")) // decompresses gzip, so firstLines sees lines
	if err != nil {
		return nil, withCode(exitUsage, err)
	}
	defer f.Close()
	var r io.Reader = f
	if n := c.Int("requests"); n > 0 {
		if r, err = firstLines(f, n); err != nil {
			return nil, withCode(exitFailure, err)
		}
	}
	tr, err := sim.Load(r)
	if errors.Is(err, sim.ErrTrace) {
		return nil, withCode(exitUsage, fmt.Errorf("%s: %w", traces.Name(c.String("trace")), err))
	}
	if err != nil {
		return nil, withCode(exitFailure, err)
	}

	return tr, nil
}

// writeSimResults prints rows in format; blocksMode selects the table of
// the --capacity form.
func writeSimResults(w io.Writer, format string, blocksMode bool, rows []simResult) error {
	switch format {
	case simJSON:
		if rows == nil {
			rows = []simResult{}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	case simCSV:
		cw := csv.NewWriter(w)
		cw.Write(simCSVHeader)
		for _, x := range rows {
			cw.Write(x.csvRecord())
		}
		cw.Flush()
		return cw.Error()
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if blocksMode {
		fmt.Fprintln(tw, "CAPACITY\tPOLICY\tREFS\tHITS\tHIT RATIO\tTIME")
		for _, x := range rows {
			fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%.4f\t%.2fs\n", x.G2Blocks, x.Policy, x.Refs, x.G2Hits, x.G2HitRatio, x.ElapsedS)
		}
		return tw.Flush()
	}
	// The two ratio columns carry the project's names for them verbatim.
	fmt.Fprintln(tw, "POLICY\tG2\tG2 BLOCKS\tG3\tG3 BLOCKS\tREFS\tG2 HITS\tG3 HITS\tMISSES\t"+
		hitratio.LabelG2+"\t"+hitratio.LabelAny+"\tG3 WRITTEN\tTIME")
	for _, x := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%d\t%d\t%d\t%d\t%.4f\t%.4f\t%s\t%.2fs\n", x.Policy,
			config.FormatSize(x.G2Bytes), x.G2Blocks, config.FormatSize(x.G3Bytes), x.G3Blocks, x.Refs, x.G2Hits,
			x.G3Hits, x.Misses, x.G2HitRatio, x.AnyTierHitRatio, config.HumanSize(x.G3BytesWritten), x.ElapsedS)
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
