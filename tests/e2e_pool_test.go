package tests

// End-to-end tests of G3.5 (issue 7): three `ctxmemd run` daemons, each in
// a network namespace the test creates (veth pair to the root namespace,
// addresses in an RFC 5737 /24 this machine does not use), a real nats-server in the root namespace they
// all reach over their veth, one scheduler replica, and one file formatted
// with `ctxmemd pool format` as the shared pool every daemon opens. The
// daemons run under `nsenter --net=...` only, so their FUSE mounts stay
// visible to the test.
//
//	CTXMEM_E2E=1 go test -count=1 -run Pool -v ./tests/

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/internal/testenv"
	"github.com/ctxmem/ctxmemd/tests/harness"
)

// hostNet is one simulated host's network: namespace ns, the veth end in
// the root namespace (rootDev, rootIP) and the one inside ns (nsDev, nsIP).
type hostNet struct {
	ns, rootDev, nsDev, rootIP, nsIP string
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// freeTestNet returns the first three octets of a documentation /24
// (RFC 5737) that no interface of this machine uses: the root-namespace
// ends of the veth pairs get addresses in it, and an overlap with the
// machine's own network would hijack its routes.
func freeTestNet(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, cand := range []string{"198.51.100", "203.0.113", "192.0.2"} {
		_, cn, _ := net.ParseCIDR(cand + ".0/24")
		clash := false
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && (cn.Contains(ipn.IP) || ipn.Contains(cn.IP)) {
				clash = true
			}
		}
		if !clash {
			return cand
		}
	}
	t.Fatal("no free documentation /24 for the test network")
	return ""
}

// netnsSeq tells apart the namespaces of several clusters in one run.
var netnsSeq atomic.Int32

// setupNetns creates n network namespaces, each with a /30 veth link to the
// root namespace; removed at cleanup.
func setupNetns(t *testing.T, n int) []hostNet {
	t.Helper()
	needTool(t, "ip", "apt-get install iproute2")
	needTool(t, "nsenter", "apt-get install util-linux")
	tag := strconv.Itoa(os.Getpid()%1000) + strconv.Itoa(int(netnsSeq.Add(1)%10))
	prefix := freeTestNet(t)
	var out []hostNet
	for i := 0; i < n; i++ {
		h := hostNet{ns: fmt.Sprintf("ctxm%s-%d", tag, i), rootDev: fmt.Sprintf("cxr%s%d", tag, i), nsDev: fmt.Sprintf("cxn%s%d", tag, i),
			rootIP: fmt.Sprintf("%s.%d", prefix, 4*i+1), nsIP: fmt.Sprintf("%s.%d", prefix, 4*i+2)}
		run(t, "ip", "netns", "add", h.ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", h.ns).Run() })
		run(t, "ip", "link", "add", h.rootDev, "type", "veth", "peer", "name", h.nsDev)
		t.Cleanup(func() { _ = exec.Command("ip", "link", "del", h.rootDev).Run() })
		run(t, "ip", "link", "set", h.nsDev, "netns", h.ns)
		run(t, "ip", "addr", "add", h.rootIP+"/30", "dev", h.rootDev)
		run(t, "ip", "link", "set", h.rootDev, "up")
		run(t, "ip", "-n", h.ns, "addr", "add", h.nsIP+"/30", "dev", h.nsDev)
		run(t, "ip", "-n", h.ns, "link", "set", h.nsDev, "up")
		run(t, "ip", "-n", h.ns, "link", "set", "lo", "up")
		out = append(out, h)
	}
	return out
}

// poolCluster is the three-host G3.5 setup.
type poolCluster struct {
	t     *testing.T
	bin   string
	nets  []hostNet
	nats  *proc
	port  int
	pool  string
	hosts []*harness.Daemon
	sched *proc
}

func startPoolCluster(t *testing.T, poolSize, extentSize string, extra ...string) *poolCluster {
	t.Helper()
	bin := needE2E(t)
	natsBin := needTool(t, "nats-server", "make deps-test installs it")
	c := &poolCluster{t: t, bin: bin, nets: setupNetns(t, 3), port: freePort(t)}
	c.nats = startProc(t, natsBin, "-js", "-sd", t.TempDir(), "-a", "0.0.0.0", "-p", strconv.Itoa(c.port), "-n", "pool")
	waitTCP(t, "127.0.0.1:"+strconv.Itoa(c.port))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("nats log:\n%s", c.nats.tail())
		}
	})
	var poolArgs []string
	if poolSize != "" { // "" runs the same cluster without G3.5
		c.pool = filepath.Join(t.TempDir(), "pool.img")
		run(t, bin, "pool", "format", "--size", poolSize, "--extent-size", extentSize, c.pool)
		poolArgs = []string{"--pool", c.pool, "--pool-lease-ttl", "5s"}
	}
	for i, h := range c.nets {
		name := "host-" + string(rune('a'+i))
		d := harness.Start(t, bin, harness.Options{DRAM: "64MiB", G3Size: "128MiB", BlockSize: "64KiB",
			LogLevel: os.Getenv("CTXMEM_E2E_LOG_LEVEL"),
			Wrap:     []string{"nsenter", "--net=/var/run/netns/" + h.ns, "--"},
			Extra: append(append([]string{"--host", name, "--nats", "nats://" + h.rootIP + ":" + strconv.Itoa(c.port), "--cluster", "pool",
				"--scheduler", "off", "--report-interval", "300ms", "--sink-grace", "1h",
				"--link", h.nsDev}, poolArgs...), extra...)})
		c.hosts = append(c.hosts, d)
	}
	empty := filepath.Join(t.TempDir(), "empty.yaml")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	c.sched = startProc(t, bin, "scheduler", "--config", empty, "--id", "sched", "--nats", "nats://127.0.0.1:"+strconv.Itoa(c.port),
		"--cluster", "pool", "--report-interval", "300ms", "--sink-grace", "1h", "--log-level", "debug")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("scheduler log (without demote and sink commands):\n%s", c.sched.tailWithout("op=demote", "op=sink"))
		}
	})
	testenv.Eventually(t, 30*time.Second, func() bool {
		cv, err := clusterView(t, c.hosts[0])
		return err == nil && len(cv.Hosts) == 3 && cv.Leader != nil
	}, "3 hosts and a leader")
	return c
}

// kvBytes is the content of KV file name: it depends on the name only, so
// every host that reads it must see exactly these bytes.
func kvBytes(name string, n int) []byte {
	b := make([]byte, n)
	x := uint64(14695981039346656037)
	for _, c := range []byte(name) {
		x = (x ^ uint64(c)) * 1099511628211
	}
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
	return b
}

// readShared reads name on d until it appears (a peer shares it) or the
// deadline passes; it returns the bytes, or an error for wrong bytes.
func readShared(d *harness.Daemon, name string, want []byte, deadline time.Duration) (time.Duration, error) {
	start := time.Now()
	p := filepath.Join(d.Namespace(), name)
	for {
		got, err := readDirect(p)
		if err == nil {
			if !bytes.Equal(got, want) {
				return 0, fmt.Errorf("%s on %s: WRONG BYTES (%d bytes, want %d)", name, d.Root, len(got), len(want))
			}
			return time.Since(start), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return 0, fmt.Errorf("%s: %w", name, err)
		}
		if time.Since(start) > deadline {
			return 0, fmt.Errorf("%s: not shared within %s", name, deadline)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestE2EPoolSharing(t *testing.T) {
	c := startPoolCluster(t, "256MiB", "4MiB", poolShareArgs()...)
	a, b, cc := c.hosts[0], c.hosts[1], c.hosts[2]
	const size = 256 << 10 // 4 blocks of 64 KiB
	var names []string
	for i := 0; i < 8; i++ {
		name := fmt.Sprintf("sess%d/layer0.kv", i)
		names = append(names, name)
		p := filepath.Join(a.Namespace(), name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, kvBytes(name, size), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// B and C read the same names: first a miss (wanted), then the
	// scheduler has A share them and they read from the pool.
	var firstRead []time.Duration
	for _, name := range names {
		for _, d := range []*harness.Daemon{b, cc} {
			took, err := readShared(d, name, kvBytes(name, size), 20*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			firstRead = append(firstRead, took)
		}
	}
	t.Logf("time from a second host's first read to the bytes read from the pool: %v", firstRead)
	for _, d := range []*harness.Daemon{b, cc} {
		st, err := d.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		hits := statMap(t, st, "block_hits")
		if hits["G3.5"] == 0 {
			t.Errorf("%s: no G3.5 block hits after reading shared files: %v", d.Root, hits)
		}
		t.Logf("%s block hits %v", d.Root, hits)
	}
	// A fresh name on C reads G3.5 before it is promoted.
	extra := "sess9/layer0.kv"
	pa := filepath.Join(a.Namespace(), extra)
	_ = os.MkdirAll(filepath.Dir(pa), 0o755)
	if err := os.WriteFile(pa, kvBytes(extra, size), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readShared(b, extra, kvBytes(extra, size), 20*time.Second); err != nil {
		t.Fatal(err)
	}
	pc := filepath.Join(cc.Namespace(), extra)
	testenv.Eventually(t, 20*time.Second, func() bool {
		_, err := os.Stat(pc)
		return err == nil
	}, "C sees the shared file")
	if tr := tierOf(t, pc); !allIn(tr, "G3.5") {
		t.Errorf("an imported, unread file is in %q, want G3.5", tr)
	}
}

// statMap decodes one counter map of status --json stats.
func statMap(t *testing.T, st harness.Status, key string) map[string]int64 {
	t.Helper()
	var m map[string]int64
	if raw, ok := st.Stats[key]; ok {
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

func TestE2EPoolFaults(t *testing.T) {
	c := startPoolCluster(t, "32MiB", "1MiB", poolShareArgs()...)
	a, b, cc := c.hosts[0], c.hosts[1], c.hosts[2]
	const size = 192 << 10
	write := func(d *harness.Daemon, name string) {
		p := filepath.Join(d.Namespace(), name)
		_ = os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, kvBytes(name, size), 0o644); err != nil {
			t.Errorf("write %s: %v", name, err)
		}
	}
	// Readers on B and C read every name A wrote, all through the test:
	// misses are allowed (not shared yet, reclaimed, A down), wrong bytes
	// never.
	var written sync.Map
	var wrong, okReads, misses atomic.Int64
	var firstWrong atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, d := range []*harness.Daemon{b, cc} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				var names []string
				written.Range(func(k, _ any) bool { names = append(names, k.(string)); return true })
				if len(names) == 0 {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				name := names[i%len(names)]
				got, err := readDirect(filepath.Join(d.Namespace(), name))
				switch {
				case err != nil:
					misses.Add(1)
				case !bytes.Equal(got, kvBytes(name, size)):
					wrong.Add(1)
					firstWrong.CompareAndSwap(nil, fmt.Sprintf("%s on %s: %d bytes", name, d.Root, len(got)))
				default:
					okReads.Add(1)
				}
			}
		}()
	}
	defer func() {
		close(stop)
		wg.Wait()
		t.Logf("reads on B and C: %d correct, %d misses, %d WRONG", okReads.Load(), misses.Load(), wrong.Load())
		if wrong.Load() > 0 {
			t.Errorf("wrong bytes served: %v", firstWrong.Load())
		}
	}()

	// 1. A writes and B/C pull: the pool (31 extents of 1 MiB, less than
	// the 200 files) fills and the scheduler reclaims extents while B and
	// C read hard.
	for i := 0; i < 200; i++ {
		name := fmt.Sprintf("fill/%03d.kv", i)
		write(a, name)
		written.Store(name, true)
	}
	testenv.Eventually(t, 30*time.Second, func() bool { return okReads.Load() > 50 }, "reads served from the pool")
	testenv.Eventually(t, 60*time.Second, func() bool {
		return c.sched.logged("reclaim_extent")
	}, "the scheduler to reclaim pool extents")

	// 2. A's link down: its pool goes into bypass within the bound and
	// A keeps serving its own files; link up: re-admitted.
	run(t, "ip", "-n", c.nets[0].ns, "link", "set", c.nets[0].nsDev, "down")
	tDown := time.Now()
	testenv.Eventually(t, 10*time.Second, func() bool {
		st, err := a.Status(context.Background())
		if err != nil {
			return false
		}
		g, ok := st.Tier("G3.5")
		return ok && g.Degraded
	}, "A's G3.5 in bypass")
	t.Logf("bypass %s after link down", time.Since(tDown).Round(10*time.Millisecond))
	if got, err := readDirect(filepath.Join(a.Namespace(), "fill/000.kv")); err != nil || !bytes.Equal(got, kvBytes("fill/000.kv", size)) {
		t.Errorf("A cannot serve its own file in bypass: %v", err)
	}
	write(a, "bypass/one.kv") // writes meant for the pool go to G3
	run(t, "ip", "-n", c.nets[0].ns, "link", "set", c.nets[0].nsDev, "up")
	testenv.Eventually(t, 20*time.Second, func() bool {
		st, err := a.Status(context.Background())
		if err != nil {
			return false
		}
		g, ok := st.Tier("G3.5")
		return ok && !g.Degraded
	}, "A's G3.5 re-admitted")

	// 3. NATS restarted mid-run: sharing resumes.
	c.nats.kill()
	time.Sleep(time.Second)
	c.nats.start()
	waitTCP(t, "127.0.0.1:"+strconv.Itoa(c.port))
	write(a, "after-nats/x.kv")
	written.Store("after-nats/x.kv", true)
	if _, err := readShared(b, "after-nats/x.kv", kvBytes("after-nats/x.kv", size), 60*time.Second); err != nil {
		t.Fatal(err)
	}

	// 4. A killed with kill -9 in the middle of writes: no torn block is
	// visible on B or C (the readers keep checking), and A's leases expire.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 200; i++ {
			name := fmt.Sprintf("crash/%03d.kv", i)
			p := filepath.Join(a.Namespace(), name)
			_ = os.MkdirAll(filepath.Dir(p), 0o755)
			if os.WriteFile(p, kvBytes(name, size), 0o644) != nil {
				return
			}
			written.Store(name, true)
		}
	}()
	time.Sleep(1500 * time.Millisecond)
	held := poolHeld(t, b)["host-a"]
	a.Kill9()
	<-done
	t.Logf("host-a killed holding extents %v", held)
	time.Sleep(11 * time.Second) // past the lease TTL (5 s) and grace (5 s)
	// B writes files C wants: B's shares need extents, and the pool is
	// nearly full, so B leases extents A held when it died. How many
	// files that takes depends on what the pool's reclaim freed
	// meanwhile (under load it can free B's own extents first), so B
	// keeps writing, 40 files at least and 200 at most, until it holds
	// one of A's.
	heldOld := func() bool {
		for _, e := range poolHeld(t, b)["host-b"] {
			for _, old := range held {
				if e == old {
					return true
				}
			}
		}
		return false
	}
	fromB, slowest, n := time.Now(), time.Duration(0), 0
	for ; n < 200 && (n < 40 || !heldOld()); n++ {
		name := fmt.Sprintf("fromb/%03d.kv", n)
		write(b, name)
		took, err := readShared(cc, name, kvBytes(name, size), 60*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		slowest = max(slowest, took)
	}
	testenv.Eventually(t, 30*time.Second, heldOld, "an extent A held when it died leased by B")
	t.Logf("B shared %d files to C in %v (slowest %v) until it held an extent A held", n, time.Since(fromB).Round(time.Millisecond), slowest.Round(time.Millisecond))
	a.StartAgain()
	write(a, "restarted/x.kv")
	took, err := readShared(cc, "restarted/x.kv", kvBytes("restarted/x.kv", size), 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("restarted/x.kv readable on C %v after the restarted A wrote it", took.Round(time.Millisecond))
	// The restarted A writes over its earlier records (its old extents are
	// leased again), so index entries published before the crash are
	// stale. A reader that hits one withdraws it, and A shares the file
	// again from its own copies: files A wrote before the crash become
	// readable on C again (errors in between are allowed, wrong bytes not).
	for _, name := range []string{"after-nats/x.kv", "bypass/one.kv"} {
		start := time.Now()
		if err := readEventually(cc, name, kvBytes(name, size), 60*time.Second); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s readable on C again %v after the restart's first read", name, time.Since(start).Round(time.Millisecond))
	}
}

// readEventually reads name on d until the bytes are right or the
// deadline passes; any error in between is retried, wrong bytes fail at
// once.
func readEventually(d *harness.Daemon, name string, want []byte, deadline time.Duration) error {
	start := time.Now()
	var last error
	for time.Since(start) < deadline {
		got, err := readDirect(filepath.Join(d.Namespace(), name))
		if err == nil {
			if !bytes.Equal(got, want) {
				return fmt.Errorf("%s on %s: WRONG BYTES", name, d.Root)
			}
			return nil
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s not readable within %s: %v", name, deadline, last)
}

// poolHeld returns the pool extents each host holds, from status --cluster.
func poolHeld(t *testing.T, d *harness.Daemon) map[string][]uint32 {
	t.Helper()
	cv, err := clusterView(t, d)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]uint32{}
	for _, h := range cv.Hosts {
		if h.Pool != nil {
			out[h.Host] = h.Pool.Held
		}
	}
	return out
}

// replayHosts replays the first n trace requests over the three hosts'
// mounts (round-robin) and returns the result.
func replayHosts(t *testing.T, c *poolCluster, n int, extra ...string) harness.ReplayResult {
	t.Helper()
	args := []string{"--trace", tracePath(t), "--requests", strconv.Itoa(n), "--block-bytes", "16KiB",
		"--quiet", "--concurrency", "4"}
	for _, d := range c.hosts {
		args = append(args, "--mount", d.Namespace())
	}
	args = append(args, extra...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	res, code, stderr, err := harness.Replay(ctx, c.bin, args...)
	if err != nil || code != 0 {
		t.Fatalf("replay: exit %d, %v\n%s", code, err, stderr)
	}
	return res
}

// TestE2EPoolTraceReplay replays the conversation trace across the three
// hosts (requests round-robin) with G3.5 and without it, and reports the
// cross-host gain: blocks one host wrote that another read from the pool
// instead of recomputing.
func TestE2EPoolTraceReplay(t *testing.T) {
	n := replayRequests(t, 1000)
	var ratio [2]float64
	for i, withPool := range []bool{false, true} {
		size := ""
		if withPool {
			size = "1GiB"
		}
		// CTXMEM_POOL_SHARE=wanted measures sharing after a miss only
		// (pool_share) in the pool run; unset, the daemons' default
		// (eager) applies.
		var extra []string
		if withPool {
			extra = poolShareArgs()
		}
		c := startPoolCluster(t, size, "16MiB", extra...)
		// Timestamps are followed (20× faster than the trace): hosts take
		// turns as in production, and a block one host computed has time
		// to be shared before another host asks for it.
		args := []string{"--speed", "20"}
		// CTXMEM_POOL_REPLAY_RETRY=50ms models engines that wait that long
		// for a peer's KV before recomputing (slow: every true miss
		// waits); without a pool it cannot turn a miss into a hit, so only
		// the pool run uses it.
		if r := os.Getenv("CTXMEM_POOL_REPLAY_RETRY"); r != "" && withPool {
			args = append(args, "--retry-missing", r, "--concurrency", "16")
		}
		res := replayHosts(t, c, n, args...)
		if res.VerifyFailures != 0 || res.WriteErrors != 0 {
			t.Fatalf("pool=%v: %d verification failures, %d write errors", withPool, res.VerifyFailures, res.WriteErrors)
		}
		ratio[i] = res.BlockHitRatio
		t.Logf("pool=%v: %d requests over 3 hosts: block hit ratio %.4f (%d of %d), retry hits %d, hits by tier %v, %.1f s",
			withPool, res.Requests, res.BlockHitRatio, res.BlockHits, res.Blocks, res.RetryHits, res.HitsByTier, res.ElapsedS)
		if withPool && res.HitsByTier["G3.5"] == 0 {
			t.Errorf("no block read from G3.5 in the replay with a pool")
		}
		if withPool {
			shares, bytes := poolShared(t, c)
			t.Logf("pool writes: %d files, %.1f MiB shared; %.1f KiB written to the pool per G3.5 hit (%d hits)",
				shares, float64(bytes)/(1<<20), float64(bytes)/1024/float64(max(res.HitsByTier["G3.5"], 1)), res.HitsByTier["G3.5"])
		}
		for _, d := range c.hosts {
			_ = d.Stop()
		}
	}
	t.Logf("cross-host gain of G3.5: block hit ratio %.4f -> %.4f", ratio[0], ratio[1])
	if ratio[1] < ratio[0] {
		t.Errorf("G3.5 lowered the hit ratio: %.4f -> %.4f", ratio[0], ratio[1])
	}
}

// poolShared sums the files and bytes the hosts shared to the pool (the
// sidecar's pool_shares and pool_shared_bytes in status --json).
func poolShared(t *testing.T, c *poolCluster) (shares, bytes int64) {
	t.Helper()
	for _, d := range c.hosts {
		st, err := d.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var v struct {
			Control struct {
				Sidecar struct {
					Shares  int64   `json:"pool_shares"`
					Bytes   int64   `json:"pool_shared_bytes"`
					Eager   int64   `json:"eager_shared"`
					Skipped int64   `json:"eager_skipped"`
					Dropped int64   `json:"eager_dropped"`
					WaitMs  float64 `json:"eager_wait_ms"`
					ShareMs float64 `json:"eager_share_ms"`
				} `json:"sidecar"`
			} `json:"control"`
		}
		if err := json.Unmarshal(st.Raw, &v); err != nil {
			t.Fatal(err)
		}
		sc := v.Control.Sidecar
		shares += sc.Shares
		bytes += sc.Bytes
		t.Logf("%s: %d files shared (%d eagerly, on average %.1f ms queued and %.1f ms sharing after write-back; %d stored files not shared eagerly, %d dropped from its queue)",
			filepath.Base(d.Root), sc.Shares, sc.Eager, sc.WaitMs, sc.ShareMs, sc.Skipped, sc.Dropped)
	}
	return shares, bytes
}

// poolShareArgs are the daemon flags for CTXMEM_POOL_SHARE (wanted or
// eager), which the pool tests run with; unset, the daemons' default
// applies.
func poolShareArgs() []string {
	if v := os.Getenv("CTXMEM_POOL_SHARE"); v != "" {
		return []string{"--pool-share", v}
	}
	return nil
}
