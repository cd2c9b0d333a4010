package sidecar

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ctxmem/ctxmemd/internal/testenv"
	"github.com/ctxmem/ctxmemd/sidecar/bus"
	"github.com/ctxmem/ctxmemd/sidecar/msg"
	"github.com/ctxmem/ctxmemd/sidecar/scheduler"
	"github.com/ctxmem/ctxmemd/tiering"
	"github.com/ctxmem/ctxmemd/tiering/g4"
)

// startScheduler runs a scheduler replica until the returned stop is
// called (or the test ends).
func (r *rig) startScheduler(t *testing.T, grace time.Duration) (*scheduler.Scheduler, func()) {
	t.Helper()
	s, err := scheduler.New(scheduler.Config{Names: r.names, Grace: grace, Limits: r.lim, Log: r.log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx, r.nc) }()
	var once atomic.Bool
	stop := func() {
		if once.CompareAndSwap(false, true) {
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return s, stop
}

func allInG4(st *tiering.Store, ids []tiering.ObjectID) (int, bool) {
	n := 0
	for _, id := range ids {
		if res, err := st.Residency(id); err == nil && res.Blocks > 0 && res.G4 == res.Blocks && !where(res).AboveG4() {
			n++
		}
	}
	return n, n == len(ids)
}

// TestSchedulerDownTelemetryAccumulates: with no scheduler running, the
// hosts' reports pile up in the telemetry stream, which stays within its
// byte cap by dropping the oldest; a scheduler started later takes over
// the backlog (stale reports are not acted on) and acts on fresh reports.
func TestSchedulerDownTelemetryAccumulates(t *testing.T) {
	r := newRig(t)
	const capBytes = 256 << 10
	r.lim.TelemetryBytes = capBytes
	_, fa := r.host(t, "host-a")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// A first scheduler creates the shared durable consumer, then stops.
	s1, stop1 := r.startScheduler(t, time.Hour)
	testenv.Eventually(t, 10*time.Second, func() bool { return s1.IsLeader() && s1.Stats().Reports > 0 }, "first leader reads reports")
	stop1()
	if s1.IsLeader() {
		t.Fatal("stopped scheduler still leader")
	}

	// 300 files (one 4 KiB block each): full reports of 64 hot + 256
	// cold objects, ~16 KB every 200 ms.
	var ids []tiering.ObjectID
	for i := 0; i < 300; i++ {
		ids = append(ids, fa.write(t, fmt.Sprintf("s/%03d", i), bytes.Repeat([]byte{byte(i)}, 4096)))
	}
	js, err := jetstream.New(r.nc)
	if err != nil {
		t.Fatal(err)
	}
	var state jetstream.StreamState
	testenv.Eventually(t, 30*time.Second, func() bool {
		st, err := js.Stream(ctx, r.names.Telemetry())
		if err != nil {
			return false
		}
		info, err := st.Info(ctx)
		if err != nil {
			return false
		}
		state = info.State
		if state.Bytes > capBytes {
			t.Fatalf("telemetry stream holds %d bytes, cap %d", state.Bytes, capBytes)
		}
		return state.FirstSeq > 1 && state.Bytes > capBytes/2
	}, "telemetry stream full and dropping its oldest")
	cons, err := js.Consumer(ctx, r.names.Telemetry(), r.names.SchedulerConsumer())
	if err != nil {
		t.Fatal(err)
	}
	ci, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ci.NumPending == 0 {
		t.Fatalf("no backlog waiting for the scheduler: %+v", ci)
	}
	t.Logf("scheduler down: stream %d msgs, %d bytes (cap %d), first seq %d; backlog %d", state.Msgs, state.Bytes, capBytes,
		state.FirstSeq, ci.NumPending)
	if n, _ := allInG4(fa.st, ids); n != 0 {
		t.Fatalf("%d objects sunk with no scheduler running", n)
	}

	// A new scheduler with a short grace: it reads the backlog through
	// the same consumer and sinks the cold files from fresh reports.
	s2, _ := r.startScheduler(t, 300*time.Millisecond)
	testenv.Eventually(t, 40*time.Second, func() bool {
		_, all := allInG4(fa.st, ids)
		return all
	}, "every cold file sunk by the new scheduler")
	st := s2.Stats()
	if !st.Leader || st.Reports == 0 || st.Commands[msg.OpSink] < int64(len(ids)) || st.Acks[msg.AckOK] == 0 {
		t.Fatalf("new scheduler stats %+v", st)
	}
	ci, err = cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ci.Delivered.Stream < state.LastSeq {
		t.Fatalf("backlog not consumed: delivered up to %d, backlog ended at %d", ci.Delivered.Stream, state.LastSeq)
	}
	got := make([]byte, 4096)
	if _, err := fa.st.ReadAt(ctx, ids[7], got, 0); err != nil || !bytes.Equal(got, bytes.Repeat([]byte{7}, 4096)) {
		t.Fatalf("sunk file reads wrong: %v", err)
	}
}

// TestNATSOutage: the NATS server goes away; the host keeps serving, its
// outbox stays within its tiny bound by dropping the oldest messages; the
// server restarts on the same store, the agent reconnects and flushes,
// and a command sent after the restart is applied exactly once (a
// redelivery of the same id is acknowledged "duplicate", not applied).
func TestNATSOutage(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	storeDir := t.TempDir()
	start := func() *bus.Embedded {
		t.Helper()
		e, err := bus.StartEmbedded(bus.EmbeddedOptions{StoreDir: storeDir, Listen: addr})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	emb := start()
	defer func() { emb.Shutdown() }()
	r := newRig(t) // for names, limits and logger; its own server is unused
	nc, err := bus.Connect(bus.Options{URL: "nats://" + addr, ReconnectWait: 100 * time.Millisecond, Log: r.log}, true)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	objs, err := g4.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t4, err := g4.NewTier(context.Background(), objs, g4.TierOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := tiering.Open(context.Background(), tiering.Config{DataDir: t.TempDir(), G2Bytes: 16 << 20, G4: t4, Logger: r.log, RankObjects: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	f := &files{byPath: map[string]tiering.ObjectID{}, st: st}
	const bufBytes = 1024
	a, err := New(Config{Host: "host-a", Names: r.names, Interval: 100 * time.Millisecond, BufferBytes: bufBytes, Log: r.log}, st, f)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx, nc, r.lim) }()
	defer func() { cancel(); <-done }()

	data := bytes.Repeat([]byte("outage"), 2000)
	x := f.write(t, "x", data)
	testenv.Eventually(t, 20*time.Second, func() bool {
		s := a.Stats()
		return s.Connected && s.Published > 0 && s.Queued == 0
	}, "agent connected and publishing")

	emb.Shutdown()
	testenv.Eventually(t, 10*time.Second, func() bool { return !nc.IsConnected() }, "client notices the outage")
	// The host keeps serving while its telemetry piles up: new files
	// (stored events) in bursts, reads of an old one, for a few report
	// cycles (each blocks ~4 s on publish timeouts while NATS is away).
	got := make([]byte, len(data))
	var last tiering.ObjectID
	outageStart := time.Now()
	for i := 0; ; i++ {
		for j := 0; j < 20; j++ {
			last = f.write(t, fmt.Sprintf("out/%d-%d", i, j), []byte{byte(j)})
		}
		if _, err := st.ReadAt(context.Background(), x, got, 0); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read during the outage: %v", err)
		}
		if res, err := st.Residency(x); err != nil || res.Blocks == 0 {
			t.Fatalf("residency during the outage: %+v %v", res, err)
		}
		s := a.Stats()
		if s.QueuedBytes > bufBytes && s.Queued > 1 {
			t.Fatalf("outbox over its bound: %+v", s)
		}
		if s.DroppedMessages >= 3 {
			t.Logf("after %s of outage: %d queued (%d bytes, bound %d), %d dropped", time.Since(outageStart).Round(time.Millisecond),
				s.Queued, s.QueuedBytes, bufBytes, s.DroppedMessages)
			break
		}
		if time.Since(outageStart) > 30*time.Second {
			t.Fatalf("no telemetry dropped after 30 s of outage with a %d-byte outbox: %+v", bufBytes, s)
		}
		time.Sleep(200 * time.Millisecond)
	}
	pubBefore := a.Stats().Published

	emb = start() // same store dir: streams, consumers and buckets come back
	testenv.Eventually(t, 30*time.Second, func() bool {
		s := a.Stats()
		return nc.IsConnected() && s.Connected && s.Published > pubBefore && s.Queued == 0
	}, "reconnected and flushed")
	// The newest events reached the stream: the last file written during
	// the outage is announced.
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer scancel()
	ns, lastPath, _ := f.Path(last)
	testenv.Eventually(t, 15*time.Second, func() bool {
		found := false
		forEach(t, sctx, js, r.names.Telemetry(), r.names.Event("host-a"), func(m jetstream.Msg) {
			var e msg.Events
			if msg.Decode(m.Data(), &e) != nil {
				return
			}
			for _, ev := range e.Events {
				if ev.Kind == msg.EvStored && ev.Namespace == ns && ev.Path == lastPath {
					found = true
				}
			}
		})
		return found
	}, "the last stored event in the stream")

	// A command after the restart: applied once.
	cmd := msg.Command{V: msg.Version, ID: "knobs-after-restart", Host: "host-a", Op: msg.OpSetKnobs,
		Knobs: &msg.Knobs{ColdThreshold: 40}, Issued: time.Now().UnixNano()}
	raw, err := msg.Encode(&cmd)
	if err != nil {
		t.Fatal(err)
	}
	applied0 := a.Stats().Applied
	if _, err := js.Publish(sctx, r.names.Command("host-a"), raw, jetstream.WithMsgID(cmd.ID)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, func() bool { return a.Stats().Applied == applied0+1 }, "command applied")
	// The same publish again is dropped by the stream's duplicate window;
	// the same id under another message id reaches the host, which
	// refuses to apply it twice.
	if ack, err := js.Publish(sctx, r.names.Command("host-a"), raw, jetstream.WithMsgID(cmd.ID)); err != nil || !ack.Duplicate {
		t.Fatalf("republish: %+v %v", ack, err)
	}
	if _, err := js.Publish(sctx, r.names.Command("host-a"), raw, jetstream.WithMsgID(cmd.ID+"-again")); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, func() bool { return a.Stats().Duplicates == 1 }, "redelivered command acknowledged as duplicate")
	if c := st.HeatKnobs().Cold; c != 40 {
		t.Fatalf("cold threshold %v after set_knobs, want 40", c)
	}
	if s := a.Stats(); s.Applied != applied0+1 {
		t.Fatalf("applied %d commands, want %d", s.Applied, applied0+1)
	}
	// Its acks in the telemetry stream: "ok" for the application and
	// "duplicate" for the redelivery (ack message ids carry the status, so
	// the scheduler hears about the refused redelivery too).
	var statuses []string
	testenv.Eventually(t, 15*time.Second, func() bool {
		statuses = nil
		forEach(t, sctx, js, r.names.Telemetry(), r.names.Ack("host-a"), func(m jetstream.Msg) {
			var ack msg.Ack
			if msg.Decode(m.Data(), &ack) == nil && ack.ID == cmd.ID {
				statuses = append(statuses, ack.Status)
			}
		})
		return len(statuses) > 0
	}, "the ack in the telemetry stream")
	time.Sleep(500 * time.Millisecond) // let a second ack, if one were published, land
	statuses = nil
	forEach(t, sctx, js, r.names.Telemetry(), r.names.Ack("host-a"), func(m jetstream.Msg) {
		var ack msg.Ack
		if msg.Decode(m.Data(), &ack) == nil && ack.ID == cmd.ID {
			statuses = append(statuses, ack.Status)
		}
	})
	if fmt.Sprint(statuses) != "[ok duplicate]" {
		t.Fatalf("acks for %s in the stream: %v, want [ok duplicate]", cmd.ID, statuses)
	}
}

// forEach reads every message of stream on subject (an ordered consumer
// from the start) and calls fn with it.
func forEach(t *testing.T, ctx context.Context, js jetstream.JetStream, stream, subject string, fn func(jetstream.Msg)) {
	t.Helper()
	c, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		t.Logf("ordered consumer: %v", err)
		return
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Logf("consumer info: %v", err)
		return
	}
	left := info.NumPending
	for left > 0 {
		batch, err := c.Fetch(int(min(left, 256)), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Logf("fetch: %v", err)
			return
		}
		n := 0
		for m := range batch.Messages() {
			fn(m)
			n++
		}
		if n == 0 {
			return
		}
		left -= uint64(n)
	}
}
