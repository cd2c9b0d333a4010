package bus

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ctxmem/ctxmemd/sidecar/msg"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func embedded(t *testing.T, o EmbeddedOptions) *Embedded {
	t.Helper()
	if o.StoreDir == "" {
		o.StoreDir = t.TempDir()
	}
	e, err := StartEmbedded(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	return e
}

func connect(t *testing.T, o Options) *nats.Conn {
	t.Helper()
	nc, err := Connect(o, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func TestEmbeddedListenerAndInProcess(t *testing.T) {
	inproc := embedded(t, EmbeddedOptions{})
	if u := inproc.ClientURL(); u != "" {
		t.Fatalf("in-process server has client URL %q", u)
	}
	nc := connect(t, Options{Embedded: inproc, Name: "t"})
	if !nc.IsConnected() {
		t.Fatal("in-process connection not connected")
	}

	addr := freeAddr(t)
	srv := embedded(t, EmbeddedOptions{Listen: addr, ServerName: "listening"})
	if u := srv.ClientURL(); u != "nats://"+addr {
		t.Fatalf("client URL %q, want nats://%s", u, addr)
	}
	tcp := connect(t, Options{URL: srv.ClientURL(), Name: "tcp"})
	if tcp.ConnectedServerName() != "listening" {
		t.Fatalf("connected to %q", tcp.ConnectedServerName())
	}
	for _, bad := range []string{"nonsense", "127.0.0.1:http", "127.0.0.1"} {
		if e, err := StartEmbedded(EmbeddedOptions{StoreDir: t.TempDir(), Listen: bad}); err == nil {
			e.Shutdown()
			t.Errorf("listen %q accepted", bad)
		}
	}
}

func TestConnectOptionErrors(t *testing.T) {
	seed := filepath.Join(t.TempDir(), "missing.nk")
	for name, o := range map[string]Options{
		"no url":           {},
		"two auth methods": {URL: "nats://127.0.0.1:1", User: "u", Password: "p", Token: "t"},
		"cert without key": {URL: "nats://127.0.0.1:1", TLSCert: "c.pem"},
		"missing seed":     {URL: "nats://127.0.0.1:1", NKeySeedFile: seed},
	} {
		if nc, err := Connect(o, true); err == nil {
			nc.Close()
			t.Errorf("%s: accepted", name)
		}
	}
	// Nothing listens: without retry the first attempt fails; with retry
	// Connect returns a connection that keeps trying.
	url := "nats://" + freeAddr(t)
	if nc, err := Connect(Options{URL: url, ConnectTimeout: time.Second}, false); err == nil {
		nc.Close()
		t.Fatal("connected to nothing")
	}
	nc, err := Connect(Options{URL: url, ConnectTimeout: time.Second, ReconnectWait: 50 * time.Millisecond}, true)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := WaitConnected(ctx, nc); err == nil || nc.IsConnected() {
		t.Fatal("WaitConnected returned without a server")
	}
}

// TestConnectRetriesUntilServerStarts: a host started before its NATS
// server connects once the server comes up.
func TestConnectRetriesUntilServerStarts(t *testing.T) {
	addr := freeAddr(t)
	nc, err := Connect(Options{URL: "nats://" + addr, ReconnectWait: 50 * time.Millisecond}, true)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	time.Sleep(200 * time.Millisecond)
	embedded(t, EmbeddedOptions{Listen: addr})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := WaitConnected(ctx, nc); err != nil {
		t.Fatal(err)
	}
}

func TestEnsureCreatesResourcesIdempotently(t *testing.T) {
	e := embedded(t, EmbeddedOptions{})
	nc := connect(t, Options{Embedded: e})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names := msg.For("ens")
	// Ages of at least 2 min: the streams' duplicate window is 2 min and
	// JetStream refuses a max age below it.
	lim := Limits{TelemetryBytes: 1 << 20, TelemetryAge: 5 * time.Minute, CommandAge: 3 * time.Minute,
		HostTTL: 3 * time.Second, LeaderTTL: 2 * time.Second, AppliedTTL: 30 * time.Minute}
	res, err := Ensure(ctx, nc, names, lim)
	if err != nil {
		t.Fatal(err)
	}
	if res.Limits.Replicas != 1 || res.Limits.HostTTL != 3*time.Second {
		t.Fatalf("limits %+v", res.Limits)
	}
	tel, err := res.JS.Stream(ctx, names.Telemetry())
	if err != nil {
		t.Fatal(err)
	}
	tc := tel.CachedInfo().Config
	if tc.MaxBytes != 1<<20 || tc.MaxAge != 5*time.Minute || tc.Retention != jetstream.LimitsPolicy ||
		tc.Discard != jetstream.DiscardOld || tc.Storage != jetstream.FileStorage || len(tc.Subjects) != 3 {
		t.Fatalf("telemetry stream config %+v", tc)
	}
	cmd, err := res.JS.Stream(ctx, names.Commands())
	if err != nil {
		t.Fatal(err)
	}
	if cc := cmd.CachedInfo().Config; cc.Retention != jetstream.WorkQueuePolicy || cc.MaxAge != 3*time.Minute {
		t.Fatalf("commands stream config %+v", cc)
	}
	for kv, ttl := range map[jetstream.KeyValue]time.Duration{res.Hosts: 3 * time.Second, res.Scheduler: 2 * time.Second,
		res.Applied: 30 * time.Minute} {
		st, err := kv.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.TTL() != ttl || st.History() != 1 {
			t.Fatalf("bucket %s: ttl %v history %d, want %v 1", st.Bucket(), st.TTL(), st.History(), ttl)
		}
	}
	// Again, with a larger telemetry cap: same resources, updated limit,
	// existing data kept.
	if _, err := res.Hosts.Put(ctx, "h1", []byte("x")); err != nil {
		t.Fatal(err)
	}
	lim.TelemetryBytes = 2 << 20
	res2, err := Ensure(ctx, nc, names, lim)
	if err != nil {
		t.Fatal(err)
	}
	info, err := res2.JS.Stream(ctx, names.Telemetry())
	if err != nil || info.CachedInfo().Config.MaxBytes != 2<<20 {
		t.Fatalf("telemetry cap not updated: %v", err)
	}
	if e, err := res2.Hosts.Get(ctx, "h1"); err != nil || string(e.Value()) != "x" {
		t.Fatalf("hosts bucket lost its data: %v", err)
	}
	// Two clusters on one server do not share anything.
	other, err := Ensure(ctx, nc, msg.For("ens2"), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Hosts.Get(ctx, "h1"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("cluster ens2 sees ens's host: %v", err)
	}
}

// TestStreamSemantics: what the control loop relies on. The telemetry
// stream keeps the newest messages within its byte cap (a scheduler
// outage loses the oldest telemetry only); both streams drop a second
// publish with the same message id; the commands stream forgets a
// command once it is acknowledged.
func TestStreamSemantics(t *testing.T) {
	e := embedded(t, EmbeddedOptions{})
	nc := connect(t, Options{Embedded: e})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names := msg.For("sem")
	const capBytes = 64 << 10
	res, err := Ensure(ctx, nc, names, Limits{TelemetryBytes: capBytes})
	if err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 1000)
	const n = 200 // ~200 KB into a 64 KiB stream
	for i := 0; i < n; i++ {
		if _, err := res.JS.Publish(ctx, names.Report("h"+strconv.Itoa(i%3)), payload, jetstream.WithMsgID(fmt.Sprint("r", i))); err != nil {
			t.Fatal(err)
		}
	}
	tel, _ := res.JS.Stream(ctx, names.Telemetry())
	info, err := tel.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Bytes > capBytes || info.State.LastSeq != n || info.State.FirstSeq <= 1 || info.State.Msgs == 0 {
		t.Fatalf("telemetry state %+v: want ≤ %d bytes, the newest messages up to seq %d", info.State, capBytes, n)
	}
	if info.State.Msgs != info.State.LastSeq-info.State.FirstSeq+1 {
		t.Fatalf("gaps in the kept messages: %+v", info.State)
	}
	// Duplicate id: not stored again.
	ack, err := res.JS.Publish(ctx, names.Report("h0"), payload, jetstream.WithMsgID(fmt.Sprint("r", n-1)))
	if err != nil || !ack.Duplicate {
		t.Fatalf("duplicate report: %+v %v", ack, err)
	}
	// Subjects outside the cluster's are not captured.
	if _, err := res.JS.Publish(ctx, msg.For("sem2").Report("h0"), payload); err == nil {
		t.Fatal("another cluster's report was stored in this cluster's stream")
	}

	cmdSubj := names.Command("h1")
	for _, id := range []string{"c1", "c2", "c1"} {
		if _, err := res.JS.Publish(ctx, cmdSubj, []byte(id), jetstream.WithMsgID(id)); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := res.JS.CreateOrUpdateConsumer(ctx, names.Commands(), jetstream.ConsumerConfig{
		Durable: names.HostConsumer("h1"), FilterSubject: cmdSubj, AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(10, jetstream.FetchMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for m := range batch.Messages() {
		got = append(got, string(m.Data()))
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if fmt.Sprint(got) != "[c1 c2]" {
		t.Fatalf("commands delivered %v, want [c1 c2] (duplicate id dropped)", got)
	}
	cs, _ := res.JS.Stream(ctx, names.Commands())
	if ci, err := cs.Info(ctx); err != nil || ci.State.Msgs != 0 {
		t.Fatalf("acknowledged commands still stored: %+v %v", ci.State, err)
	}
}

// TestLeaseExpires: the scheduler's leadership is a Create in a bucket
// whose TTL is the lease: a second Create fails while the key lives, and
// succeeds once it expired without renewal. Host records expire the same
// way.
func TestLeaseExpires(t *testing.T) {
	e := embedded(t, EmbeddedOptions{})
	nc := connect(t, Options{Embedded: e})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := Ensure(ctx, nc, msg.For("lease"), Limits{LeaderTTL: time.Second, HostTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rev, err := res.Scheduler.Create(ctx, msg.LeaderKey, []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := res.Scheduler.Create(ctx, msg.LeaderKey, []byte("b")); !errors.Is(err, jetstream.ErrKeyExists) {
		t.Fatalf("second leader: %v, want ErrKeyExists", err)
	}
	// Renewal by compare-and-set works for the holder only.
	if _, err := res.Scheduler.Update(ctx, msg.LeaderKey, []byte("b"), rev+100); err == nil {
		t.Fatal("update with a wrong revision accepted")
	}
	if _, err := res.Scheduler.Update(ctx, msg.LeaderKey, []byte("a"), rev); err != nil {
		t.Fatal(err)
	}
	if _, err := res.Hosts.Put(ctx, "h1", []byte("alive")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err := res.Scheduler.Create(ctx, msg.LeaderKey, []byte("b"))
		if err == nil {
			break
		}
		if !errors.Is(err, jetstream.ErrKeyExists) || time.Now().After(deadline) {
			t.Fatalf("lease did not expire: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := res.Hosts.Get(ctx, "h1"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("host record outlived its TTL: %v", err)
	}
}

// TestEnsureAfterStoreLoss: a server restarted without its store (the
// resources are gone) gets them back from the next Ensure; one restarted
// on the same store keeps them.
func TestEnsureAfterStoreLoss(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddr(t)
	names := msg.For("loss")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := func(store string) *Embedded {
		e, err := StartEmbedded(EmbeddedOptions{StoreDir: store, Listen: addr})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	e := start(dir)
	nc := connect(t, Options{URL: "nats://" + addr, ReconnectWait: 50 * time.Millisecond})
	res, err := Ensure(ctx, nc, names, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := res.Hosts.Put(ctx, "h1", []byte("x")); err != nil {
		t.Fatal(err)
	}
	e.Shutdown()
	e = start(dir) // same store
	if err := WaitConnected(ctx, nc); err != nil {
		t.Fatal(err)
	}
	if v, err := res.Hosts.Get(ctx, "h1"); err != nil || string(v.Value()) != "x" {
		t.Fatalf("same store: %v", err)
	}
	e.Shutdown()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	e = start(t.TempDir()) // store lost
	defer e.Shutdown()
	if err := WaitConnected(ctx, nc); err != nil {
		t.Fatal(err)
	}
	if _, err := res.Hosts.Get(ctx, "h1"); err == nil {
		t.Fatal("bucket survived the loss of the store")
	}
	res, err = Ensure(ctx, nc, names, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := res.Hosts.Put(ctx, "h1", []byte("y")); err != nil {
		t.Fatal(err)
	}
}
