// Package kvbench is the KV-cache object job that fio cannot express
// directly: create+write+close Options.Files files of Options.Size bytes
// each, then open+read+close every one of them in a random order, checking
// every byte. Each phase reports the per-file latency percentiles (p50, p99,
// max, in µs per file), files/s and MiB/s.
//
// With Options.Dropped and Options.Warm it adds two more read passes, each
// in its own random order: "read_dropped" after
// posix_fadvise(POSIX_FADV_DONTNEED) of every file (the page cache of that
// file only: on tmpfs this is a no-op, the pages are the file; on a FUSE
// mount it empties the mount's cache, so every read goes to the daemon — or,
// with passthrough, to the backing file), and "read_warm" right after it,
// every page cached. The fraction of the files' pages still resident after
// the fadvise (mincore) is reported as Result.ResidentAfterDrop.
//
// tests/bench/kvjob (used by tests/bench/fio_bench.sh) prints a Result as
// JSON; `ctxmemd bench` runs it on two directories side by side.
package kvbench

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ctxmem/ctxmemd/replay"
)

// MaxSize is the largest Options.Size accepted, in bytes (1 GiB): the job
// holds one file's bytes in memory.
const MaxSize = 1 << 30

// Options describe one run of the job.
type Options struct {
	// Dir is the directory the files are created in (created with its
	// parents when missing; it is not removed afterwards).
	Dir string
	// Files is the number of files (at least 1).
	Files int
	// Size is the number of bytes of every file (1 … MaxSize).
	Size int64
	// Seed seeds the random read orders (the same seed gives the same
	// orders).
	Seed int64
	// Keep keeps the files after the run. Without it Run removes every
	// file it created, also when it fails or its context is cancelled.
	Keep bool
	// Dropped adds the read_dropped pass: posix_fadvise(POSIX_FADV_DONTNEED)
	// of every file, then open+read+close of every file in a random order.
	Dropped bool
	// Warm adds the read_warm pass (after the others): open+read+close of
	// every file in a random order, page cache warm.
	Warm bool
}

// Phase is the result of one phase over every file. Latencies are of one
// file (open or create, the whole write or read, close), in µs; the
// throughputs are over the timed sections only (pattern generation and
// checking excluded): Files / Σ latency and Files × Size / Σ latency.
type Phase struct {
	// Files is the number of files of the phase.
	Files int `json:"files"`
	// FilesPerS is the throughput in files per second.
	FilesPerS float64 `json:"files_per_s"`
	// MiBPerS is the throughput in MiB (2^20 bytes) per second.
	MiBPerS float64 `json:"mib_per_s"`
	// P50us is the median latency per file, in µs.
	P50us float64 `json:"p50_us"`
	// P99us is the 99th percentile latency per file, in µs.
	P99us float64 `json:"p99_us"`
	// MaxUs is the largest latency of one file, in µs.
	MaxUs float64 `json:"max_us"`
}

// Result is the result of one run; its JSON form is what tests/bench/kvjob
// prints (tests/bench/fio_bench.sh reads it).
type Result struct {
	// Dir is Options.Dir.
	Dir string `json:"dir"`
	// Size is the number of bytes of every file.
	Size int64 `json:"file_bytes"`
	// Write is the create+write+close phase, in file-number order.
	Write Phase `json:"write"`
	// Read is the open+read+close phase right after the writes, in a
	// random order.
	Read Phase `json:"read"`
	// ReadDropped is the read pass after the fadvise (Options.Dropped only).
	ReadDropped *Phase `json:"read_dropped,omitempty"`
	// ResidentAfterDrop is the fraction (0 … 1) of the files' pages still
	// in the page cache after the fadvise, counted with mincore; -1 when
	// the files could not be mapped (unknown). Options.Dropped only.
	ResidentAfterDrop *float64 `json:"resident_after_drop,omitempty"`
	// ReadWarm is the read pass with the page cache warm (Options.Warm only).
	ReadWarm *Phase `json:"read_warm,omitempty"`
}

// Run runs the job described by o. It checks ctx between files and returns
// ctx's error when it is cancelled. A read that returns fewer bytes than
// were written, or a wrong byte, is an error.
func Run(ctx context.Context, o Options) (Result, error) {
	if o.Dir == "" || o.Files < 1 || o.Size < 1 || o.Size > MaxSize {
		return Result{}, fmt.Errorf("kvbench: need a directory, at least 1 file and a size of 1 to %d bytes (got %q, %d files, %d bytes)", MaxSize,
			o.Dir, o.Files, o.Size)
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return Result{}, err
	}
	j := &job{ctx: ctx, buf: make([]byte, o.Size)}
	for i := 0; i < o.Files; i++ {
		p := filepath.Join(o.Dir, fmt.Sprintf("kv-%06d.bin", i))
		h := fnv.New64a()
		h.Write([]byte(p)) // a pattern of its own per file and per directory
		j.names = append(j.names, p)
		j.ids = append(j.ids, int64(h.Sum64()))
	}
	created := 0
	if !o.Keep {
		defer func() {
			for _, p := range j.names[:created] {
				os.Remove(p)
			}
		}()
	}

	lat := make([]time.Duration, o.Files)
	for i := range o.Files {
		if err := ctx.Err(); err != nil {
			return Result{}, err
		}
		replay.Fill(j.ids[i], j.buf) // outside the timed section
		t0 := time.Now()
		f, err := os.OpenFile(j.names[i], os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
		if err != nil {
			return Result{}, err
		}
		created = i + 1
		_, werr := f.Write(j.buf)
		cerr := f.Close()
		lat[i] = time.Since(t0)
		if err := errors.Join(werr, cerr); err != nil {
			return Result{}, fmt.Errorf("write %s: %w", j.names[i], err)
		}
	}
	res := Result{Dir: o.Dir, Size: o.Size, Write: summarize(lat, o.Size)}

	rng := rand.New(rand.NewSource(o.Seed))
	var err error
	if res.Read, err = j.readAll(rng.Perm(o.Files)); err != nil {
		return Result{}, err
	}
	if o.Dropped {
		frac, err := j.dropAll(o.Size)
		if err != nil {
			return Result{}, err
		}
		res.ResidentAfterDrop = &frac
		p, err := j.readAll(rng.Perm(o.Files))
		if err != nil {
			return Result{}, err
		}
		res.ReadDropped = &p
	}
	if o.Warm {
		p, err := j.readAll(rng.Perm(o.Files))
		if err != nil {
			return Result{}, err
		}
		res.ReadWarm = &p
	}
	return res, nil
}

// job is the state of one Run: the files' paths and pattern ids, and the
// buffer of one file.
type job struct {
	ctx   context.Context
	names []string
	ids   []int64
	buf   []byte
}

// readAll opens, reads whole and closes every file in order (timed),
// checking each file's bytes (untimed).
func (j *job) readAll(order []int) (Phase, error) {
	lat := make([]time.Duration, len(order))
	for k, i := range order {
		if err := j.ctx.Err(); err != nil {
			return Phase{}, err
		}
		clear(j.buf)
		t0 := time.Now()
		f, err := os.Open(j.names[i])
		if err != nil {
			return Phase{}, err
		}
		n, rerr := f.ReadAt(j.buf, 0)
		cerr := f.Close()
		lat[k] = time.Since(t0)
		if n != len(j.buf) || cerr != nil {
			return Phase{}, fmt.Errorf("read %s: %d of %d bytes: %v", j.names[i], n, len(j.buf), errors.Join(rerr, cerr))
		}
		if at := replay.Verify(j.ids[i], j.buf); at >= 0 {
			return Phase{}, fmt.Errorf("read %s: wrong byte at offset %d", j.names[i], at)
		}
	}
	return summarize(lat, int64(len(j.buf))), nil
}

// dropAll asks the kernel to drop every file's cached pages
// (POSIX_FADV_DONTNEED; pages still dirty are written back first and a
// second call drops them), then returns the fraction of the files' pages
// still resident, counted with mincore on a read-only mapping (-1 when a
// file cannot be mapped).
func (j *job) dropAll(size int64) (float64, error) {
	for range 2 {
		for _, p := range j.names {
			if err := j.ctx.Err(); err != nil {
				return 0, err
			}
			f, err := os.Open(p)
			if err != nil {
				return 0, err
			}
			err = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
			f.Close()
			if err != nil {
				return 0, fmt.Errorf("fadvise %s: %w", p, err)
			}
		}
	}
	var resident, total int
	for _, p := range j.names {
		r, t, err := residentPages(p, size)
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

// summarize computes the percentiles of the per-file latencies (nearest
// rank) and the throughput over the timed sections: files × size / Σ latency.
func summarize(lat []time.Duration, size int64) Phase {
	s := slices.Clone(lat)
	slices.Sort(s)
	pct := func(q float64) float64 {
		i := min(len(s)-1, max(0, int(q*float64(len(s))+0.5)-1))
		return float64(s[i].Nanoseconds()) / 1e3
	}
	p := Phase{Files: len(s), P50us: pct(0.50), P99us: pct(0.99), MaxUs: pct(1)}
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
