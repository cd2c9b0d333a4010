package tests

// Benchmark of G3.5 (the shared pool) end to end, each figure against a
// reference measured in the same run on the same disk: two `ctxmemd run`
// daemons in the root network namespace open one pool file (`ctxmemd pool
// format`, O_DIRECT), a nats-server binary on 127.0.0.1 carries the
// control bus and the pool index, one `ctxmemd scheduler` relays commands.
//
//  1. Pool write: host A holds N files of 4 MiB (256 KiB blocks); each is
//     shared with an operator command (client.Control, Op share), one at a
//     time: every block is an O_DIRECT write of a record and its read-back
//     verification. Reference: O_DIRECT pwrite of the same bytes in 256 KiB
//     writes to a raw file of the pool's size in the same directory, once
//     write-only and once write + read-back + compare.
//  2. Pool read: host B reads every shared file through its mount with
//     O_DIRECT (FUSE → G3.5 → pool; the first lookup imports the file).
//     Reference: O_DIRECT pread of the same bytes in 256 KiB reads from the
//     raw file (opened once per 4 MiB, as B opens each file), right before
//     and right after B reads.
//  3. Import: B's open of a shared name it never saw (lookup → index →
//     import → open), p50/p99.
//  4. Wanted → readable: A writes fresh one-block files nobody shared; B
//     polls each until it reads it (B's miss → report → scheduler → share
//     command to A → pool write → index publish → B's watch), p50/p99.
//
//	CTXMEM_E2E=1 CTXMEM_BENCH=1 go test -count=1 -run TestBenchPool -v ./tests/
//
// CTXMEM_BENCH_POOL_FILES sets N (default 128, i.e. 512 MiB).

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxmem/ctxmemd/tests/harness"
)

const (
	benchPoolBlock  = 256 << 10 // namespace block size and reference I/O size, bytes
	benchPoolFile   = 4 << 20   // bytes per file of steps 1-3
	benchPoolSize   = 2 << 30   // pool file and raw file size, bytes
	benchPoolFresh  = 20        // files of step 4
	benchPoolCB     = "bench"   // cluster name
	benchPoolDir    = "bench"   // directory of the step 1-3 files in the namespace
	benchPoolWanted = "wanted"  // directory of the step 4 files
)

// benchPoolFiles is N, the number of 4 MiB files of steps 1-3.
func benchPoolFiles(t *testing.T) int {
	t.Helper()
	if v := os.Getenv("CTXMEM_BENCH_POOL_FILES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || int64(n)*benchPoolFile > benchPoolSize/2 {
			t.Fatalf("CTXMEM_BENCH_POOL_FILES=%q: want 1..%d", v, benchPoolSize/2/benchPoolFile)
		}
		return n
	}
	return 128
}

// pctl is the nearest-rank q-quantile (0 < q <= 1) of d; d is sorted in
// place. 0 for an empty slice.
func pctl(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	i := int(float64(len(d))*q+0.999999) - 1
	return d[max(0, min(i, len(d)-1))]
}

func mibps(bytes int64, d time.Duration) float64 {
	return float64(bytes) / (1 << 20) / d.Seconds()
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// statInt is the integer counter key of status --json stats.
func statInt(t *testing.T, st harness.Status, key string) int64 {
	t.Helper()
	var v int64
	if raw, ok := st.Stats[key]; ok {
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatalf("stats.%s: %v", key, err)
		}
	}
	return v
}

// rawDirectWrite writes total bytes of data (len(data) per pwrite,
// aligned) to fd from offset base with O_DIRECT; with verify every write
// is read back into back and compared, as the pool writer does. It
// returns the elapsed time.
func rawDirectWrite(fd int, base, total int64, data, back []byte, verify bool) (time.Duration, error) {
	start := time.Now()
	for off := int64(0); off < total; off += int64(len(data)) {
		if n, err := unix.Pwrite(fd, data, base+off); err != nil || n != len(data) {
			return 0, fmt.Errorf("raw pwrite at %d: %d bytes, %v", base+off, n, err)
		}
		if verify {
			if n, err := unix.Pread(fd, back, base+off); err != nil || n != len(back) {
				return 0, fmt.Errorf("raw read-back at %d: %d bytes, %v", base+off, n, err)
			}
			if !bytes.Equal(back, data) {
				return 0, fmt.Errorf("raw read-back at %d differs", base+off)
			}
		}
	}
	return time.Since(start), nil
}

// rawDirectRead reads total bytes of path from offset 0 with O_DIRECT in
// len(buf) preads, opening the file anew every perOpen bytes (as a reader
// of perOpen-byte files does). It returns the elapsed time and, per open,
// the time from open to the first pread's end.
func rawDirectRead(path string, total, perOpen int64, buf []byte) (time.Duration, []time.Duration, error) {
	var firsts []time.Duration
	start := time.Now()
	for base := int64(0); base < total; base += perOpen {
		t0 := time.Now()
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
		if err != nil {
			return 0, nil, fmt.Errorf("open %s: %w", path, err)
		}
		for off := int64(0); off < perOpen; off += int64(len(buf)) {
			if n, err := unix.Pread(fd, buf, base+off); err != nil || n != len(buf) {
				unix.Close(fd)
				return 0, nil, fmt.Errorf("raw pread at %d: %d bytes, %v", base+off, n, err)
			}
			if off == 0 {
				firsts = append(firsts, time.Since(t0))
			}
		}
		unix.Close(fd)
	}
	return time.Since(start), firsts, nil
}

// fileRead is one timed O_DIRECT read of a whole file through a mount.
type fileRead struct {
	open, first, total time.Duration // from the open call: open done, first block read, file read
	data               []byte
}

// readFileTimed opens path with O_DIRECT and reads it in len(buf) preads
// (len(buf) a multiple of 4 KiB), timing the open, the first block and
// the whole; size is the expected length.
func readFileTimed(path string, size int, buf []byte) (fileRead, error) {
	var r fileRead
	t0 := time.Now()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		return r, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	r.open = time.Since(t0)
	out := make([]byte, 0, size)
	for off := 0; off < size; off += len(buf) {
		n, err := unix.Pread(fd, buf, int64(off))
		if err != nil {
			return r, &fs.PathError{Op: fmt.Sprintf("pread at %d", off), Path: path, Err: err}
		}
		if off == 0 {
			r.first = time.Since(t0)
		}
		if n == 0 {
			break
		}
		out = append(out, buf[:n]...)
	}
	r.total = time.Since(t0)
	r.data = out
	return r, nil
}

// writeFresh writes benchPoolFresh one-block files dir/<prefix>NN.kv on d
// and returns their names.
func writeFresh(t *testing.T, d *harness.Daemon, dir, prefix string) []string {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(d.Namespace(), dir), 0o755); err != nil {
		t.Fatal(err)
	}
	var names []string
	for i := 0; i < benchPoolFresh; i++ {
		name := fmt.Sprintf("%s/%s%02d.kv", dir, prefix, i)
		names = append(names, name)
		if err := os.WriteFile(filepath.Join(d.Namespace(), name), kvBytes(name, benchPoolBlock), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return names
}

// hostObjects is the object count host reported (status --cluster, as
// seen from d), -1 when unknown.
func hostObjects(t *testing.T, d *harness.Daemon, host string) int64 {
	t.Helper()
	cv, err := clusterView(t, d)
	if err != nil {
		return -1
	}
	for _, h := range cv.Hosts {
		if h.Host == host {
			return h.Objects
		}
	}
	return -1
}

// pollRead reads name on d with O_DIRECT every 10 ms until it succeeds
// and returns the number of attempts (it fails the test on wrong bytes,
// an error other than ENOENT, or 30 s after start).
func pollRead(t *testing.T, d *harness.Daemon, name string, start time.Time) int {
	t.Helper()
	p := filepath.Join(d.Namespace(), name)
	for n := 1; ; n++ {
		got, err := readDirect(p)
		if err == nil {
			if !bytes.Equal(got, kvBytes(name, benchPoolBlock)) {
				t.Fatalf("%s on %s: WRONG BYTES", name, d.Root)
			}
			return n
		}
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s on %s: %v", name, d.Root, err)
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("%s: not readable on %s within 30 s of the first read", name, d.Root)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
