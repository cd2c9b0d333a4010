package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/internal/testenv"
	"github.com/ctxmem/ctxmemd/tests/harness"
	"github.com/ctxmem/ctxmemd/tiering/g4/s3/s3test"
)

// delayProxy forwards TCP connections to target, holding every chunk the
// client sends for the current delay first (one S3 request is one chunk or
// a few), so that a real S3 server answers as slowly as wanted.
type delayProxy struct {
	ln    net.Listener
	delay atomic.Int64 // ns
	wg    sync.WaitGroup
}

func startDelayProxy(t *testing.T, target string) *delayProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &delayProxy{ln: ln}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.serve(c, target)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

func (p *delayProxy) serve(c net.Conn, target string) {
	defer c.Close()
	s, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer s.Close()
	go func() { _, _ = io.Copy(c, s); c.Close() }()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			time.Sleep(time.Duration(p.delay.Load()))
			if _, werr := s.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// TestE2ERestoreBudget (issue 14 item 2): in a namespace with a restore
// budget, an open whose file would come up from a slow S3 is answered as a
// miss at once and the file is prestaged, so the next open hits; with S3
// fast again (the per-tier estimate follows the reads), the same open is
// served from G4 directly.
func TestE2ERestoreBudget(t *testing.T) {
	bin := needE2E(t)
	srv := s3test.StartServer(t)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	t.Setenv("AWS_SESSION_TOKEN", "")
	proxy := startDelayProxy(t, srv.Endpoint)
	d := harness.Start(t, bin, harness.Options{DRAM: "64MiB", G3Size: "0", G4: s3URLAt(proxy.ln.Addr().String(), srv.Bucket, "restore")})
	cfg := "namespaces:\n  - name: default\n  - name: kv\n    restore_budget: 100ms\n"
	if err := os.WriteFile(d.Config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	d.Restart()
	ctx := context.Background()
	kv := filepath.Join(d.Mount, "kv", "blk")
	warm := filepath.Join(d.Namespace(), "warm")
	data := bytes.Repeat([]byte("restore budget "), 4*s3BlockSize/15+1)[:4*s3BlockSize]
	for _, p := range []string{kv, warm} {
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sink := func(p string) {
		t.Helper()
		if out, err := exec.Command(d.Binary(), "sink", "--quiet", "--admin", d.Admin, p).CombinedOutput(); err != nil {
			t.Fatalf("sink %s: %v\n%s", p, err, out)
		}
		if tiers, err := blockTiers(p); err != nil || countTier(tiers, "G4") != 4 {
			t.Fatalf("after sink %s: %v %v", p, tiers, err)
		}
	}
	// readWarm reads the budget-free namespace's file from G4 a few times
	// so that the G4 estimate follows the current S3 speed.
	readWarm := func(n int) {
		t.Helper()
		for range n {
			sink(warm)
			if got, err := readDirect(warm); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("warm read: %v", err)
			}
		}
	}
	status := func() (skipped int64, g4cost time.Duration) {
		t.Helper()
		st, err := d.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var raw struct {
			Namespaces []struct {
				Name    string `json:"name"`
				Skipped int64  `json:"restore_skipped"`
			} `json:"namespaces"`
			Cost map[string]struct {
				NS int64 `json:"block_read_ns"`
			} `json:"restore_cost"`
		}
		if err := json.Unmarshal(st.Raw, &raw); err != nil {
			t.Fatal(err)
		}
		for _, n := range raw.Namespaces {
			if n.Name == "kv" {
				skipped = n.Skipped
			}
		}
		return skipped, time.Duration(raw.Cost["G4"].NS)
	}

	// Slow S3: 150 ms per request; four blocks predict ≥ 600 ms > 100 ms.
	proxy.delay.Store(int64(150 * time.Millisecond))
	readWarm(2)
	sink(kv)
	t0 := time.Now()
	_, err := os.ReadFile(kv)
	missTook := time.Since(t0)
	if !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("slow S3: open over budget: %v, want ENOENT", err)
	}
	if !testenv.Poll(30*time.Second, func() bool { ts, err := blockTiers(kv); return err == nil && countTier(ts, "G2") == 4 }) {
		ts, _ := blockTiers(kv)
		t.Fatalf("not prestaged after the skipped open: %v", ts)
	}
	t0 = time.Now()
	if got, err := os.ReadFile(kv); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("after the prestage: %v", err)
	}
	hitTook := time.Since(t0)
	skipped, slowCost := status()
	if skipped != 1 {
		t.Errorf("restore_skipped %d, want 1", skipped)
	}
	t.Logf("slow S3: G4 estimate %v per block; the skipped open answered in %v, the next open (prestaged) in %v",
		slowCost, missTook.Round(time.Microsecond), hitTook.Round(time.Microsecond))

	// Fast S3: the estimate comes down with the reads, and the same open
	// is served from G4.
	// A read stalled by the machine (another test's load) can lift the
	// average again for a while: the warm-up is repeated until the
	// estimate has followed the fast S3, a few times at most.
	proxy.delay.Store(0)
	var fastTook time.Duration
	for attempt := 1; ; attempt++ {
		readWarm(6)
		sink(kv)
		t0 = time.Now()
		got, err := readDirect(kv)
		fastTook = time.Since(t0)
		if err == nil && bytes.Equal(got, data) {
			break
		}
		_, c := status()
		if !errors.Is(err, syscall.ENOENT) || attempt == 5 {
			t.Fatalf("fast S3, attempt %d: %v (G4 estimate %v per block)", attempt, err, c)
		}
		t.Logf("fast S3, attempt %d: still a miss (G4 estimate %v per block); warming again", attempt, c)
	}
	_, fastCost := status()
	t.Logf("fast S3: G4 estimate %v per block; the open was served from G4 in %v", fastCost, fastTook.Round(time.Microsecond))
}
