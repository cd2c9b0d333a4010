package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ctxmem/ctxmemd/config"
	"github.com/ctxmem/ctxmemd/internal/kvbench"
)

// The fio jobs of `ctxmemd bench --fio`: one file of benchFioSize bytes,
// psync at queue depth 1, buffered; the random reads last benchFioRuntime.
const (
	benchFioSize    = "64MiB"
	benchFioRuntime = "2" // seconds
)

func benchCommand() *cli.Command {
	return &cli.Command{
		Name:      "bench",
		Usage:     "measure a directory (e.g. a ctxmemd mount) with the KV job and fio, side by side with a reference directory",
		ArgsUsage: "DIR [REFDIR]",
		Description: "Runs the KV job in a fresh subdirectory of DIR and, with REFDIR (e.g. /dev/shm or another tmpfs), " +
			"the same job there too, in interleaved rounds (the order alternates), and prints the medians side by side " +
			"with their ratio DIR/REFDIR. The KV job creates+writes+closes --files files of --size bytes, then " +
			"opens+reads+closes them in a random order, checking every byte; then again after " +
			"posix_fadvise(DONTNEED) of every file (\"cache dropped\": a no-op on tmpfs, whose pages are the file), " +
			"then once more with the page cache warm. Latencies are per file (open to close), in µs. " +
			"With --fio it also runs fio (psync, QD 1, a " + benchFioSize + " file): 256 KiB sequential write with " +
			"end_fsync, 256 KiB sequential read, 4 KiB random reads for " + benchFioRuntime + " s. " +
			"Throughput rows: higher is better; latency rows (µs): lower is better, so a ratio below 1 means DIR is faster. " +
			"Everything it creates is removed at the end, also when interrupted.",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "files", Usage: "KV job: number of files", Value: 2000},
			&cli.StringFlag{Name: "size", Usage: "KV job: bytes per file (e.g. 256KiB, 1MiB)", Value: "256KiB"},
			&cli.IntFlag{Name: "rounds", Usage: "rounds; each runs every job on DIR and REFDIR, the order alternating", Value: 3},
			&cli.BoolFlag{Name: "fio", Usage: "also run the fio jobs (needs fio on PATH)"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON: the rows of the table and every round's results"},
		},
		Action: benchAction,
	}
}

// benchMetric is one row of the table: how to read its value from one
// round's results, and which way is better.
type benchMetric struct {
	id, job, unit string
	lower         bool // lower is better (latency)
	noRatio       bool // a ratio means nothing (a fraction of pages)
}

// benchMetrics are the rows, in table order; fio rows are present only with --fio.
var benchMetrics = []benchMetric{
	{id: "kv_write_files_per_s", job: "KV write (create+write+close)", unit: "file/s"},
	{id: "kv_write_p50_us", job: "KV write", unit: "p50 µs", lower: true},
	{id: "kv_write_p99_us", job: "KV write", unit: "p99 µs", lower: true},
	{id: "kv_read_files_per_s", job: "KV read after write", unit: "file/s"},
	{id: "kv_read_p50_us", job: "KV read after write", unit: "p50 µs", lower: true},
	{id: "kv_read_p99_us", job: "KV read after write", unit: "p99 µs", lower: true},
	{id: "kv_read_dropped_files_per_s", job: "KV read, cache dropped", unit: "file/s"},
	{id: "kv_read_dropped_p50_us", job: "KV read, cache dropped", unit: "p50 µs", lower: true},
	{id: "kv_read_dropped_p99_us", job: "KV read, cache dropped", unit: "p99 µs", lower: true},
	{id: "kv_resident_after_drop_pct", job: "KV pages cached after drop", unit: "%", noRatio: true},
	{id: "kv_read_warm_files_per_s", job: "KV read, cache warm", unit: "file/s"},
	{id: "kv_read_warm_p50_us", job: "KV read, cache warm", unit: "p50 µs", lower: true},
	{id: "kv_read_warm_p99_us", job: "KV read, cache warm", unit: "p99 µs", lower: true},
	{id: "fio_seqwrite_mib_per_s", job: "fio seq write 256K fsync", unit: "MiB/s"},
	{id: "fio_seqread_mib_per_s", job: "fio seq read 256K", unit: "MiB/s"},
	{id: "fio_randread_iops", job: "fio randread 4K QD1", unit: "IOPS"},
	{id: "fio_randread_p99_us", job: "fio randread 4K QD1", unit: "p99 µs", lower: true},
}

// benchRow is one row of the result: the medians over the rounds.
type benchRow struct {
	Metric string `json:"metric"`
	Job    string `json:"job"`
	Unit   string `json:"unit"`
	// Better is "higher" (throughput), "lower" (latency) or empty (no
	// direction: the fraction of pages cached after the drop).
	Better    string   `json:"better,omitempty"`
	DirMedian float64  `json:"dir_median"`
	RefMedian *float64 `json:"ref_median,omitempty"`
	// Ratio is DirMedian / RefMedian.
	Ratio *float64 `json:"ratio,omitempty"`
}

// benchRun is one round of the jobs on one directory.
type benchRun struct {
	Target string             `json:"target"` // "dir" or "ref"
	Round  int                `json:"round"`  // from 1
	KV     kvbench.Result     `json:"kv"`
	Fio    map[string]float64 `json:"fio,omitempty"`
}

// benchReport is the --json output.
type benchReport struct {
	Dir       string     `json:"dir"`
	RefDir    string     `json:"ref_dir,omitempty"`
	Files     int        `json:"files"`
	FileBytes int64      `json:"file_bytes"`
	Rounds    int        `json:"rounds"`
	Fio       bool       `json:"fio"`
	Rows      []benchRow `json:"rows"`
	Runs      []benchRun `json:"runs"`
}

func benchAction(c *cli.Context) error {
	args := c.Args().Slice()
	if len(args) < 1 || len(args) > 2 {
		return withCode(exitUsage, fmt.Errorf("bench: want DIR [REFDIR], got %d arguments; see ctxmemd bench --help", len(args)))
	}
	size, err := config.ParseSize(c.String("size"))
	if err != nil {
		return withCode(exitUsage, fmt.Errorf("--size: %w", err))
	}
	if size < 1 || size > kvbench.MaxSize {
		return withCode(exitUsage, fmt.Errorf("--size %q: want 1 byte to %s", c.String("size"), config.HumanSize(kvbench.MaxSize)))
	}
	files, rounds := c.Int("files"), c.Int("rounds")
	if files < 1 {
		return withCode(exitUsage, fmt.Errorf("--files %d: want at least 1", files))
	}
	if rounds < 1 {
		return withCode(exitUsage, fmt.Errorf("--rounds %d: want at least 1", rounds))
	}
	withFio := c.Bool("fio")
	if withFio {
		if _, err := exec.LookPath("fio"); err != nil {
			return withCode(exitUsage, errors.New("bench: --fio needs fio, which is not on PATH (install fio, or drop --fio)"))
		}
	}

	// One fresh subdirectory per directory, removed at the end whatever
	// happens (the command's context is cancelled on SIGINT/SIGTERM, which
	// stops the jobs between files and kills fio).
	targets := []string{"dir", "ref"}[:len(args)]
	subs := make(map[string]string)
	defer func() {
		for _, s := range subs {
			os.RemoveAll(s)
		}
	}()
	for i, t := range targets {
		s, err := benchSubdir(args[i])
		if err != nil {
			return err
		}
		subs[t] = s
	}

	ctx := c.Context
	rep := benchReport{Dir: args[0], Files: files, FileBytes: size, Rounds: rounds, Fio: withFio}
	if len(args) == 2 {
		rep.RefDir = args[1]
	}
	values := map[string]map[string][]float64{} // target → metric → one value per round
	for _, t := range targets {
		values[t] = map[string][]float64{}
	}
	for r := range rounds {
		order := slices.Clone(targets)
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, t := range order {
			dir := args[slices.Index(targets, t)]
			fmt.Fprintf(c.App.ErrWriter, "bench: round %d/%d: %s\n", r+1, rounds, dir)
			run, err := benchOnce(ctx, subs[t], r, files, size, withFio)
			if err != nil {
				if ctx.Err() != nil { // exit 130; the deferred RemoveAll cleans up
					return fmt.Errorf("bench: interrupted, removing its files: %w", ctx.Err())
				}
				return withCode(exitFailure, fmt.Errorf("bench: %s: %w", dir, err))
			}
			run.Target, run.Round = t, r+1
			rep.Runs = append(rep.Runs, run)
			for id, v := range benchValues(run) {
				values[t][id] = append(values[t][id], v)
			}
		}
	}

	for _, m := range benchMetrics {
		dv, ok := values["dir"][m.id]
		if !ok {
			continue
		}
		row := benchRow{Metric: m.id, Job: m.job, Unit: m.unit, Better: "higher", DirMedian: median(dv)}
		switch {
		case m.noRatio:
			row.Better = ""
		case m.lower:
			row.Better = "lower"
		}
		if rv, ok := values["ref"][m.id]; ok {
			ref := median(rv)
			row.RefMedian = &ref
			if ref > 0 && row.DirMedian >= 0 && !m.noRatio {
				ratio := row.DirMedian / ref
				row.Ratio = &ratio
			}
		}
		rep.Rows = append(rep.Rows, row)
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, rep)
	}
	return writeBench(c.App.Writer, rep)
}

// benchSubdir checks that dir is a directory one can create files in and
// makes a fresh subdirectory there; any problem is a usage error (exit 2).
func benchSubdir(dir string) (string, error) {
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "", withCode(exitUsage, fmt.Errorf("bench: %s does not exist", dir))
	case err != nil:
		return "", withCode(exitUsage, fmt.Errorf("bench: %w", err))
	case !st.IsDir():
		return "", withCode(exitUsage, fmt.Errorf("bench: %s is not a directory", dir))
	}
	s, err := os.MkdirTemp(dir, "ctxmemd-bench-*")
	if err != nil {
		return "", withCode(exitUsage, fmt.Errorf("bench: %s is not writable: %w", dir, err))
	}
	return s, nil
}

// benchOnce runs every job once in sub (round r's own subdirectories,
// removed afterwards).
func benchOnce(ctx context.Context, sub string, r, files int, size int64, withFio bool) (benchRun, error) {
	var run benchRun
	kvDir := filepath.Join(sub, fmt.Sprintf("kv-%d", r+1))
	defer os.RemoveAll(kvDir)
	res, err := kvbench.Run(ctx, kvbench.Options{Dir: kvDir, Files: files, Size: size, Seed: int64(r + 1), Dropped: true, Warm: true})
	if err != nil {
		return run, err
	}
	run.KV = res
	if withFio {
		fioDir := filepath.Join(sub, fmt.Sprintf("fio-%d", r+1))
		defer os.RemoveAll(fioDir)
		if run.Fio, err = benchFio(ctx, fioDir); err != nil {
			return run, err
		}
	}
	return run, nil
}

// benchValues flattens one run into the metrics of benchMetrics.
func benchValues(run benchRun) map[string]float64 {
	v := map[string]float64{}
	phase := func(name string, p *kvbench.Phase) {
		if p == nil {
			return
		}
		v["kv_"+name+"_files_per_s"] = p.FilesPerS
		v["kv_"+name+"_p50_us"] = p.P50us
		v["kv_"+name+"_p99_us"] = p.P99us
	}
	phase("write", &run.KV.Write)
	phase("read", &run.KV.Read)
	phase("read_dropped", run.KV.ReadDropped)
	phase("read_warm", run.KV.ReadWarm)
	if r := run.KV.ResidentAfterDrop; r != nil {
		v["kv_resident_after_drop_pct"] = -1 // unknown (no mapping)
		if *r >= 0 {
			v["kv_resident_after_drop_pct"] = *r * 100
		}
	}
	for k, x := range run.Fio {
		v[k] = x
	}
	return v
}

// fioIO is the part of one direction of a fio job's JSON result read here.
type fioIO struct {
	BwBytes float64 `json:"bw_bytes"`
	IOPS    float64 `json:"iops"`
	ClatNs  struct {
		Percentile map[string]float64 `json:"percentile"`
	} `json:"clat_ns"`
}

// benchFio runs the three fio jobs in dir (created) and returns their
// metrics (the fio_* ids of benchMetrics).
func benchFio(ctx context.Context, dir string) (map[string]float64, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	job := func(name string, extra ...string) (read, write fioIO, err error) {
		args := append([]string{"--name=" + name,
			"--directory=" + strings.ReplaceAll(dir, ":", `\:`), // ':' separates directories in fio
			"--filename=bench.dat", "--size=" + benchFioSize, "--ioengine=psync", "--iodepth=1", "--direct=0",
			"--output-format=json"}, extra...)
		var out, errb bytes.Buffer
		cmd := exec.CommandContext(ctx, "fio", args...)
		cmd.Stdout, cmd.Stderr = &out, &errb
		// Interrupted, fio stops its job processes itself on SIGINT; it is
		// killed if it has not exited 5 s later.
		cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
		cmd.WaitDelay = 5 * time.Second
		if err := cmd.Run(); err != nil {
			if ctx.Err() != nil {
				return read, write, ctx.Err()
			}
			return read, write, fmt.Errorf("fio %s: %w: %s", name, err, strings.TrimSpace(errb.String()))
		}
		js := out.Bytes()
		if i := bytes.IndexByte(js, '{'); i > 0 { // fio may print notes before the JSON
			js = js[i:]
		}
		var res struct {
			Jobs []struct {
				Read  fioIO `json:"read"`
				Write fioIO `json:"write"`
			} `json:"jobs"`
		}
		if err := json.Unmarshal(js, &res); err != nil || len(res.Jobs) == 0 {
			return read, write, fmt.Errorf("fio %s: unreadable JSON output (%v): %.200s", name, err, out.String())
		}
		return res.Jobs[0].Read, res.Jobs[0].Write, nil
	}
	m := map[string]float64{}
	_, w, err := job("seqwrite", "--rw=write", "--bs=256k", "--end_fsync=1")
	if err != nil {
		return nil, err
	}
	m["fio_seqwrite_mib_per_s"] = w.BwBytes / (1 << 20)
	r, _, err := job("seqread", "--rw=read", "--bs=256k", "--invalidate=1")
	if err != nil {
		return nil, err
	}
	m["fio_seqread_mib_per_s"] = r.BwBytes / (1 << 20)
	r, _, err = job("randread", "--rw=randread", "--bs=4k", "--invalidate=1", "--time_based", "--runtime="+benchFioRuntime)
	if err != nil {
		return nil, err
	}
	m["fio_randread_iops"] = r.IOPS
	if p, ok := r.ClatNs.Percentile["99.000000"]; ok {
		m["fio_randread_p99_us"] = p / 1e3
	}
	return m, nil
}

// median returns the median of v (the mean of the middle two for an even
// count); v is not empty.
func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// writeBench prints the table of rep.
func writeBench(w io.Writer, rep benchReport) error {
	fmt.Fprintf(w, "ctxmemd bench: KV job %d files × %s, medians of %d round(s)", rep.Files, config.FormatSize(rep.FileBytes), rep.Rounds)
	if rep.Fio {
		fmt.Fprintf(w, ", fio %s file psync QD1", benchFioSize)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := "JOB\tUNIT\t" + rep.Dir
	if rep.RefDir != "" {
		head += "\t" + rep.RefDir + "\tRATIO\tBETTER"
	}
	fmt.Fprintln(tw, head)
	for _, r := range rep.Rows {
		line := fmt.Sprintf("%s\t%s\t%s", r.Job, r.Unit, benchNum(r.DirMedian, r.Unit))
		if rep.RefDir != "" {
			ratio, ref := "-", "-"
			if r.RefMedian != nil {
				ref = benchNum(*r.RefMedian, r.Unit)
			}
			if r.Ratio != nil {
				ratio = fmt.Sprintf("%.2fx", *r.Ratio)
			}
			better := r.Better
			if better == "" {
				better = "-"
			}
			line += "\t" + ref + "\t" + ratio + "\t" + better
		}
		fmt.Fprintln(tw, line)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if rep.RefDir != "" {
		_, err := fmt.Fprintf(w, "ratio = %s / %s; throughput rows: higher is better; µs rows: lower is better (ratio < 1: %s is faster)\n",
			rep.Dir, rep.RefDir, rep.Dir)
		return err
	}
	return nil
}

// benchNum renders a value of the table: "n/a" for an unknown fraction,
// no decimals from 100 up, one below.
func benchNum(x float64, unit string) string {
	switch {
	case unit == "%" && x < 0:
		return "n/a"
	case x >= 100:
		return fmt.Sprintf("%.0f", x)
	}
	return fmt.Sprintf("%.1f", x)
}
