//go:build bench

package tests

// TestBenchPool is built only with -tags bench (make bench, through
// tests/bench/run.sh): a benchmark must be asked for, and so never shows
// as a SKIP in make test.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/sys/unix"

	"github.com/ctxmem/ctxmemd/internal/testenv"
	"github.com/ctxmem/ctxmemd/sidecar/client"
	"github.com/ctxmem/ctxmemd/sidecar/msg"
	"github.com/ctxmem/ctxmemd/tests/harness"
)

func TestBenchPool(t *testing.T) {
	if os.Getenv("CTXMEM_BENCH") != "1" {
		t.Skip("benchmark: set CTXMEM_BENCH=1 (and CTXMEM_E2E=1) to run")
	}
	bin := needE2E(t)
	natsBin := needTool(t, "nats-server", "make deps-test installs it")
	nFiles := benchPoolFiles(t)
	total := int64(nFiles) * benchPoolFile

	// The pool and the raw reference file side by side on one disk.
	dir, err := os.MkdirTemp("/tmp", "ctxm-benchpool-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	poolPath, rawPath := filepath.Join(dir, "pool.img"), filepath.Join(dir, "raw.img")
	run(t, bin, "pool", "format", "--size", "2GiB", "--extent-size", "64MiB", poolPath)
	info, err := exec.Command(bin, "pool", "info", poolPath).CombinedOutput()
	if err != nil {
		t.Fatalf("pool info: %v\n%s", err, info)
	}
	if !strings.Contains(string(info), "I/O direct") {
		t.Fatalf("the pool is not opened with O_DIRECT here, the comparison would be meaningless:\n%s", info)
	}
	rawFd, err := unix.Open(rawPath, unix.O_RDWR|unix.O_CREAT|unix.O_DIRECT|unix.O_CLOEXEC, 0o600)
	if err != nil {
		t.Fatalf("raw file with O_DIRECT: %v", err)
	}
	defer unix.Close(rawFd)
	if err := unix.Fallocate(rawFd, 0, 0, benchPoolSize); err != nil { // as pool format does
		t.Fatalf("fallocate raw file: %v", err)
	}

	// NATS, two hosts, one scheduler.
	port := freePort(t)
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	natsProc := startProc(t, natsBin, "-js", "-sd", t.TempDir(), "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-n", benchPoolCB)
	waitTCP(t, "127.0.0.1:"+strconv.Itoa(port))
	var hosts []*harness.Daemon
	for _, name := range []string{"host-a", "host-b"} {
		hosts = append(hosts, harness.Start(t, bin, harness.Options{DRAM: "1GiB", G3Size: "1GiB", BlockSize: "256KiB",
			Extra: []string{"--host", name, "--nats", url, "--cluster", benchPoolCB, "--scheduler", "off",
				"--report-interval", "300ms", "--sink-grace", "1h", "--pool", poolPath}}))
	}
	a, b := hosts[0], hosts[1]
	empty := filepath.Join(t.TempDir(), "empty.yaml")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	sched := startProc(t, bin, "scheduler", "--config", empty, "--id", "sched", "--nats", url,
		"--cluster", benchPoolCB, "--report-interval", "300ms", "--sink-grace", "1h")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("scheduler log:\n%s", sched.tail())
			t.Logf("nats log:\n%s", natsProc.tail())
		}
	})
	testenv.Eventually(t, 30*time.Second, func() bool {
		cv, err := clusterView(t, a)
		return err == nil && len(cv.Hosts) == 2 && cv.Leader != nil
	}, "2 hosts and a leader")
	if !strings.Contains(a.Log(), `io=direct`) {
		t.Errorf("host-a did not log its pool opened with O_DIRECT (io=direct)")
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	names := msg.For(benchPoolCB)
	ctx := context.Background()

	// B makes step 4's directory now, while no host has anything in it:
	// its lookup miss (reported as wanted) then finds no holder, and does
	// not share step 4's files before B asks for them one by one.
	if err := os.MkdirAll(filepath.Join(b.Namespace(), benchPoolWanted), 0o755); err != nil {
		t.Fatal(err)
	}

	// 1. A's files, written through its mount and flushed to G3 before
	// anything is timed (a share first waits for write-back).
	if err := os.MkdirAll(filepath.Join(a.Namespace(), benchPoolDir), 0o755); err != nil {
		t.Fatal(err)
	}
	files := make([]string, nFiles)
	tw := time.Now()
	for i := range files {
		files[i] = fmt.Sprintf("%s/f%03d.kv", benchPoolDir, i)
		if err := os.WriteFile(filepath.Join(a.Namespace(), files[i]), kvBytes(files[i], benchPoolFile), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fuseWrite := time.Since(tw)
	testenv.Eventually(t, 60*time.Second, func() bool {
		st, err := a.Status(ctx)
		return err == nil && statInt(t, st, "dirty_bytes") == 0
	}, "host-a's write-back to drain")

	// 1a. Reference: raw O_DIRECT writes, write-only in [0, total), write
	// + read-back in [total, 2*total) (both regions fallocated and never
	// written, as the pool's extents are).
	data, back := alignedBuf(benchPoolBlock), alignedBuf(benchPoolBlock)
	copy(data, kvBytes("raw", benchPoolBlock))
	rawW, err := rawDirectWrite(rawFd, 0, total, data, back, false)
	if err != nil {
		t.Fatal(err)
	}
	rawWV, err := rawDirectWrite(rawFd, total, total, data, back, true)
	if err != nil {
		t.Fatal(err)
	}

	// 1b. ctxmemd: share every file, one command at a time.
	var hostSide time.Duration
	ts := time.Now()
	for _, name := range files {
		ack, err := client.Control(ctx, nc, names, msg.Command{Host: "host-a", Op: msg.OpShare, Namespace: "default", Path: name})
		if err != nil {
			t.Fatalf("share %s: %v", name, err)
		}
		if ack.Status != msg.AckOK || ack.Blocks != benchPoolFile/benchPoolBlock {
			t.Fatalf("share %s: ack %s, %d blocks written (want %d): %s", name, ack.Status, ack.Blocks, benchPoolFile/benchPoolBlock, ack.Error)
		}
		hostSide += time.Duration(ack.TookUs) * time.Microsecond
	}
	shareTook := time.Since(ts)

	// 2/3. B reads every shared file. Its index learns of the entries by
	// a KV watch: give the last publish a moment (not timed); an open
	// that still misses is retried and its time counted.
	time.Sleep(time.Second)
	stB0, err := b.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The raw read reference runs right before and right after B's
	// reads (the disk's speed drifts on a shared machine); the table
	// uses their mean.
	buf := alignedBuf(benchPoolBlock)
	rawR1, rawFirsts, err := rawDirectRead(rawPath, total, benchPoolFile, buf)
	if err != nil {
		t.Fatal(err)
	}
	var readTook time.Duration
	var opens, firsts []time.Duration
	misses := 0
	for _, name := range files {
		p := filepath.Join(b.Namespace(), name)
		var r fileRead
		var waited time.Duration // from the first attempt to the one that succeeded
		start := time.Now()
		for {
			attempt := time.Now()
			r, err = readFileTimed(p, benchPoolFile, buf)
			waited = attempt.Sub(start)
			if err == nil || !errors.Is(err, fs.ErrNotExist) || waited > 10*time.Second {
				break
			}
			misses++
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("host-b reads %s: %v", name, err)
		}
		if !bytes.Equal(r.data, kvBytes(name, benchPoolFile)) {
			t.Fatalf("host-b reads %s: WRONG BYTES (%d bytes)", name, len(r.data))
		}
		readTook += r.total + waited
		opens = append(opens, r.open+waited)
		firsts = append(firsts, r.first+waited)
	}
	stB1, err := b.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	poolHits := statMap(t, stB1, "block_hits")["G3.5"] - statMap(t, stB0, "block_hits")["G3.5"]
	if want := int64(nFiles) * benchPoolFile / benchPoolBlock; poolHits < want {
		t.Errorf("host-b read %d blocks from G3.5, want at least %d: the reads did not all reach the pool", poolHits, want)
	}
	rawR2, rawFirsts2, err := rawDirectRead(rawPath, total, benchPoolFile, buf)
	if err != nil {
		t.Fatal(err)
	}
	rawR := (rawR1 + rawR2) / 2
	rawFirsts = append(rawFirsts, rawFirsts2...)

	// 4. Wanted → readable, two cases. (a) Single names: B has the
	// directory already (it made it), so each miss is a miss of one file
	// and the scheduler shares that file. (b) A session directory B has
	// never seen: B's miss of the directory makes the scheduler share every
	// file under it; timed until B has read them all.
	objsA := hostObjects(t, a, "host-a")
	fresh := writeFresh(t, a, benchPoolWanted, "w")
	sessionFiles := writeFresh(t, a, "session-new", "s")
	// The scheduler must know A holds them before B asks (else it knows
	// no holder and drops the want): A's report counts them, then two more
	// report intervals.
	testenv.Eventually(t, 20*time.Second, func() bool {
		return hostObjects(t, a, "host-a") >= objsA+2*benchPoolFresh
	}, "host-a to report the fresh files")
	time.Sleep(700 * time.Millisecond)
	// A wanted name travels in B's next report (Missed does not send one
	// early), so read back to back every name would wait a whole report
	// interval; a pause spread over one interval before each name samples
	// every phase of B's report clock instead.
	var wanted []time.Duration
	for i, name := range fresh {
		time.Sleep(time.Duration(i*7%benchPoolFresh) * 300 * time.Millisecond / benchPoolFresh)
		start := time.Now()
		if pollRead(t, b, name, start) == 1 {
			t.Errorf("%s: read on host-b at the first attempt: shared before anyone wanted it", name)
		}
		wanted = append(wanted, time.Since(start))
	}
	sessionStart := time.Now()
	var sessionFirst time.Duration
	for i, name := range sessionFiles {
		n := pollRead(t, b, name, sessionStart)
		if i == 0 {
			sessionFirst = time.Since(sessionStart)
			if n == 1 {
				t.Errorf("%s: read on host-b at the first attempt: shared before anyone wanted it", name)
			}
		}
	}
	sessionAll := time.Since(sessionStart)
	wantedMin := slices.Min(wanted)

	// The table (ASCII labels: %-*s pads bytes).
	const w = 58
	row := func(metric string, c, r float64, unit string) string {
		rs, ratio := "-", "-"
		if r > 0 {
			rs, ratio = fmt.Sprintf("%.1f %s", r, unit), fmt.Sprintf("%.2f", c/r)
		}
		return fmt.Sprintf("| %-*s | %12s | %14s | %5s |", w, metric, fmt.Sprintf("%.1f %s", c, unit), rs, ratio)
	}
	var tb strings.Builder
	fmt.Fprintf(&tb, "G3.5 pool: 2 hosts, one pool file (2 GiB, 64 MiB extents, I/O direct) in %s; %d files x 4 MiB = %d MiB, 256 KiB blocks\n",
		dir, nFiles, total>>20)
	fmt.Fprintf(&tb, "| %-*s | %12s | %14s | %5s |\n", w, "metric", "ctxmemd", "raw O_DIRECT", "ratio")
	fmt.Fprintf(&tb, "|%s|%s|%s|%s|\n", strings.Repeat("-", w+2), strings.Repeat("-", 14), strings.Repeat("-", 16), strings.Repeat("-", 7))
	for _, l := range []string{
		row("pool write: share cmds end to end vs raw write", mibps(total, shareTook), mibps(total, rawW), "MiB/s"),
		row("pool write: share cmds end to end vs raw write+read-back", mibps(total, shareTook), mibps(total, rawWV), "MiB/s"),
		row("pool write: host-side share time vs raw write+read-back", mibps(total, hostSide), mibps(total, rawWV), "MiB/s"),
		row("pool read on B, O_DIRECT via FUSE (incl. imports)", mibps(total, readTook), mibps(total, rawR), "MiB/s"),
		row("first read of a file p50 (open/import + 1st block)", ms(pctl(firsts, 0.5)), ms(pctl(rawFirsts, 0.5)), "ms"),
		row("first read of a file p99 (open/import + 1st block)", ms(pctl(firsts, 0.99)), ms(pctl(rawFirsts, 0.99)), "ms"),
		row("import: open of a shared name on B, p50", ms(pctl(opens, 0.5)), 0, "ms"),
		row("import: open of a shared name on B, p99", ms(pctl(opens, 0.99)), 0, "ms"),
		row(fmt.Sprintf("wanted -> readable on B, one name, p50 (%d files)", len(wanted)), ms(pctl(wanted, 0.5)), 0, "ms"),
		row(fmt.Sprintf("wanted -> readable on B, one name, p99 (%d files)", len(wanted)), ms(pctl(wanted, 0.99)), 0, "ms"),
		row("wanted -> readable, new session dir: first file", ms(sessionFirst), 0, "ms"),
		row(fmt.Sprintf("wanted -> readable, new session dir: all %d files", len(sessionFiles)), ms(sessionAll), 0, "ms"),
	} {
		tb.WriteString(l + "\n")
	}
	fmt.Fprintf(&tb, "ratio = ctxmemd / raw (throughput: higher is better; latency: lower is better). "+
		"Writes into A's mount (G2, incl. generating the bytes): %.1f MiB/s; %d share commands in %.2f s; B's G3.5 block hits %d; opens retried %d; "+
		"raw reads before/after B's %.0f/%.0f MiB/s; "+
		"wanted -> readable (one name) min %.1f ms, report interval 300 ms (p99 of 20 samples = their max).\n",
		mibps(total, fuseWrite), len(files), shareTook.Seconds(), poolHits, misses,
		mibps(total, rawR1), mibps(total, rawR2), ms(wantedMin))
	t.Logf("\n%s", tb.String())
}
