package scheduler

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/sidecar/msg"
)

// decider is a Scheduler with the leader's state set up as startActing
// does, without a bus: decideLocked and onReport can be called directly.
func decider(t *testing.T, cfg Config) *Scheduler {
	t.Helper()
	cfg.Names = msg.For("unit")
	cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.hosts = map[string]*hostView{}
	s.names = newView()
	s.sent = map[string]time.Time{}
	s.waits = map[string]chan msg.Ack{}
	s.shared = map[objKey]string{}
	s.importers = map[objKey]map[string]bool{}
	s.staleRound = map[objKey]int{}
	s.shareTry = map[objKey]int{}
	s.shareKey = map[string]objKey{}
	s.shareFailAt = map[objKey]time.Time{}
	return s
}

const dBoot = int64(1700000000000000000)

// dReport is a fresh report from host "h1" with G2 (1 MiB, 10 % used),
// an unbounded G3 and a healthy G4, and the given cold objects.
func dReport(cold ...msg.Object) *msg.Report {
	return &msg.Report{V: msg.Version, Host: "h1", Boot: dBoot, Seq: 7, Time: time.Now().UnixNano(), Interval: 1000,
		Tiers: []msg.Tier{
			{Name: "G2", Used: 100 << 10, Capacity: 1 << 20, High: 0.9, Low: 0.75},
			{Name: "G3", Used: 10 << 20},
			{Name: "G4", Used: 1 << 20},
		},
		Cold: cold}
}

// dObj is an object idle for idle, with score, size 64 KiB, in where.
func dObj(id uint64, score float32, idle time.Duration, where msg.Where) msg.Object {
	return msg.Object{Namespace: "ns", Path: fmt.Sprintf("f%d", id), ID: id, Score: score, IdleMs: idle.Milliseconds(),
		Size: 64 << 10, Where: where}
}

// decide runs decideLocked as onReport does (view updated from the
// report first, keeping any holders the test put there).
func decide(s *Scheduler, r *msg.Report) []*msg.Command {
	s.mu.Lock()
	defer s.mu.Unlock()
	hv := s.hostLocked(r.Host, r.Boot)
	hv.last = r
	for _, o := range append(append([]msg.Object(nil), r.Hot...), r.Cold...) {
		s.holdLocked(hv, o.Namespace, o.Path, o.ID)
	}
	return s.decideLocked(r)
}

func ops(cmds []*msg.Command) []string {
	var out []string
	for _, c := range cmds {
		out = append(out, fmt.Sprintf("%s:%s", c.Op, c.Path))
	}
	return out
}

func TestDecideSinksColdObjectPastGrace(t *testing.T) {
	s := decider(t, Config{Grace: time.Minute})
	o := dObj(11, 3, 2*time.Minute, msg.InG3)
	rep := dReport(o)
	cmds := decide(s, rep)
	if len(cmds) != 1 {
		t.Fatalf("commands %v, want one sink", ops(cmds))
	}
	c := cmds[0]
	// The id carries the object's last access, so a later cold spell is
	// a new decision.
	want := msg.CommandID(msg.OpSink, "h1", dBoot, uint64(11), o.LastAccess)
	if c.Op != msg.OpSink || c.Host != "h1" || c.Namespace != "ns" || c.Path != "f11" || c.Object != 11 || c.Boot != dBoot || c.ID != want {
		t.Fatalf("command %+v, want sink of ns/f11 (object 11, boot %d) with id %s", c, dBoot, want)
	}
	// The same decision again while the first is unacknowledged: nothing
	// new (the id is pending).
	s.sent[c.ID] = time.Now()
	if cmds := decide(s, dReport(o)); len(cmds) != 0 {
		t.Fatalf("pending sink sent again: %v", ops(cmds))
	}
}

func TestDecideNothingWithinGrace(t *testing.T) {
	s := decider(t, Config{Grace: time.Minute})
	cmds := decide(s, dReport(
		dObj(1, 3, 59*time.Second, msg.InG3),          // idle, but not for long enough
		dObj(2, 31, 10*time.Minute, msg.InG3),         // long idle but not cold (score above 30)
		dObj(3, 1, 10*time.Minute, msg.InG4),          // only in G4 already
		dObj(4, 1, 10*time.Minute, msg.Where(0)),      // no blocks
		dObj(5, 29.9, time.Minute, msg.InG2|msg.InG4), // exactly at grace, just cold: sunk
	))
	if got := ops(cmds); len(got) != 1 || got[0] != "sink:f5" {
		t.Fatalf("commands %v, want only sink:f5", got)
	}
}

func TestDecideNothingForPinnedOrShared(t *testing.T) {
	s := decider(t, Config{Grace: time.Second})
	pinned := dObj(1, 0, time.Hour, msg.InG3)
	pinned.Pinned = true
	shared := dObj(2, 0, time.Hour, msg.InG3)
	s.names.hold(s.names.hostIndex("h2"), "ns", "f2", 99) // another host holds it too
	private := dObj(3, 0, time.Hour, msg.InG3)
	cmds := decide(s, dReport(pinned, shared, private))
	if got := ops(cmds); len(got) != 1 || got[0] != "sink:f3" {
		t.Fatalf("commands %v, want only sink:f3", got)
	}
	if n := len(s.Holders("ns", "f2")); n != 2 {
		t.Fatalf("view shows %d holders of f2, want 2", n)
	}
	// Once h2 drops it, it is private and sunk.
	slot, _ := s.names.lookup("ns", "f2")
	s.names.unhold(s.names.hostIndex("h2"), slot)
	if got := ops(decide(s, dReport(shared))); len(got) != 1 || got[0] != "sink:f2" {
		t.Fatalf("commands %v, want sink:f2", got)
	}
}

func TestDecideNoSinkWithoutHealthyG4(t *testing.T) {
	s := decider(t, Config{Grace: time.Second})
	o := dObj(1, 0, time.Hour, msg.InG3)
	noG4 := dReport(o)
	noG4.Tiers = noG4.Tiers[:2]
	if cmds := decide(s, noG4); len(cmds) != 0 {
		t.Fatalf("no G4: commands %v", ops(cmds))
	}
	degraded := dReport(o)
	degraded.Tiers[2].Degraded = true
	if cmds := decide(s, degraded); len(cmds) != 0 {
		t.Fatalf("degraded G4: commands %v", ops(cmds))
	}
	// The G3 pressure policy sinks too: it must not either.
	full := dReport(o)
	full.Tiers[1] = msg.Tier{Name: "G3", Used: 95 << 20, Capacity: 100 << 20, High: 0.9, Low: 0.75}
	full.Tiers[2].Degraded = true
	if cmds := decide(s, full); len(cmds) != 0 {
		t.Fatalf("full G3, degraded G4: commands %v", ops(cmds))
	}
	if cmds := decide(s, dReport(o)); len(cmds) != 1 {
		t.Fatalf("healthy G4: commands %v, want the sink", ops(cmds))
	}
}

// TestDecideG2Pressure: G2 above (high − margin) × capacity demotes the
// report's coldest objects that have blocks in G2, unpinned, in cold
// order, until used − low × capacity bytes are covered.
func TestDecideG2Pressure(t *testing.T) {
	s := decider(t, Config{Grace: time.Hour}) // no sinks: only pressure acts
	mk := func(used int64, cold ...msg.Object) *msg.Report {
		r := dReport(cold...)
		r.Tiers[0] = msg.Tier{Name: "G2", Used: used, Capacity: 1000 << 10, High: 0.9, Low: 0.75}
		return r
	}
	var cold []msg.Object
	for i := uint64(1); i <= 8; i++ {
		cold = append(cold, dObj(i, 5, time.Second, msg.InG2|msg.InG3)) // 64 KiB each
	}
	cold[1].Where = msg.InG3 // nothing in G2 to free
	cold[2].Pinned = true
	// 840 KiB used: below 0.85 × 1000 KiB = 850 KiB → nothing.
	if cmds := decide(s, mk(840<<10, cold...)); len(cmds) != 0 {
		t.Fatalf("below high − margin: %v", ops(cmds))
	}
	// 880 KiB used: above 850; over = 880 − 750 = 130 KiB → 3 objects of
	// 64 KiB (the third takes it below zero), skipping f2 and f3.
	r := mk(880<<10, cold...)
	cmds := decide(s, r)
	if got := fmt.Sprint(ops(cmds)); got != "[demote:f1 demote:f4 demote:f5]" {
		t.Fatalf("commands %s, want demote of f1, f4, f5", got)
	}
	epoch := r.Time / int64(time.Minute) // the same object may be demoted again next minute
	for _, c := range cmds {
		if c.ID != msg.CommandID(msg.OpDemote, "h1", dBoot, c.Object, epoch) {
			t.Fatalf("demote id %s does not carry the report's minute", c.ID)
		}
	}
	clear(s.sent)
	// 1000 KiB used: 250 KiB over → 4 objects.
	if got := fmt.Sprint(ops(decide(s, mk(1000<<10, cold...)))); got != "[demote:f1 demote:f4 demote:f5 demote:f6]" {
		t.Fatalf("commands %s, want f1 f4 f5 f6 (250 KiB over, 64 KiB each)", got)
	}
	clear(s.sent)
	// Low watermark 0.5: 500 KiB over, more than the 6 eligible objects
	// hold: all of them, nothing else.
	r = mk(1000<<10, cold...)
	r.Tiers[0].Low = 0.5
	if got := fmt.Sprint(ops(decide(s, r))); got != "[demote:f1 demote:f4 demote:f5 demote:f6 demote:f7 demote:f8]" {
		t.Fatalf("commands %s, want every eligible object", got)
	}
	// A custom margin moves the trigger: margin 0.01 → limit 890 KiB.
	s2 := decider(t, Config{Grace: time.Hour, PressureMargin: 0.01})
	if cmds := decide(s2, mk(880<<10, cold...)); len(cmds) != 0 {
		t.Fatalf("margin 0.01, 880 KiB: %v", ops(cmds))
	}
}

// TestDecideG3Pressure: G3 near its high watermark sinks cold private G3
// objects before the segment reclaimer must.
func TestDecideG3Pressure(t *testing.T) {
	s := decider(t, Config{Grace: time.Hour})
	r := dReport(dObj(1, 50, time.Second, msg.InG3), dObj(2, 50, time.Second, msg.InG2), dObj(3, 50, time.Second, msg.InG3),
		dObj(4, 50, time.Second, msg.InG3))
	r.Tiers[1] = msg.Tier{Name: "G3", Used: 1000 << 10, Capacity: 1100 << 10, High: 0.9, Low: 0.8}
	// over = 1000 − 880 = 120 KiB → f1 and f3 (f2 has nothing in G3).
	if got := fmt.Sprint(ops(decide(s, r))); got != "[sink:f1 sink:f3]" {
		t.Fatalf("commands %s, want sink f1 f3", got)
	}
}

func TestDecideBudgetPerReport(t *testing.T) {
	s := decider(t, Config{Grace: time.Second, MaxCommandsPerReport: 3})
	var cold []msg.Object
	for i := uint64(1); i <= 10; i++ {
		cold = append(cold, dObj(i, 0, time.Hour, msg.InG3))
	}
	if got := fmt.Sprint(ops(decide(s, dReport(cold...)))); got != "[sink:f1 sink:f2 sink:f3]" {
		t.Fatalf("commands %s, want the 3 coldest", got)
	}
}

// TestStaleReportDecidesNothing: a report that waited in the stream (no
// leader for a while) updates the view but triggers no command; the same
// report fresh does.
func TestStaleReportDecidesNothing(t *testing.T) {
	s := decider(t, Config{Grace: time.Second})
	r := dReport(dObj(1, 0, time.Hour, msg.InG3))
	r.Time = time.Now().Add(-staleReport - 3*time.Second).UnixNano() // older than 5 s + 2 intervals
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("a stale report led to a send (panic without a bus: %v)", p)
			}
		}()
		s.onReport(context.Background(), nil, r)
	}()
	st := s.Stats()
	if st.Reports != 1 || st.Hosts != 1 || st.ViewObjects != 1 || len(st.Commands) != 0 || st.PendingCmds != 0 {
		t.Fatalf("after a stale report: %+v", st)
	}
	if h := s.Holders("ns", "f1"); h["h1"] != 1 {
		t.Fatalf("view not updated by the stale report: %v", h)
	}
	r.Time = time.Now().UnixNano()
	if cmds := decide(s, r); len(cmds) != 1 {
		t.Fatalf("fresh report: %v, want a sink", ops(cmds))
	}
}

// TestReportFromRestartedHostResetsView: object ids are per boot; a new
// boot drops the host's old ids from the view.
func TestReportFromRestartedHostResetsView(t *testing.T) {
	s := decider(t, Config{Grace: time.Hour})
	decide(s, dReport(dObj(1, 0, 0, msg.InG2)))
	r := dReport(dObj(2, 0, 0, msg.InG2))
	r.Boot = dBoot + 1
	decide(s, r)
	if h := s.Holders("ns", "f1"); len(h) != 0 {
		t.Fatalf("old boot's object still in the view: %v", h)
	}
	if h := s.Holders("ns", "f2"); h["h1"] != 2 {
		t.Fatalf("new boot's object missing: %v", h)
	}
}

func TestConfigDefaultsAndErrors(t *testing.T) {
	s, err := New(Config{Names: msg.For("c")})
	if err != nil {
		t.Fatal(err)
	}
	if s.cfg.ColdThreshold != 30 || s.cfg.Grace != 5*time.Minute || s.cfg.PressureMargin != 0.05 ||
		s.cfg.MaxCommandsPerReport != 64 || s.ID() == "" {
		t.Fatalf("defaults: %+v", s.cfg)
	}
	for _, bad := range []Config{{Names: msg.For("a.b")}, {Names: msg.For("")}, {Names: msg.For("c"), ColdThreshold: 101},
		{Names: msg.For("c"), ColdThreshold: -1}} {
		if _, err := New(bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}
