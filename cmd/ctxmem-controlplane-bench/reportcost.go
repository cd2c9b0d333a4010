package main

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sys/unix"

	"github.com/ctxmem/ctxmemd/sidecar"
	"github.com/ctxmem/ctxmemd/sidecar/bus"
	"github.com/ctxmem/ctxmemd/sidecar/msg"
	"github.com/ctxmem/ctxmemd/tiering"
	"github.com/ctxmem/ctxmemd/tiering/g3"
)

// reportResult is the big-host measurement.
type reportResult struct {
	Objects, Tracked   int
	Touched            int // touches between two reports
	Rounds             int // reports per variant
	Setup              time.Duration
	Hot, Cold          int   // objects in the last report
	ReportBytes        int   // its msgpack size
	AllocPerReport     int64 // bytes allocated by build + encode
	BuildCPU, BuildThr time.Duration
	BuildP50, BuildP99 time.Duration // wall time of build + encode
	PubCPU             time.Duration // process CPU of build + encode + publish, per report
	PubP50, PubP99     time.Duration
	TouchCPU           time.Duration // thread CPU of the Touched Accessed calls between two reports
	IdlePct            float64       // process CPU while idle (store background), % of one core
	RSSMiB             int64
}

// threadCPU returns the CPU time of the calling OS thread.
func threadCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rssMiB returns VmRSS of this process in MiB.
func rssMiB() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb >> 10
		}
	}
	return 0
}

// waitQuiet waits until this process uses less than 5 % of a core over
// 1 s (the store's write-back and metadata cleaning are done), at most
// limit. It returns the last second's use in % of a core.
func waitQuiet(ctx context.Context, limit time.Duration) float64 {
	end := time.Now().Add(limit)
	for {
		c0, t0 := processCPU(), time.Now()
		select {
		case <-ctx.Done():
			return -1
		case <-time.After(time.Second):
		}
		p := pct(processCPU()-c0, time.Since(t0))
		if p < 5 || time.Now().After(end) {
			return p
		}
	}
}

// runReportCost measures the report cost on a host tracking o.reportObjects
// files.
func runReportCost(ctx context.Context, o options, dir string, log *slog.Logger) (reportResult, error) {
	res := reportResult{Objects: o.reportObjects, Rounds: o.reportRounds}
	dir, err := os.MkdirTemp(dir, "report-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	g3s, err := g3.Open(g3.Options{Dir: filepath.Join(dir, "g3"), SegmentBytes: 64 << 20, NoDirect: true, Logger: log})
	if err != nil {
		return res, err
	}
	st, err := tiering.Open(ctx, tiering.Config{DataDir: filepath.Join(dir, "data"), G2Bytes: 64 << 20, G3: g3s, RankObjects: true, Logger: log})
	if err != nil {
		g3s.Close()
		return res, err
	}
	defer func() {
		st.Close()
		g3s.Close()
	}()
	files := newMemFiles(st, o.reportObjects)
	agent, err := sidecar.New(sidecar.Config{Host: "big-host", Names: msg.For("bench"), Interval: time.Second,
		Namespaces: []string{benchNS}, Log: log}, st, files)
	if err != nil {
		return res, err
	}

	// The files: one 4 KiB block each, 1 byte written (G2 holds 64 MiB of
	// them, write-back moves the rest to G3: buffered I/O, so that writing
	// a million blocks takes seconds, not minutes).
	t0 := time.Now()
	ids := make([]tiering.ObjectID, 0, o.reportObjects)
	for i := 0; i < o.reportObjects; i++ {
		id, err := files.create(ctx, fmt.Sprintf("sess-%06d/layer-%02d/blk-%04d", i/1280, (i/16)%80, i%16), []byte{byte(i)})
		if err != nil {
			return res, fmt.Errorf("file %d: %w", i, err)
		}
		ids = append(ids, id)
	}
	for st.Stats().DirtyBytes > 0 {
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	res.Setup = time.Since(t0)
	res.IdlePct = waitQuiet(ctx, 3*time.Minute)
	res.Tracked = agent.Stats().TrackedObjects
	agent.BuildReport(time.Now()) // the first report ranks every object once: not measured

	// An in-process NATS server for the publish variant.
	emb, err := bus.StartEmbedded(bus.EmbeddedOptions{StoreDir: filepath.Join(dir, "nats"), Log: log})
	if err != nil {
		return res, err
	}
	defer emb.Shutdown()
	nc, err := bus.Connect(bus.Options{Embedded: emb, Name: "ctxmem-bench big host", Log: log}, false)
	if err != nil {
		return res, err
	}
	defer nc.Close()
	names := msg.For("bench")
	bres, err := bus.Ensure(ctx, nc, names, bus.Limits{})
	if err != nil {
		return res, err
	}

	res.Touched = int(float64(o.reportObjects) * o.reportTouchPct / 100)
	rng := rand.New(rand.NewPCG(1, 2))
	touch := func() {
		now := time.Now()
		rank := st.ObjectRanking() // what the store's ReadAt/WriteAt touch
		for j := 0; j < res.Touched; j++ {
			rank.Touch(ids[rng.IntN(len(ids))], now)
		}
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var build, pub []time.Duration
	var ms0, ms1 runtime.MemStats
	for r := 0; r < 2*o.reportRounds; r++ {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		tc := threadCPU()
		touch()
		res.TouchCPU += threadCPU() - tc
		publish := r%2 == 1 // alternate the variants under the same conditions
		if !publish {
			runtime.ReadMemStats(&ms0)
		}
		c0, th0, w0 := processCPU(), threadCPU(), time.Now()
		rep := agent.BuildReport(time.Now())
		data, err := msg.Encode(rep)
		if err != nil {
			return res, err
		}
		if publish {
			hs := msg.HostState{V: msg.Version, Host: rep.Host, Boot: rep.Boot, Time: rep.Time, Tiers: rep.Tiers,
				Objects: rep.Objects, Hits: rep.Hits, Namespaces: rep.Namespaces, Knobs: rep.Knobs}
			hsData, err := msg.Encode(&hs)
			if err != nil {
				return res, err
			}
			if _, err := bres.Hosts.Put(ctx, rep.Host, hsData); err != nil {
				return res, err
			}
			if _, err := bres.JS.Publish(ctx, names.Report(rep.Host), data,
				jetstream.WithMsgID(strconv.FormatUint(rep.Seq, 10))); err != nil {
				return res, err
			}
		}
		w, c, th := time.Since(w0), processCPU()-c0, threadCPU()-th0
		if publish {
			pub = append(pub, w)
			res.PubCPU += c
			continue
		}
		runtime.ReadMemStats(&ms1)
		res.AllocPerReport += int64(ms1.TotalAlloc - ms0.TotalAlloc)
		build = append(build, w)
		res.BuildCPU += c
		res.BuildThr += th
		res.Hot, res.Cold, res.ReportBytes = len(rep.Hot), len(rep.Cold), len(data)
	}
	n := time.Duration(o.reportRounds)
	res.BuildCPU /= n
	res.BuildThr /= n
	res.PubCPU /= n
	res.TouchCPU /= 2 * n
	res.AllocPerReport /= int64(o.reportRounds)
	res.BuildP50, res.BuildP99 = quantile(build, 0.5), quantile(build, 0.99)
	res.PubP50, res.PubP99 = quantile(pub, 0.5), quantile(pub, 0.99)
	res.RSSMiB = rssMiB()
	return res, nil
}

// quantile returns the q-quantile (nearest rank) of ds.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}
