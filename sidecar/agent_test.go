package sidecar

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ctxmem/ctxmemd/internal/testenv"
	"github.com/ctxmem/ctxmemd/sidecar/bus"
	"github.com/ctxmem/ctxmemd/sidecar/client"
	"github.com/ctxmem/ctxmemd/sidecar/msg"
	"github.com/ctxmem/ctxmemd/sidecar/scheduler"
	"github.com/ctxmem/ctxmemd/tiering"
	"github.com/ctxmem/ctxmemd/tiering/g4"
)

// files is an in-memory Files for this package's tests: the real one is
// the FUSE mount, exercised by the end-to-end tests.
type files struct {
	mu     sync.Mutex
	byPath map[string]tiering.ObjectID
	st     *tiering.Store
}

func (f *files) Path(id tiering.ObjectID) (string, string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for p, i := range f.byPath {
		if i == id {
			return "default", p, true
		}
	}
	return "", "", false
}

func (f *files) Lookup(ns, path string) (tiering.ObjectID, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if id, ok := f.byPath[path]; ok && ns == "default" {
		return id, nil
	}
	return 0, fs.ErrNotExist
}

func (f *files) DropNamespace(ctx context.Context, ns string) (int, error) {
	if ns != "default" {
		return 0, fs.ErrNotExist
	}
	f.mu.Lock()
	ids := f.byPath
	f.byPath = map[string]tiering.ObjectID{}
	f.mu.Unlock()
	for _, id := range ids {
		_ = f.st.Delete(ctx, id)
	}
	return len(ids), nil
}

func (f *files) write(t *testing.T, path string, data []byte) tiering.ObjectID {
	t.Helper()
	id, err := f.st.Create("default", 4096, "file")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.st.WriteAt(context.Background(), id, data, 0); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.byPath[path] = id
	f.mu.Unlock()
	return id
}

type rig struct {
	emb   *bus.Embedded
	nc    *nats.Conn
	names msg.Names
	lim   bus.Limits
	log   *slog.Logger
}

func newRig(t *testing.T) *rig {
	t.Helper()
	emb, err := bus.StartEmbedded(bus.EmbeddedOptions{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emb.Shutdown)
	nc, err := bus.Connect(bus.Options{Embedded: emb, Name: "test"}, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return &rig{emb: emb, nc: nc, names: msg.For("t1"), lim: bus.Limits{HostTTL: 3 * time.Second, LeaderTTL: 2 * time.Second},
		log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// host starts a store, files and an agent named name; stopped at cleanup.
func (r *rig) host(t *testing.T, name string) (*Agent, *files) {
	t.Helper()
	a, f, _ := r.hostAt(t, name, "")
	return a, f
}

// hostAt is host with the mount point the liveness record shows; stop ends
// the agent early (it is also ended at cleanup).
func (r *rig) hostAt(t *testing.T, name, mount string) (*Agent, *files, func()) {
	t.Helper()
	objs, err := g4.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t4, err := g4.NewTier(context.Background(), objs, g4.TierOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := tiering.Open(context.Background(), tiering.Config{DataDir: t.TempDir(), G2Bytes: 64 << 20, G4: t4, Logger: r.log, RankObjects: true, HeatHalfLife: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	f := &files{byPath: map[string]tiering.ObjectID{}, st: st}
	a, err := New(Config{Host: name, Mount: mount, Names: r.names, Interval: 200 * time.Millisecond, Log: r.log}, st, f)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx, r.nc, r.lim) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done; st.Close() }) }
	t.Cleanup(stop)
	return a, f, stop
}

func (r *rig) scheduler(t *testing.T, grace time.Duration) *scheduler.Scheduler {
	t.Helper()
	s, err := scheduler.New(scheduler.Config{Names: r.names, Grace: grace, Limits: r.lim, Log: r.log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx, r.nc) }()
	t.Cleanup(func() { cancel(); <-done })
	return s
}

func TestColdObjectSunkAndPrestaged(t *testing.T) {
	r := newRig(t)
	_, fa := r.host(t, "host-a")
	_, fb := r.host(t, "host-b")
	sch := r.scheduler(t, 500*time.Millisecond)
	testenv.Eventually(t, 10*time.Second, sch.IsLeader, "leadership")

	data := bytes.Repeat([]byte("kv-block"), 4096) // 32 KiB, 8 blocks
	cold := fa.write(t, "sess1/blk0", data)
	// A hot object on B is touched continuously and must stay.
	hot := fb.write(t, "sess2/blk0", data)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, len(data))
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				_, _ = fb.st.ReadAt(context.Background(), hot, buf, 0)
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	testenv.Eventually(t, 20*time.Second, func() bool {
		res, err := fa.st.Residency(cold)
		return err == nil && res.G4 == res.Blocks && res.G2 == 0 && res.G3 == 0
	}, "cold object sunk to G4")
	if res, _ := fb.st.Residency(hot); res.G2 == 0 {
		t.Fatalf("hot object lost its G2 copy: %+v", res)
	}
	got := make([]byte, len(data))
	if _, err := fa.st.ReadAt(context.Background(), cold, got, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("sunk object reads wrong: %v", err)
	}
	// Sink it again (the read promoted it), then prestage it back through
	// the scheduler: the view knows host-a holds it.
	if _, err := fa.st.Sink(context.Background(), cold); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		_, ok := sch.Holders("default", "sess1/blk0")["host-a"]
		return ok
	}, "view knows host-a holds the object")
	rep, err := client.Prestage(context.Background(), r.nc, r.names, msg.PrestageRequest{
		Namespace: "default", Paths: []string{"sess1/blk0", "missing"}, Deadline: time.Now().Add(5 * time.Second).UnixNano()})
	if err != nil {
		t.Fatal(err)
	}
	var ok, notFound int
	for _, res := range rep.Results {
		switch {
		case res.Path == "sess1/blk0" && res.Host == "host-a" && res.Status == msg.AckOK:
			ok++
		case res.Path == "missing" && res.Status == msg.AckNotFound:
			notFound++
		}
	}
	if ok != 1 || notFound != 2 {
		t.Fatalf("prestage reply: %+v", rep.Results)
	}
	if res, _ := fa.st.Residency(cold); res.G2 != res.Blocks {
		t.Fatalf("prestaged object not in G2: %+v", res)
	}
}

func TestCommandsIdempotentAndMalformedDropped(t *testing.T) {
	r := newRig(t)
	a, fa := r.host(t, "host-a")
	sch := r.scheduler(t, time.Hour)
	testenv.Eventually(t, 10*time.Second, sch.IsLeader, "leadership")
	id := fa.write(t, "x", bytes.Repeat([]byte{7}, 10000))
	testenv.Eventually(t, 10*time.Second, func() bool {
		c, err := client.View(context.Background(), r.nc, r.names)
		return err == nil && len(c.Hosts) == 1 && c.Leader != nil && c.Leader.ID == sch.ID()
	}, "host listed")

	ctx := context.Background()
	ack, err := client.Control(ctx, r.nc, r.names, msg.Command{ID: "pin-once", Host: "host-a", Op: msg.OpPin, Namespace: "default", Path: "x"})
	if err != nil || ack.Status != msg.AckOK {
		t.Fatalf("pin: %+v %v", ack, err)
	}
	if res, _ := fa.st.Residency(id); !res.Pinned {
		t.Fatal("not pinned after the pin command")
	}
	// The same id again: JetStream's duplicate window drops the publish,
	// so publish it raw under another message id to force a redelivery.
	js, _ := jetstream.New(r.nc)
	raw, _ := msg.Encode(&msg.Command{V: msg.Version, ID: "pin-once", Host: "host-a", Op: msg.OpUnpin, Namespace: "default", Path: "x"})
	if _, err := js.Publish(ctx, r.names.Command("host-a"), raw, jetstream.WithMsgID("other")); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return a.Stats().Duplicates == 1 }, "duplicate acknowledged")
	if res, _ := fa.st.Residency(id); !res.Pinned {
		t.Fatal("a duplicate command id was applied")
	}
	// Garbage and a wrong version are dropped, the agent keeps working.
	for _, bad := range [][]byte{[]byte("not msgpack \xff\x00"), mustEncode(t, &msg.Command{V: 99, ID: "v99", Host: "host-a", Op: msg.OpUnpin})} {
		if _, err := js.Publish(ctx, r.names.Command("host-a"), bad); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return a.Stats().Malformed == 2 }, "malformed commands dropped")
	ack, err = client.Control(ctx, r.nc, r.names, msg.Command{Host: "host-a", Op: msg.OpSink, Namespace: "default", Path: "nope"})
	if err != nil || ack.Status != msg.AckNotFound {
		t.Fatalf("sink of an unknown object: %+v %v", ack, err)
	}
	ack, err = client.Control(ctx, r.nc, r.names, msg.Command{Host: "host-a", Op: msg.OpSink, Namespace: "default", Path: "x"})
	if err != nil || ack.Status != msg.AckRefused {
		t.Fatalf("sink of a pinned object: %+v %v", ack, err)
	}
	ack, err = client.Control(ctx, r.nc, r.names, msg.Command{Host: "host-a", Op: msg.OpSetKnobs, Knobs: &msg.Knobs{ColdThreshold: 500}})
	if err != nil || ack.Status != msg.AckRefused {
		t.Fatalf("bad knobs: %+v %v", ack, err)
	}
	// Good knobs reach the core, and the next report carries them.
	ack, err = client.Control(ctx, r.nc, r.names, msg.Command{Host: "host-a", Op: msg.OpSetKnobs, Knobs: &msg.Knobs{ColdThreshold: 20, DRAMHigh: 0.8}})
	if err != nil || ack.Status != msg.AckOK {
		t.Fatalf("knobs: %+v %v", ack, err)
	}
	if hk, lim := fa.st.HeatKnobs(), fa.st.G2Limits(); hk.Cold != 20 || lim.High != 0.8 {
		t.Fatalf("after set_knobs: heat %+v, G2 %+v", hk, lim)
	}
	if k := a.BuildReport(time.Now()).Knobs; k.ColdThreshold != 20 || k.DRAMHigh != 0.8 {
		t.Fatalf("report knobs %+v", k)
	}
	ack, err = client.Control(ctx, r.nc, r.names, msg.Command{Host: "host-a", Op: msg.OpDropNamespace, Namespace: "default"})
	if err != nil || ack.Status != msg.AckOK || ack.Blocks != 1 {
		t.Fatalf("drop namespace: %+v %v", ack, err)
	}
	if _, err := fa.st.Residency(id); err == nil {
		t.Fatal("object survived the namespace drop")
	}
	// An expired prestage is answered "expired", not applied.
	ack, err = client.Control(ctx, r.nc, r.names, msg.Command{Host: "host-a", Op: msg.OpPrestage, Namespace: "default", Path: "x",
		Deadline: time.Now().Add(-time.Second).UnixNano()})
	if err == nil && ack.Status != msg.AckExpired && ack.Status != msg.AckError {
		t.Fatalf("expired prestage: %+v", ack)
	}
}

func mustEncode(t *testing.T, v any) []byte {
	t.Helper()
	b, err := msg.Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestQuickRestartIsNotADuplicate: a daemon restarted at once finds its own
// previous boot's fresh liveness record; that is not another daemon.
func TestQuickRestartIsNotADuplicate(t *testing.T) {
	r := newRig(t)
	a1, _, stop := r.hostAt(t, "restarted", "/mnt/ctxmem")
	testenv.Eventually(t, 10*time.Second, func() bool { return a1.Stats().Published > 0 }, "first boot's liveness record")
	stop()
	a2, _, _ := r.hostAt(t, "restarted", "/mnt/ctxmem")
	testenv.Eventually(t, 10*time.Second, func() bool { return a2.Stats().Published > 3 }, "second boot reports")
	if n := a2.Stats().DuplicateHost; n != 0 {
		t.Fatalf("the restarted daemon took its own previous boot for a duplicate %d times", n)
	}
}

func TestDuplicateHostNameDetected(t *testing.T) {
	r := newRig(t)
	a1, _ := r.host(t, "same")
	a2, _ := r.host(t, "same")
	testenv.Eventually(t, 15*time.Second, func() bool {
		return a1.Stats().DuplicateHost > 0 || a2.Stats().DuplicateHost > 0
	}, "duplicate host name noticed")
	b, _ := r.host(t, "other")
	time.Sleep(time.Second)
	if n := b.Stats().DuplicateHost; n != 0 {
		t.Fatalf("a unique host name reported as duplicate %d times", n)
	}
}

// TestBuildReportBesideRun: BuildReport is exported (benchmarks, tests)
// and may be called while Run builds its own reports, and from several
// goroutines; under -race this fails if the calls share report state
// unguarded (as they did: a CI run caught the previous report's counters
// written by Run's report and a test's at once).
func TestBuildReportBesideRun(t *testing.T) {
	r := newRig(t)
	a, fa := r.host(t, "host-a")
	fa.write(t, "x", bytes.Repeat([]byte{7}, 10000))
	testenv.Eventually(t, 10*time.Second, func() bool { return a.Stats().Published > 2 }, "reports published")
	end := time.Now().Add(time.Second)
	var wg sync.WaitGroup
	bad := make(chan string, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				if rep := a.BuildReport(time.Now()); rep.Host != "host-a" {
					bad <- rep.Host
					return
				}
			}
		}()
	}
	wg.Wait()
	close(bad)
	for h := range bad {
		t.Fatalf("report of host %q", h)
	}
}
