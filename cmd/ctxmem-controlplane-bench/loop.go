package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ctxmem/ctxmemd/sidecar"
	"github.com/ctxmem/ctxmemd/sidecar/bus"
	"github.com/ctxmem/ctxmemd/sidecar/msg"
	"github.com/ctxmem/ctxmemd/sidecar/scheduler"
	"github.com/ctxmem/ctxmemd/tiering"
	"github.com/ctxmem/ctxmemd/tiering/g4"
)

// Policy settings of the load test: short enough that files written by
// the drivers turn cold and are sunk within about a second.
const (
	loopHalfLife = 200 * time.Millisecond
	loopGrace    = 500 * time.Millisecond
	loopReads    = 2 // files re-read per host per second (promoted back from G4)
)

// loopRow is one interval's result. Rates are per second over the
// measurement window.
type loopRow struct {
	Interval     time.Duration
	Hosts        int
	Server       string // "nats-server" or "embedded"
	Window       time.Duration
	OfferedRps   float64 // hosts / interval: reports the hosts are asked to send
	TelemetryPS  float64 // messages (reports, event batches, acks) stored in the telemetry stream
	ConsumedPS   float64 // telemetry messages the scheduler processed (its consumer's ack floor)
	BacklogEnd   uint64  // telemetry messages not yet processed by the scheduler at the end
	ReportsPS    float64 // reports the scheduler processed
	EventsPS     float64 // object events it processed
	CommandsPS   float64 // commands it sent
	AcksPS       float64 // acks it received
	AckMix       string  // acks by status, in % of acks
	AppliedPS    float64 // commands the hosts applied
	SeenHosts    int     // hosts in the scheduler's view at the end
	PendingEnd   int     // commands sent and not yet acknowledged at the end
	SchedCPUPct  float64 // the scheduler process, % of one core
	ServerCPUPct float64 // the nats-server process (-1: embedded, in the hosts' process)
	HostsCPUPct  float64 // this process: every simulated host
	Malformed    int64
	DroppedHosts int64         // telemetry messages the hosts' outboxes dropped
	Burst        time.Duration // time until the hosts applied hosts × objects commands (-1: not within burstLimit)
}

// burstLimit bounds the wait for the initial burst of sinks.
const burstLimit = 3 * time.Minute

// natsServer is the server of one run.
type natsServer struct {
	url  string
	kind string
	pid  int // 0 for the embedded server
	stop func()
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// startServer starts the NATS server of a run: the binary o.natsServer
// ("auto": nats-server from PATH when there is one), else the embedded
// server, both with JetStream on a loopback port and a store under dir.
func startServer(o options, dir string, log *slog.Logger) (*natsServer, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	bin := o.natsServer
	if bin == "auto" {
		bin, _ = exec.LookPath("nats-server")
	}
	if bin == "embedded" {
		bin = ""
	}
	store := filepath.Join(dir, "nats")
	if bin == "" {
		e, err := bus.StartEmbedded(bus.EmbeddedOptions{StoreDir: store, Listen: addr, Log: log})
		if err != nil {
			return nil, err
		}
		return &natsServer{url: e.ClientURL(), kind: "embedded", stop: e.Shutdown}, nil
	}
	host, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(bin, "-js", "-sd", store, "-a", host, "-p", port, "-n", "ctxmem-bench")
	logf, err := os.Create(filepath.Join(dir, "nats-server.log"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	waited := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(waited) }() // owned by stop below
	stop := func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-waited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-waited
		}
	}
	for end := time.Now().Add(20 * time.Second); ; {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(end) {
			stop()
			return nil, fmt.Errorf("%s does not listen on %s (log %s)", bin, addr, logf.Name())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return &natsServer{url: "nats://" + addr, kind: "nats-server", pid: cmd.Process.Pid, stop: stop}, nil
}

// simHost is one simulated host: store, names, agent and connection.
type simHost struct {
	name  string
	st    *tiering.Store
	files *memFiles
	agent *sidecar.Agent
	nc    *nats.Conn
	mu    sync.Mutex
	live  []tiering.ObjectID // oldest first
	seq   int
}

func newSimHost(ctx context.Context, i int, dir, url string, iv time.Duration, log *slog.Logger) (*simHost, error) {
	h := &simHost{name: fmt.Sprintf("host-%03d", i)}
	hdir := filepath.Join(dir, h.name)
	objs, err := g4.NewLocal(filepath.Join(hdir, "g4"))
	if err != nil {
		return nil, err
	}
	t4, err := g4.NewTier(ctx, objs, g4.TierOptions{})
	if err != nil {
		return nil, err
	}
	h.st, err = tiering.Open(ctx, tiering.Config{DataDir: filepath.Join(hdir, "data"), G2Bytes: 8 << 20, G4: t4,
		FlushWorkers: 1, HeatHalfLife: loopHalfLife, RankObjects: true, Logger: log})
	if err != nil {
		return nil, err
	}
	h.files = newMemFiles(h.st, 1024)
	h.agent, err = sidecar.New(sidecar.Config{Host: h.name, Names: msg.For("bench"), Interval: iv,
		Namespaces: []string{benchNS}, Log: log}, h.st, h.files)
	if err != nil {
		h.st.Close()
		return nil, err
	}
	h.nc, err = bus.Connect(bus.Options{URL: url, Name: "ctxmem-bench " + h.name, Log: log}, false)
	if err != nil {
		h.st.Close()
		return nil, err
	}
	return h, nil
}

// write creates n new files of one 4 KiB block and deletes the oldest
// beyond keep.
func (h *simHost) write(ctx context.Context, n, keep int, buf []byte) error {
	for j := 0; j < n; j++ {
		h.mu.Lock()
		h.seq++
		// Names are per host: a name two hosts hold is shared (left to
		// the G3.5 policy), never sunk.
		path := fmt.Sprintf("%s/sess-%06d/blk-%04d", h.name, h.seq/16, h.seq%16)
		buf[0] = byte(h.seq)
		h.mu.Unlock()
		id, err := h.files.create(ctx, path, buf)
		if err != nil {
			return err
		}
		h.mu.Lock()
		h.live = append(h.live, id)
		var old []tiering.ObjectID
		if len(h.live) > keep {
			old = append(old, h.live[:len(h.live)-keep]...)
			h.live = h.live[len(h.live)-keep:]
		}
		h.mu.Unlock()
		for _, id := range old {
			h.files.remove(ctx, id)
		}
	}
	return nil
}

// drive is a host's workload until ctx ends: every second (whatever the
// report interval), churn new files and loopReads re-reads of random live
// ones.
func (h *simHost) drive(ctx context.Context, churn, keep int, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 1))
	buf := bytes.Repeat([]byte{0x5a}, 4096)
	rd := make([]byte, 4096)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := h.write(ctx, churn, keep, buf); err != nil && ctx.Err() == nil {
			slog.Default().Warn("bench: write", "host", h.name, "err", err)
		}
		for j := 0; j < loopReads; j++ {
			h.mu.Lock()
			var id tiering.ObjectID
			if len(h.live) > 0 {
				id = h.live[rng.IntN(len(h.live))]
			}
			h.mu.Unlock()
			if id != 0 {
				_, _ = h.st.ReadAt(ctx, id, rd, 0) // may race a delete: ErrNotExist is fine
			}
		}
	}
}

type loopSnap struct {
	at                         time.Time
	sched                      scheduler.Stats
	applied                    int64
	hostsCPU, server, schedCPU time.Duration
	telemetry, delivered       uint64
	backlog                    uint64
}

func snapshot(ctx context.Context, sp *schedProc, hosts []*simHost, srv *natsServer, js jetstream.JetStream) (loopSnap, error) {
	sn := loopSnap{at: time.Now(), sched: sp.stats(), hostsCPU: processCPU()}
	sn.schedCPU, _ = pidCPU(sp.pid)
	if srv.pid != 0 {
		sn.server, _ = pidCPU(srv.pid)
	}
	for _, h := range hosts {
		sn.applied += h.agent.Stats().Applied
	}
	names := msg.For("bench")
	st, err := js.Stream(ctx, names.Telemetry())
	if err != nil {
		return sn, err
	}
	si, err := st.Info(ctx)
	if err != nil {
		return sn, err
	}
	c, err := js.Consumer(ctx, names.Telemetry(), names.SchedulerConsumer())
	if err != nil {
		return sn, err
	}
	ci, err := c.Info(ctx)
	if err != nil {
		return sn, err
	}
	// Backlog: not yet delivered, plus delivered to the scheduler's client
	// buffer but not yet processed (acknowledged).
	sn.telemetry, sn.delivered, sn.backlog = si.State.LastSeq, ci.AckFloor.Stream, ci.NumPending+uint64(ci.NumAckPending)
	return sn, nil
}

func sum(m map[string]int64) (n int64) {
	for _, v := range m {
		n += v
	}
	return n
}

// runLoop runs the control-loop load test at report interval iv.
func runLoop(ctx context.Context, o options, iv time.Duration, dir string, log *slog.Logger) (loopRow, error) {
	row := loopRow{Interval: iv, Hosts: o.hosts, OfferedRps: float64(o.hosts) / iv.Seconds()}
	dir, err := os.MkdirTemp(dir, "loop-"+iv.String()+"-")
	if err != nil {
		return row, err
	}
	defer os.RemoveAll(dir)
	srv, err := startServer(o, dir, log)
	if err != nil {
		return row, err
	}
	defer srv.stop()
	row.Server = srv.kind

	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup // every goroutine below; waited before connections and stores close
	var hosts []*simHost
	var mon *nats.Conn
	defer func() {
		cancel()
		wg.Wait()
		if mon != nil {
			mon.Close()
		}
		for _, h := range hosts {
			h.nc.Close()
			h.st.Close()
		}
	}()
	for i := 0; i < o.hosts; i++ {
		h, err := newSimHost(runCtx, i, dir, srv.url, iv, log)
		if err != nil {
			return row, fmt.Errorf("host %d: %w", i, err)
		}
		hosts = append(hosts, h)
		buf := bytes.Repeat([]byte{0xa5}, 4096)
		if err := h.write(runCtx, o.objects, o.objects, buf); err != nil {
			return row, err
		}
	}
	lim := bus.Limits{}
	for i, h := range hosts {
		wg.Add(2)
		go func() { defer wg.Done(); _ = h.agent.Run(runCtx, h.nc, lim) }()
		go func() { defer wg.Done(); h.drive(runCtx, o.churn, o.objects, uint64(i)) }()
	}
	sp, err := startSchedProc(srv.url)
	if err != nil {
		return row, err
	}
	defer sp.stop()
	mon, err = bus.Connect(bus.Options{URL: srv.url, Name: "ctxmem-bench monitor", Log: log}, false)
	if err != nil {
		return row, err
	}
	js, err := jetstream.New(mon)
	if err != nil {
		return row, err
	}

	// Warm-up: every initial file turns cold at once; wait until the
	// hosts applied as many commands as there are initial files (the
	// burst is drained), then o.warmup more, so the window measures the
	// steady state.
	t0 := time.Now()
	burst := int64(o.hosts * o.objects)
	for {
		var applied int64
		for _, h := range hosts {
			applied += h.agent.Stats().Applied
		}
		if applied >= burst {
			row.Burst = time.Since(t0)
			break
		}
		if time.Since(t0) > burstLimit {
			row.Burst = -1
			break
		}
		select {
		case <-ctx.Done():
			return row, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	select {
	case <-ctx.Done():
		return row, ctx.Err()
	case <-time.After(o.warmup):
	}
	if !sp.stats().Leader {
		return row, errors.New("the scheduler did not become leader during the warm-up")
	}
	a, err := snapshot(ctx, sp, hosts, srv, js)
	if err != nil {
		return row, err
	}
	select {
	case <-ctx.Done():
		return row, ctx.Err()
	case <-time.After(o.duration):
	}
	b, err := snapshot(ctx, sp, hosts, srv, js)
	if err != nil {
		return row, err
	}
	wall := b.at.Sub(a.at)
	per := func(x, y int64) float64 { return float64(y-x) / wall.Seconds() }
	row.Window = wall
	row.TelemetryPS = per(int64(a.telemetry), int64(b.telemetry))
	row.ConsumedPS = per(int64(a.delivered), int64(b.delivered))
	row.BacklogEnd = b.backlog
	row.ReportsPS, row.EventsPS = per(a.sched.Reports, b.sched.Reports), per(a.sched.Events, b.sched.Events)
	row.CommandsPS = per(sum(a.sched.Commands), sum(b.sched.Commands))
	acks := sum(b.sched.Acks) - sum(a.sched.Acks)
	row.AcksPS = float64(acks) / wall.Seconds()
	row.AckMix = "-"
	if acks > 0 {
		var mix []string
		for _, st := range []string{msg.AckOK, msg.AckDuplicate, msg.AckNotFound, msg.AckRefused, msg.AckExpired, msg.AckError} {
			if d := b.sched.Acks[st] - a.sched.Acks[st]; d > 0 {
				mix = append(mix, fmt.Sprintf("%s %.0f%%", st, 100*float64(d)/float64(acks)))
			}
		}
		row.AckMix = strings.Join(mix, ", ")
	}
	row.AppliedPS = per(a.applied, b.applied)
	row.SchedCPUPct = pct(b.schedCPU-a.schedCPU, wall)
	row.HostsCPUPct = pct(b.hostsCPU-a.hostsCPU, wall)
	row.ServerCPUPct = -1
	if srv.pid != 0 {
		row.ServerCPUPct = pct(b.server-a.server, wall)
	}
	row.SeenHosts, row.PendingEnd, row.Malformed = b.sched.Hosts, b.sched.PendingCmds, b.sched.Malformed-a.sched.Malformed
	for _, h := range hosts {
		row.DroppedHosts += h.agent.Stats().DroppedMessages
	}
	return row, nil
}
