// Command kvjob measures the KV-cache object pattern fio cannot express
// directly: create+write+close N files of S bytes, then open+read+close
// them in random order, checking every byte. It prints one JSON object:
// per-file latency percentiles (µs), files/s and MiB/s of each phase.
//
// With -dropped and -warm it adds two more read passes (each in its own
// random order): "read_dropped" after posix_fadvise(POSIX_FADV_DONTNEED) of
// every file (the page cache of that file only: on tmpfs this is a no-op,
// the pages are the file; on a FUSE mount it empties the mount's cache, so
// every read goes to the daemon — or, with passthrough, to the backing
// file), and "read_warm" right after it, every page cached. The fraction of
// pages still resident after the fadvise (mincore) is reported as
// resident_after_drop.
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
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ctxmem/ctxmemd/tests/workloads"
)

// phase is the result of one phase, latencies in µs per file.
type phase struct {
	Files     int     `json:"files"`
	FilesPerS float64 `json:"files_per_s"`
	MiBPerS   float64 `json:"mib_per_s"`
	P50us     float64 `json:"p50_us"`
	P99us     float64 `json:"p99_us"`
	MaxUs     float64 `json:"max_us"`
}

type result struct {
	Dir   string `json:"dir"`
	Size  int64  `json:"file_bytes"`
	Write phase  `json:"write"`
	Read  phase  `json:"read"`
	// Only with -dropped / -warm.
	ReadDropped       *phase   `json:"read_dropped,omitempty"`
	ResidentAfterDrop *float64 `json:"resident_after_drop,omitempty"`
	ReadWarm          *phase   `json:"read_warm,omitempty"`
}

func main() {
	dir := flag.String("dir", "", "directory to create the files in (created; emptied of its files afterwards)")
	files := flag.Int("files", 2000, "number of files")
	sizeS := flag.String("size", "256KiB", "bytes per file (suffixes KiB, MiB)")
	seed := flag.Int64("seed", 1, "seed of the read order")
	keep := flag.Bool("keep", false, "keep the files")
	dropped := flag.Bool("dropped", false, "add a read pass after posix_fadvise(DONTNEED) of every file")
	warm := flag.Bool("warm", false, "add a read pass with the page cache warm (after the others)")
	flag.Parse()
	size, err := parseSize(*sizeS)
	if err != nil || *dir == "" || *files < 1 {
		fmt.Fprintln(os.Stderr, "kvjob: need -dir, -files >= 1 and a valid -size:", err)
		os.Exit(2)
	}
	res, err := run(*dir, *files, size, *seed, *keep, *dropped, *warm)
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

func run(dir string, files int, size, seed int64, keep, dropped, warm bool) (result, error) {
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

	rng := rand.New(rand.NewSource(seed))
	var err error
	if res.Read, err = readAll(name, files, buf, rng.Perm(files)); err != nil {
		return result{}, err
	}
	if dropped {
		frac, err := dropAll(name, files, size)
		if err != nil {
			return result{}, err
		}
		res.ResidentAfterDrop = &frac
		p, err := readAll(name, files, buf, rng.Perm(files))
		if err != nil {
			return result{}, err
		}
		res.ReadDropped = &p
	}
	if warm {
		p, err := readAll(name, files, buf, rng.Perm(files))
		if err != nil {
			return result{}, err
		}
		res.ReadWarm = &p
	}
	if !keep {
		for i := 0; i < files; i++ {
			os.Remove(name(i))
		}
	}
	return res, nil
}

// readAll opens, reads whole and closes every file in order (timed),
// checking each file's bytes (untimed).
func readAll(name func(int) string, files int, buf []byte, order []int) (phase, error) {
	lat := make([]time.Duration, files)
	for j, i := range order {
		t0 := time.Now()
		f, err := os.Open(name(i))
		if err != nil {
			return phase{}, err
		}
		n, rerr := f.ReadAt(buf, 0)
		cerr := f.Close()
		lat[j] = time.Since(t0)
		if n != len(buf) || (rerr != nil && n != len(buf)) || cerr != nil {
			return phase{}, fmt.Errorf("read %s: %d of %d bytes: %v %v", name(i), n, len(buf), rerr, cerr)
		}
		if at := workloads.Verify(buf, name(i), 1, 0); at >= 0 {
			return phase{}, fmt.Errorf("read %s: wrong byte at %d", name(i), at)
		}
	}
	return summarize(lat, int64(len(buf))), nil
}

// dropAll asks the kernel to drop every file's cached pages
// (POSIX_FADV_DONTNEED; pages still dirty are written back first and a
// second call drops them), then returns the fraction of the files' pages
// still resident, counted with mincore on a read-only mapping.
func dropAll(name func(int) string, files int, size int64) (float64, error) {
	for pass := 0; pass < 2; pass++ {
		for i := 0; i < files; i++ {
			f, err := os.Open(name(i))
			if err != nil {
				return 0, err
			}
			err = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
			f.Close()
			if err != nil {
				return 0, fmt.Errorf("fadvise %s: %w", name(i), err)
			}
		}
	}
	var resident, total int
	for i := 0; i < files; i++ {
		r, t, err := residentPages(name(i), size)
		if err != nil {
			return -1, nil // no mapping (mmap refused): unknown
		}
		resident += r
		total += t
	}
	if total == 0 {
		return 0, nil
	}
	return float64(resident) / float64(total), nil
}

// residentPages counts the resident pages of the first size bytes of a file.
func residentPages(path string, size int64) (resident, total int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return 0, 0, err
	}
	defer unix.Munmap(m)
	pg := os.Getpagesize()
	vec := make([]byte, (int(size)+pg-1)/pg)
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		return 0, 0, e
	}
	for _, v := range vec {
		resident += int(v & 1)
	}
	return resident, len(vec), nil
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
		p.FilesPerS = float64(len(s)) / total.Seconds()
	}
	return p
}
