// Command kvjob measures the KV-cache object pattern fio cannot express
// directly: create+write+close N files of S bytes, then open+read+close
// them in random order, checking every byte. It prints one JSON object:
// per-file latency percentiles (µs) and throughput (MiB/s) of each phase.
//
//	go run ./tests/bench/kvjob -dir /mnt/ctxmem/default/bench -files 2000 -size 256KiB
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ctxmem/ctxmemd/tests/workloads"
)

// phase is the result of one phase, latencies in µs per file.
type phase struct {
	Files   int     `json:"files"`
	MiBPerS float64 `json:"mib_per_s"`
	P50us   float64 `json:"p50_us"`
	P99us   float64 `json:"p99_us"`
	MaxUs   float64 `json:"max_us"`
}

type result struct {
	Dir   string `json:"dir"`
	Size  int64  `json:"file_bytes"`
	Write phase  `json:"write"`
	Read  phase  `json:"read"`
}

func main() {
	dir := flag.String("dir", "", "directory to create the files in (created; emptied of its files afterwards)")
	files := flag.Int("files", 2000, "number of files")
	sizeS := flag.String("size", "256KiB", "bytes per file (suffixes KiB, MiB)")
	seed := flag.Int64("seed", 1, "seed of the read order")
	keep := flag.Bool("keep", false, "keep the files")
	flag.Parse()
	size, err := parseSize(*sizeS)
	if err != nil || *dir == "" || *files < 1 {
		fmt.Fprintln(os.Stderr, "kvjob: need -dir, -files >= 1 and a valid -size:", err)
		os.Exit(2)
	}
	res, err := run(*dir, *files, size, *seed, *keep)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kvjob:", err)
		os.Exit(1)
	}
	json.NewEncoder(os.Stdout).Encode(res)
}

func parseSize(s string) (int64, error) {
	mult := int64(1)
	for suf, m := range map[string]int64{"KiB": 1 << 10, "MiB": 1 << 20, "K": 1 << 10, "M": 1 << 20} {
		if strings.HasSuffix(s, suf) {
			s, mult = strings.TrimSuffix(s, suf), m
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return n * mult, nil
}

func run(dir string, files int, size, seed int64, keep bool) (result, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return result{}, err
	}
	name := func(i int) string { return filepath.Join(dir, fmt.Sprintf("kv-%06d.bin", i)) }
	buf := make([]byte, size)
	lat := make([]time.Duration, files)
	for i := 0; i < files; i++ {
		workloads.Fill(buf, name(i), 1, 0) // outside the timed section
		t0 := time.Now()
		f, err := os.OpenFile(name(i), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
		if err != nil {
			return result{}, err
		}
		_, werr := f.Write(buf)
		cerr := f.Close()
		lat[i] = time.Since(t0)
		if err := errors.Join(werr, cerr); err != nil {
			return result{}, fmt.Errorf("write %s: %w", name(i), err)
		}
	}
	res := result{Dir: dir, Size: size}
	res.Write = summarize(lat, size)

	order := rand.New(rand.NewSource(seed)).Perm(files)
	for j, i := range order {
		t0 := time.Now()
		f, err := os.Open(name(i))
		if err != nil {
			return result{}, err
		}
		n, rerr := f.ReadAt(buf, 0)
		cerr := f.Close()
		lat[j] = time.Since(t0)
		if n != len(buf) || (rerr != nil && n != len(buf)) || cerr != nil {
			return result{}, fmt.Errorf("read %s: %d of %d bytes: %v %v", name(i), n, len(buf), rerr, cerr)
		}
		if at := workloads.Verify(buf, name(i), 1, 0); at >= 0 {
			return result{}, fmt.Errorf("read %s: wrong byte at %d", name(i), at)
		}
	}
	res.Read = summarize(lat, size)
	if !keep {
		for i := 0; i < files; i++ {
			os.Remove(name(i))
		}
	}
	return res, nil
}

// summarize computes percentiles of the per-file latencies and the
// throughput over the timed sections only (pattern generation and checking
// excluded): files × size / Σ latency.
func summarize(lat []time.Duration, size int64) phase {
	s := slices.Clone(lat)
	slices.Sort(s)
	pct := func(q float64) float64 {
		i := min(len(s)-1, max(0, int(q*float64(len(s))+0.5)-1))
		return float64(s[i].Nanoseconds()) / 1e3
	}
	p := phase{Files: len(s), P50us: pct(0.50), P99us: pct(0.99), MaxUs: pct(1)}
	var total time.Duration
	for _, d := range s {
		total += d
	}
	if total > 0 {
		p.MiBPerS = float64(int64(len(s))*size) / (1 << 20) / total.Seconds()
	}
	return p
}
