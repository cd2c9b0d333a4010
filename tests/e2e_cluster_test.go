package tests

// End-to-end test of the control loop (issue 5): a real NATS server (the
// nats-server binary, JetStream on, on 127.0.0.1), three `ctxmemd run`
// daemons standing for three hosts (own data dirs and mounts) and two
// `ctxmemd scheduler` replicas. Reads of the hot files use O_DIRECT, so
// every read reaches the daemon (and its heat ranking) instead of the page
// cache.
//
//	CTXMEM_E2E=1 go test -count=1 -run Cluster -v ./tests/

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxmem/ctxmemd/internal/testenv"
	"github.com/ctxmem/ctxmemd/sidecar/client"
	"github.com/ctxmem/ctxmemd/tests/harness"
)

// proc is a helper process (nats-server, scheduler) with its log.
type proc struct {
	t    *testing.T
	name string
	args []string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
}

func startProc(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, args: args, log: filepath.Join(t.TempDir(), filepath.Base(name)+".log")}
	p.start()
	t.Cleanup(p.kill)
	return p
}

func (p *proc) start() {
	p.t.Helper()
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	p.cmd = exec.Command(p.name, p.args...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		f.Close()
		p.t.Fatalf("start %s: %v", p.name, err)
	}
	p.done = make(chan struct{})
	go func() { _ = p.cmd.Wait(); f.Close(); close(p.done) }()
}

// kill sends SIGKILL and waits.
func (p *proc) kill() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

func (p *proc) tail() string {
	b, _ := os.ReadFile(p.log)
	return tail(string(b), 3000)
}

// logged reports whether the whole log so far contains s (a check on the
// tail alone misses a line that a flood of later ones pushed out of it).
func (p *proc) logged(s string) bool {
	b, _ := os.ReadFile(p.log)
	return strings.Contains(string(b), s)
}

// tailWithout is tail of the log's lines that contain none of skip (a
// failure's scheduler log without the flood of routine commands).
func (p *proc) tailWithout(skip ...string) string {
	b, _ := os.ReadFile(p.log)
	var keep []string
next:
	for _, l := range strings.Split(string(b), "\n") {
		for _, s := range skip {
			if strings.Contains(l, s) {
				continue next
			}
		}
		keep = append(keep, l)
	}
	return tail(strings.Join(keep, "\n"), 6000)
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func waitTCP(t *testing.T, addr string) {
	t.Helper()
	end := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%s not listening: %v", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// clusterView runs `ctxmemd status --cluster --json` against d.
func clusterView(t *testing.T, d *harness.Daemon) (client.Cluster, error) {
	t.Helper()
	out, err := exec.Command(d.Binary(), "status", "--cluster", "--json", "--admin", d.Admin).Output()
	var cv client.Cluster
	if err != nil {
		return cv, fmt.Errorf("status --cluster: %v", err)
	}
	return cv, json.Unmarshal(out, &cv)
}

func tierOf(t *testing.T, path string) string {
	v, err := unix.Getxattr(path, "user.ctxmem.tier", make([]byte, 64))
	if err != nil {
		return "error: " + err.Error()
	}
	buf := make([]byte, v)
	n, _ := unix.Getxattr(path, "user.ctxmem.tier", buf)
	return string(buf[:n])
}

// allIn reports whether the xattr value v (run-length encoded per-block
// tiers, "G4*3" or "G2 G4*2") names tier only.
func allIn(v, tier string) bool {
	if v == "" {
		return false
	}
	for _, part := range strings.Fields(v) {
		name, _, _ := strings.Cut(part, "*")
		if name != tier {
			return false
		}
	}
	return true
}

func TestE2EClusterControlLoop(t *testing.T) {
	bin := needE2E(t)
	natsBin := needTool(t, "nats-server", "make deps-test installs it")
	port := freePort(t)
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	natsArgs := []string{"-js", "-sd", t.TempDir(), "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-n", "e2e"}
	nats := startProc(t, natsBin, natsArgs...)
	waitTCP(t, "127.0.0.1:"+strconv.Itoa(port))

	common := []string{"--nats", url, "--cluster", "e2e", "--scheduler", "off", "--report-interval", "500ms",
		"--sink-grace", "2s", "--heat-half-life", "1s"}
	hosts := map[string]*harness.Daemon{}
	for _, h := range []string{"host-a", "host-b", "host-c"} {
		hosts[h] = harness.Start(t, bin, harness.Options{DRAM: "64MiB", G3Size: "128MiB", BlockSize: "64KiB",
			Extra: append([]string{"--host", h}, common...)})
	}
	a, b, c := hosts["host-a"], hosts["host-b"], hosts["host-c"]
	empty := filepath.Join(t.TempDir(), "empty.yaml")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	scheds := map[string]*proc{}
	for _, id := range []string{"sched-1", "sched-2"} {
		scheds[id] = startProc(t, bin, "scheduler", "--config", empty, "--id", id, "--nats", url, "--cluster", "e2e",
			"--report-interval", "500ms", "--sink-grace", "2s", "--log-level", "debug")
	}
	defer func() {
		if t.Failed() {
			for id, p := range scheds {
				t.Logf("%s log:\n%s", id, p.tail())
			}
			t.Logf("nats log:\n%s", nats.tail())
		}
	}()

	// Every host and a leader show up in status --cluster.
	var leader string
	testenv.Eventually(t, 30*time.Second, func() bool {
		cv, err := clusterView(t, a)
		if err != nil || len(cv.Hosts) != 3 || cv.Leader == nil || len(cv.Replicas) != 2 {
			return false
		}
		leader = cv.Leader.ID
		return true
	}, "3 hosts and a scheduler leader in status --cluster")
	t.Logf("leader %s", leader)

	// Files, and a reader that keeps B's hot file hot and reads every
	// file of every host all through the test, checking every byte.
	content := func(name string) []byte {
		return bytes.Repeat([]byte(name+"|"), 200_000/(len(name)+1)+1)[:200_000]
	}
	write := func(d *harness.Daemon, name string) string {
		p := filepath.Join(d.Namespace(), name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, content(name), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	coldA := []string{write(a, "s1/cold0"), write(a, "s1/cold1"), write(a, "s1/cold2")}
	hotB := write(b, "s2/hot")
	var readErrs, reads atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	readers := []string{hotB, coldA[2]}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			p := hotB
			if i%10 == 9 {
				p = readers[1] // now and then a cold one: served from wherever it is
			}
			got, err := readDirect(p)
			reads.Add(1)
			if err == nil && !bytes.Equal(got, content(p[strings.Index(p, "/default/")+len("/default/"):])) {
				err = fmt.Errorf("%s: wrong bytes", p)
			}
			if err != nil {
				readErrs.Add(1)
				firstErr.CompareAndSwap(nil, err)
			}
		}
	}()
	defer func() {
		close(stop)
		wg.Wait()
		if n := readErrs.Load(); n > 0 {
			t.Errorf("%d of %d reads failed; first: %v", n, reads.Load(), firstErr.Load())
		}
		t.Logf("reads during the test: %d, failed %d", reads.Load(), readErrs.Load())
	}()

	// 1. Cold private files of A are sunk to G4 by a scheduler command.
	testenv.Eventually(t, 45*time.Second, func() bool {
		for _, p := range coldA[:2] {
			if !allIn(tierOf(t, p), "G4") {
				return false
			}
		}
		return true
	}, "A's cold files sunk to G4")
	if tr := tierOf(t, hotB); !allIn(tr, "G2") {
		t.Errorf("B's hot file is in %s, want G2", tr)
	}
	st, err := a.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if g4, ok := st.Tier("G4"); !ok || g4.Blocks == 0 {
		t.Errorf("host-a status shows no G4 blocks after the sink: %+v", st.Tiers)
	} else {
		t.Logf("host-a status after the sink: G4 %d blocks", g4.Blocks)
	}
	cv, _ := clusterView(t, a)
	for _, h := range cv.Hosts {
		if h.Host == "host-a" && h.Applied == 0 {
			t.Errorf("status --cluster shows no applied command on host-a: %+v", h)
		}
	}

	// 2. A prestage request made on C lands A's file in A's G2 before
	// its deadline.
	out, err := exec.Command(bin, "prestage", "--admin", c.Admin, "--deadline", "5s", "default", "s1/cold0").CombinedOutput()
	if err != nil {
		t.Fatalf("prestage: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "host-a") || !allIn(tierOf(t, coldA[0]), "G2") {
		t.Fatalf("prestage did not land in host-a's G2 (tier %s):\n%s", tierOf(t, coldA[0]), out)
	}
	t.Logf("prestage:\n%s", out)

	// 3. The acting scheduler killed: the other takes over and the loop
	// goes on (a new cold file on B is sunk).
	scheds[leader].kill()
	other := "sched-1"
	if leader == other {
		other = "sched-2"
	}
	tKill := time.Now()
	testenv.Eventually(t, 30*time.Second, func() bool {
		cv, err := clusterView(t, b)
		return err == nil && cv.Leader != nil && cv.Leader.ID == other
	}, "the other scheduler to take over")
	t.Logf("takeover by %s after %s", other, time.Since(tKill).Round(100*time.Millisecond))
	coldB := write(b, "s3/cold")
	testenv.Eventually(t, 45*time.Second, func() bool { return allIn(tierOf(t, coldB), "G4") }, "B's cold file sunk after the takeover")

	// 4. NATS killed and restarted: hosts serve meanwhile, then the loop
	// resumes (a new cold file on C is sunk).
	nats.kill()
	coldC := write(c, "s4/cold") // writes work with the bus down
	if got, err := readDirect(coldC); err != nil || !bytes.Equal(got, content("s4/cold")) {
		t.Fatalf("read with NATS down: %v", err)
	}
	time.Sleep(2 * time.Second)
	nats.start()
	waitTCP(t, "127.0.0.1:"+strconv.Itoa(port))
	testenv.Eventually(t, 60*time.Second, func() bool { return allIn(tierOf(t, coldC), "G4") }, "C's cold file sunk after the NATS restart")
	testenv.Eventually(t, 30*time.Second, func() bool {
		cv, err := clusterView(t, c)
		return err == nil && len(cv.Hosts) == 3 && cv.Leader != nil
	}, "3 hosts and a leader after the NATS restart")
}
