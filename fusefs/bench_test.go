package fusefs

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/internal/testenv"
)

// The benchmarks compare the mount (fake in-memory backend) with a plain
// directory given by CTXMEM_BENCH_REF (e.g. a tmpfs), on the fio-like
// workloads the project targets. Run:
//
//	CTXMEM_BENCH_REF=/dev/shm/ref go test ./fusefs -run '^$' -bench .
func benchDirs(b *testing.B, fn func(b *testing.B, dir string)) {
	b.Run("fuse", func(b *testing.B) {
		m := mount(b, nil, benchOpts)
		fn(b, m.ns(""))
	})
	if ref := os.Getenv("CTXMEM_BENCH_REF"); ref != "" {
		b.Run("ref", func(b *testing.B) {
			dir, err := os.MkdirTemp(ref, "bench")
			if err != nil {
				b.Fatal(err)
			}
			defer os.RemoveAll(dir)
			fn(b, dir)
		})
	}
}

const kvSize = 256 << 10

// BenchmarkKVRead: open + one 256 KiB read + close of existing files.
func BenchmarkKVRead(b *testing.B) {
	benchDirs(b, func(b *testing.B, dir string) {
		const files = 64
		data := pattern(1, kvSize)
		for i := 0; i < files; i++ {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprint(i)), data, 0o644); err != nil {
				b.Fatal(err)
			}
		}
		buf := make([]byte, kvSize)
		b.SetBytes(kvSize)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			fd, err := syscall.Open(filepath.Join(dir, fmt.Sprint(i%files)), syscall.O_RDONLY, 0)
			if err != nil {
				b.Fatal(err)
			}
			if n, err := syscall.Read(fd, buf); n != kvSize || err != nil {
				b.Fatal(n, err)
			}
			syscall.Close(fd)
		}
	})
}

// BenchmarkKVWrite: create + one 256 KiB write + close (files reused by
// name round-robin, so the tree stays small).
func BenchmarkKVWrite(b *testing.B) {
	benchDirs(b, func(b *testing.B, dir string) {
		data := pattern(2, kvSize)
		b.SetBytes(kvSize)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			p := filepath.Join(dir, fmt.Sprint(i%256))
			fd, err := syscall.Open(p, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_TRUNC, 0o644)
			if err != nil {
				b.Fatal(err)
			}
			if n, err := syscall.Write(fd, data); n != kvSize || err != nil {
				b.Fatal(n, err)
			}
			syscall.Close(fd)
		}
	})
}

// BenchmarkSeqRead256K: sequential 256 KiB reads of a 64 MiB file.
func BenchmarkSeqRead256K(b *testing.B) {
	benchDirs(b, func(b *testing.B, dir string) {
		const size = 64 << 20
		p := filepath.Join(dir, "big")
		if err := os.WriteFile(p, pattern(3, size), 0o644); err != nil {
			b.Fatal(err)
		}
		fd, err := syscall.Open(p, syscall.O_RDONLY, 0)
		if err != nil {
			b.Fatal(err)
		}
		defer syscall.Close(fd)
		buf := make([]byte, kvSize)
		b.SetBytes(kvSize)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			off := int64(i%(size/kvSize)) * kvSize
			if n, err := syscall.Pread(fd, buf, off); n != kvSize || err != nil {
				b.Fatal(n, err)
			}
		}
	})
}

// BenchmarkRandRead4K: random 4 KiB reads of a 64 MiB file.
func BenchmarkRandRead4K(b *testing.B) {
	benchDirs(b, func(b *testing.B, dir string) {
		const size = 64 << 20
		p := filepath.Join(dir, "big")
		if err := os.WriteFile(p, pattern(4, size), 0o644); err != nil {
			b.Fatal(err)
		}
		fd, err := syscall.Open(p, syscall.O_RDONLY, 0)
		if err != nil {
			b.Fatal(err)
		}
		defer syscall.Close(fd)
		buf := make([]byte, 4096)
		r := rand.New(rand.NewPCG(1, 2))
		b.SetBytes(4096)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			off := r.Int64N(size/4096) * 4096
			if n, err := syscall.Pread(fd, buf, off); n != 4096 || err != nil {
				b.Fatal(n, err)
			}
		}
	})
}

var benchOpts = Options{}

// BenchmarkFioCompare runs the project's fio workloads against the mount
// (fake in-memory backend) and CTXMEM_FIO_REF (a tmpfs directory) and logs
// the ratios; CTXMEM_FIO_ARGS adds fio options (e.g. --invalidate=0 to
// keep the page cache fio otherwise drops before reading). It measures,
// it does not assert, and runs its jobs once whatever b.N is; run it with
//
//	CTXMEM_FIO_REF=/dev/shm/ref go test ./fusefs -run '^$' -bench FioCompare -benchtime 1x -v
func BenchmarkFioCompare(b *testing.B) {
	ref := os.Getenv("CTXMEM_FIO_REF")
	if ref == "" {
		b.Skip("set CTXMEM_FIO_REF to a tmpfs directory")
	}
	fio := testenv.RequireTool(b, "fio", "apt-get install fio")
	m := mount(b, nil, benchOpts)
	refDir, err := os.MkdirTemp(ref, "fio")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(refDir)
	jobs := []struct {
		name string
		args []string
	}{
		{"kv-write", []string{"--rw=write", "--bs=256k", "--filesize=256k", "--nrfiles=2000", "--openfiles=1", "--create_on_open=1", "--fallocate=none"}},
		{"kv-read", []string{"--rw=read", "--bs=256k", "--filesize=256k", "--nrfiles=2000", "--openfiles=1"}},
		{"seq-read-256k", []string{"--rw=read", "--bs=256k", "--filesize=256m", "--nrfiles=1", "--time_based", "--runtime=3"}},
		{"rand-read-4k", []string{"--rw=randread", "--bs=4k", "--filesize=256m", "--nrfiles=1", "--time_based", "--runtime=3"}},
	}
	bw := func(dir, name string, args []string) float64 {
		args = append(args, strings.Fields(os.Getenv("CTXMEM_FIO_ARGS"))...)
		cmd := exec.Command(fio, append([]string{"--name=" + name, "--directory=" + dir, "--ioengine=psync",
			"--output-format=json", "--group_reporting"}, args...)...)
		out, err := cmd.Output()
		if err != nil {
			b.Fatalf("fio %s in %s: %v", name, dir, err)
		}
		var res struct {
			Jobs []struct {
				Read, Write struct {
					BwBytes float64 `json:"bw_bytes"`
				}
			}
		}
		if err := json.Unmarshal(out[bytes.IndexByte(out, '{'):], &res); err != nil {
			b.Fatal(err)
		}
		return res.Jobs[0].Read.BwBytes + res.Jobs[0].Write.BwBytes
	}
	for _, j := range jobs {
		f := bw(m.ns(""), j.name, j.args)
		r := bw(refDir, j.name, j.args)
		b.Logf("%-14s fuse %8.0f MiB/s  tmpfs %8.0f MiB/s  ratio %.2f", j.name, f/(1<<20), r/(1<<20), f/r)
	}
}

// BenchmarkWarmReadFigures writes 2,000 files of 256 KiB and reads them
// all twice (open + one read + close each), logging files/s per pass and
// reporting the second (warm) pass: the before/after figure for the cost
// of answering OPEN (issue 11 item 5). It runs once whatever b.N is; run
// it with
//
//	go test ./fusefs -run '^$' -bench WarmReadFigures -benchtime 1x -v
func BenchmarkWarmReadFigures(b *testing.B) {
	m := mount(b, nil, benchOpts)
	dir := m.ns("")
	const files = 2000
	data := pattern(1, kvSize)
	for i := 0; i < files; i++ {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprint(i)), data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	buf := make([]byte, kvSize)
	for pass := 1; pass <= 2; pass++ {
		start := time.Now()
		for i := 0; i < files; i++ {
			fd, err := syscall.Open(filepath.Join(dir, fmt.Sprint(i)), syscall.O_RDONLY, 0)
			if err != nil {
				b.Fatal(err)
			}
			if n, err := syscall.Read(fd, buf); n != kvSize || err != nil {
				b.Fatal(n, err)
			}
			syscall.Close(fd)
		}
		el := time.Since(start)
		b.Logf("pass %d: %d files of 256 KiB in %v: %.0f files/s", pass, files, el, files/el.Seconds())
		if pass == 2 {
			b.ReportMetric(files/el.Seconds(), "files/s")
		}
	}
}
