package s3_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/g4"
	"github.com/ctxmem/ctxmemd/tiering/g4/s3"
	"github.com/ctxmem/ctxmemd/tiering/g4/s3/s3test"
	"github.com/ctxmem/ctxmemd/tiering/g4/storetest"
	"github.com/ctxmem/ctxmemd/tiering/tier"
	"github.com/ctxmem/ctxmemd/tiering/tiertest"
)

// hangGuard fails the test if one call takes longer than this: not a
// timing assertion, only a detector for a call that never returns.
const hangGuard = 30 * time.Second

// expectUnavailable runs call, checks that it fails with an error wrapping
// tier.ErrUnavailable, and logs how long it took.
func expectUnavailable(t *testing.T, what string, call func() error) time.Duration {
	t.Helper()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- call() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(hangGuard):
		t.Fatalf("%s: no answer after %v: the call hangs", what, hangGuard)
	}
	d := time.Since(start)
	if !errors.Is(err, tier.ErrUnavailable) {
		t.Fatalf("%s = %v; want an error wrapping tier.ErrUnavailable", what, err)
	}
	t.Logf("%-34s failed in %6v: %v", what, d.Round(time.Millisecond), err)
	return d
}

// outageCalls are the store and tier calls tried during an outage.
func outageCalls(s *s3.Store, tr *g4.Tier, k tier.Key) []struct {
	what string
	call func() error
} {
	p := make([]byte, 256<<10)
	return []struct {
		what string
		call func() error
	}{
		{"store Head", func() error { _, err := s.Head(bg, "obj"); return err }},
		{"store Get", func() error {
			rc, _, err := s.Get(bg, "obj")
			if err == nil {
				_, err = io.ReadAll(rc)
				rc.Close()
			}
			return err
		}},
		{"store GetRange", func() error {
			rc, err := s.GetRange(bg, "obj", 10, 10)
			if err == nil {
				rc.Close()
			}
			return err
		}},
		{"store Put 256 KiB", func() error { return s.Put(bg, "new", bytes.NewReader(p), int64(len(p)), nil) }},
		// A request that timed out may still be carried out later by a
		// frozen server, so the outage deletes another object.
		{"store Delete", func() error { return s.Delete(bg, "victim") }},
		{"store List", func() error { return s.List(bg, "", func(g4.ObjectAttrs) bool { return true }) }},
		{"tier Get 256 KiB block", func() error { _, err := tr.Get(bg, k, p, 0); return err }},
		{"tier Put 256 KiB block", func() error { return tr.Put(bg, tier.Key{Namespace: "o", Object: 99, Gen: 1}, p) }},
	}
}

// TestOutageKilled: the server is killed (SIGKILL) mid-run: every call
// fails as unavailable in bounded time, Health shows the store degraded,
// and after a restart on the same port and directory everything works
// again without reopening the store.
func TestOutageKilled(t *testing.T) {
	srv := s3test.StartServer(t)
	s := newStore(t, serverOptions(srv, "out")) // default Timeout 2 s, 2 retries
	tr, err := g4.NewTier(context.Background(), s, g4.TierOptions{Prefix: "blocks"})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	k := tier.Key{Namespace: "o", Object: 1, Gen: 1}
	block := tiertest.Pattern(k, 256<<10, 0)
	mustPutBlock(t, tr, k, block)
	storetest.MustPut(t, s, "obj", []byte("object before the outage"), nil)

	srv.Stop()
	var worst time.Duration
	for _, c := range outageCalls(s, tr, k) {
		worst = max(worst, expectUnavailable(t, "killed: "+c.what, c.call))
	}
	t.Logf("server killed: slowest failure %v (Timeout 2 s, 2 retries)", worst.Round(time.Millisecond))
	if s.Healthy() || !errors.Is(s.LastError(), tier.ErrUnavailable) || s.Health().ConsecutiveFailures == 0 {
		t.Fatalf("during the outage Health = %+v", s.Health())
	}
	if st := tr.Stats(); st.Unavailable == 0 {
		t.Fatalf("tier Stats.Unavailable = 0 after failed calls")
	}

	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	p := make([]byte, len(block))
	if n, err := tr.Get(bg, k, p, 0); err != nil || n != len(block) || !bytes.Equal(p, block) {
		t.Fatalf("tier Get after restart = %d, %v", n, err)
	}
	if !s.Healthy() {
		t.Fatalf("store not healthy after an answered call: %+v", s.Health())
	}
	if got, _ := storetest.MustGet(t, s, "obj"); string(got) != "object before the outage" {
		t.Fatalf("object after restart = %q", got)
	}
	k2 := tier.Key{Namespace: "o", Object: 2, Gen: 1}
	mustPutBlock(t, tr, k2, tiertest.Pattern(k2, 1000, 0))
	if h := s.Health(); h.LastError == nil || h.LastErrorAt.After(h.LastOKAt) {
		t.Fatalf("Health after recovery = %+v", h)
	}
}

// TestOutageHung: the server is frozen (SIGSTOP: the kernel still accepts
// connections, nothing answers). Each attempt is abandoned after Timeout
// without progress and retries are bounded, so calls fail; a caller
// deadline shorter than that wins; a Get cut off mid-body fails its read.
func TestOutageHung(t *testing.T) {
	srv := s3test.StartServer(t)
	opts := serverOptions(srv, "hung")
	opts.Timeout, opts.Retries = 400*time.Millisecond, 1
	s := newStore(t, opts)
	tr, err := g4.NewTier(context.Background(), s, g4.TierOptions{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	k := tier.Key{Namespace: "h", Object: 1, Gen: 1}
	mustPutBlock(t, tr, k, tiertest.Pattern(k, 256<<10, 0))
	storetest.MustPut(t, s, "obj", []byte("object before the hang"), nil)
	big := storetest.Data(7, 48<<20)
	storetest.MustPut(t, s, "big", big, nil)

	// A read cut off mid-body: take 1 MiB, freeze the server, read on.
	rc, _, err := s.Get(bg, "big")
	if err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 1<<20)
	if _, err := io.ReadFull(rc, head); err != nil || !bytes.Equal(head, big[:1<<20]) {
		t.Fatalf("first MiB: %v", err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	expectUnavailable(t, "hung: read rest of a 48 MiB Get", func() error {
		_, err := io.Copy(io.Discard, rc)
		return err
	})
	rc.Close()
	for _, c := range outageCalls(s, tr, k) {
		expectUnavailable(t, "hung: "+c.what, c.call)
	}
	t.Logf("bound for one store call: (Retries+1) × Timeout + backoff ≤ 2 × 400 ms + (200 + 400) ms; tier calls: TierOptions.Timeout 1 s")
	ctx, cancel := context.WithTimeout(bg, 150*time.Millisecond)
	defer cancel()
	expectUnavailable(t, "hung: Head, caller deadline 150 ms", func() error {
		_, err := s.Head(ctx, "obj")
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Head with an expired caller deadline = %v; want DeadlineExceeded too", err)
		}
		return err
	})
	if s.Healthy() {
		t.Fatal("store healthy while the server is frozen")
	}

	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(bg); err != nil || !s.Healthy() {
		t.Fatalf("Ping after resume = %v, healthy %v", err, s.Healthy())
	}
	if got, _ := storetest.MustGet(t, s, "obj"); string(got) != "object before the hang" {
		t.Fatalf("after resume: %q", got)
	}
	p := make([]byte, 256<<10)
	if n, err := tr.Get(bg, k, p, 0); err != nil || n != len(p) {
		t.Fatalf("tier Get after resume = %d, %v", n, err)
	}
}

// TestCallerCancel: the caller's cancellation is context.Canceled, not an
// outage, and does not mark the store unhealthy.
func TestCallerCancel(t *testing.T) {
	srv := s3test.StartServer(t)
	s := newStore(t, serverOptions(srv, "cancel"))
	storetest.MustPut(t, s, "obj", storetest.Data(1, 8<<20), nil)
	ctx, cancel := context.WithCancel(bg)
	rc, _, err := s.Get(ctx, "obj")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(rc, make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	cancel()
	_, err = io.Copy(io.Discard, rc)
	rc.Close()
	if !errors.Is(err, context.Canceled) || errors.Is(err, tier.ErrUnavailable) {
		t.Fatalf("read after cancel = %v; want context.Canceled only", err)
	}
	if !s.Healthy() {
		t.Fatalf("cancellation marked the store unhealthy: %v", s.LastError())
	}
	if err := s.Put(ctx, "x", strings.NewReader("x"), 1, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put with cancelled ctx = %v", err)
	}
}
