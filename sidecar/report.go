package sidecar

import (
	"context"
	"strconv"
	"time"

	"github.com/ctxmem/ctxmemd/heat"
	"github.com/ctxmem/ctxmemd/sidecar/bus"
	"github.com/ctxmem/ctxmemd/sidecar/msg"
	"github.com/ctxmem/ctxmemd/tiering"
)

// where converts a residency to the wire's tier set.
func where(r tiering.Residency) msg.Where {
	var w msg.Where
	if r.G2 > 0 {
		w |= msg.InG2
	}
	if r.G3 > 0 {
		w |= msg.InG3
	}
	if r.G4 > 0 {
		w |= msg.InG4
	}
	return w
}

func tiers(us []tiering.TierUsage) []msg.Tier {
	out := make([]msg.Tier, len(us))
	for i, u := range us {
		out[i] = msg.Tier{Name: u.Name, Used: u.UsedBytes, Capacity: u.CapacityBytes, Blocks: u.Blocks,
			High: u.HighWatermark, Low: u.LowWatermark, Degraded: u.Degraded}
	}
	return out
}

func hits(st tiering.Stats) msg.Hits {
	return msg.Hits{Requests: st.ReadRequests, RequestHits: st.ReadRequestHits, Blocks: st.BlockReads,
		BlockHits: st.BlockHits, Misses: st.BlockMisses}
}

// BuildReport assembles the heat report for now (exported for the
// benchmark of its cost). Objects whose blocks are all in G4 are parked in
// the ranking so later reports do not walk them again. Calls are
// serialized (each report's moves are counted since the one before, which
// any caller may have built); it is safe beside Run.
func (a *Agent) BuildReport(now time.Time) *msg.Report {
	a.reportMu.Lock()
	defer a.reportMu.Unlock()
	st := a.store.Stats()
	r := &msg.Report{V: msg.Version, Host: a.cfg.Host, Boot: a.boot, Seq: a.seq.Add(1), Time: now.UnixNano(),
		Interval: a.cfg.Interval.Milliseconds(), Tiers: tiers(a.store.Occupancy()), Hits: hits(st),
		Objects: st.Objects, Namespaces: a.cfg.Namespaces, Histogram: a.rank.Histogram(now), Pool: a.poolReport()}
	r.Knobs = a.knobs()
	r.Moves = map[string]int64{}
	for t, n := range st.Demotions {
		if d := n - a.last.Demotions[t]; d > 0 {
			r.Moves["demote."+t] = d
		}
	}
	for t, n := range st.Evictions {
		if d := n - a.last.Evictions[t]; d > 0 {
			r.Moves["evict."+t] = d
		}
	}
	if d := st.Promotions - a.last.Promotions; d > 0 {
		r.Moves["promote"] = d
	}
	var dropped int64
	for _, n := range st.Dropped {
		dropped += n
	}
	var lastDropped int64
	for _, n := range a.last.Dropped {
		lastDropped += n
	}
	if d := dropped - lastDropped; d > 0 {
		r.Moves["drop"] = d
	}
	a.last = st
	_, _, r.DroppedMessages = a.out.stats()

	for _, h := range a.rank.Hottest(a.cfg.HotN, now, nil) {
		if o, ok := a.object(h, now); ok {
			r.Hot = append(r.Hot, o)
		}
	}
	// Cold candidates are KV cache the scheduler may move or drop: a
	// device-class object (an NBD export) is never dropped and is not
	// KV cache, so it is parked like a pinned one.
	var park []tiering.ObjectID
	skip := func(id tiering.ObjectID) bool {
		res, err := a.store.Residency(id)
		if err != nil || res.Durability != tiering.DurabilityCache || res.Pinned || !where(res).AboveG4() {
			park = append(park, id)
			return true
		}
		return false
	}
	cold := a.rank.Coldest(a.cfg.ColdN, now, 0, skip, nil)
	for _, id := range park {
		a.rank.Park(id)
	}
	for _, c := range cold {
		if o, ok := a.object(c, now); ok {
			r.Cold = append(r.Cold, o)
		}
	}
	return r
}

// object describes a ranked object, or ok=false when it has no file name
// (NBD exports, unlinked files) or is gone.
func (a *Agent) object(h heat.Ranked[tiering.ObjectID], now time.Time) (msg.Object, bool) {
	res, err := a.store.Residency(h.Key)
	if err != nil {
		return msg.Object{}, false
	}
	ns, path, ok := a.files.Path(h.Key)
	if !ok {
		return msg.Object{}, false
	}
	return msg.Object{Namespace: ns, Path: path, ID: uint64(h.Key), Score: float32(h.Score),
		IdleMs: now.Sub(h.LastAccess).Milliseconds(), Size: res.Size, Where: where(res), Pinned: res.Pinned,
		LastAccess: h.LastAccess.UnixMilli()}, true
}

// eventBatch is the number of events per Events message.
const eventBatch = 1000

// takeEvents turns the queued object events into Events messages.
func (a *Agent) takeEvents(now time.Time) []*msg.Events {
	a.evMu.Lock()
	pend, named := a.pending, a.named
	a.pending, a.named = nil, nil
	a.evMu.Unlock()
	var out []*msg.Events
	add := func(ev msg.Event) {
		if len(out) == 0 || len(out[len(out)-1].Events) == eventBatch {
			out = append(out, &msg.Events{V: msg.Version, Host: a.cfg.Host, Boot: a.boot, Seq: a.seq.Add(1), Time: now.UnixNano()})
		}
		cur := out[len(out)-1]
		cur.Events = append(cur.Events, ev)
	}
	var retry []pendingEvent
	for _, p := range pend {
		ev := msg.Event{Kind: p.kind, ID: uint64(p.id)}
		if p.kind != msg.EvRemoved {
			res, err := a.store.Residency(p.id)
			if err != nil {
				continue // gone already: its removed event follows
			}
			ns, path, ok := a.files.Path(p.id)
			if !ok {
				if p.tries < nameTries {
					p.tries++
					retry = append(retry, p) // not linked yet: next interval
				}
				continue
			}
			ev.Namespace, ev.Path, ev.Where, ev.Size = ns, path, where(res), res.Size
		}
		add(ev)
	}
	for _, ev := range named {
		add(ev)
	}
	if len(retry) > 0 {
		a.evMu.Lock()
		a.pending = append(retry, a.pending...)
		a.evMu.Unlock()
	}
	return out
}

// report queues this interval's report and events, refreshes liveness and
// flushes the outbox when connected (res != nil).
func (a *Agent) report(ctx context.Context, res *bus.Resources) {
	now := time.Now()
	rep := a.BuildReport(now)
	names := a.cfg.Names
	if data, err := msg.Encode(rep); err == nil {
		a.out.add(outMsg{subject: names.Report(a.cfg.Host), id: msgID(a.boot, rep.Seq), data: data, report: true})
	}
	a.queueEvents(now)
	if res == nil {
		return
	}
	hs := msg.HostState{V: msg.Version, Host: a.cfg.Host, Boot: a.boot, Time: now.UnixNano(), Version: a.cfg.Version,
		Mount: a.cfg.Mount, Tiers: rep.Tiers, Objects: rep.Objects, Hits: rep.Hits, Namespaces: a.cfg.Namespaces,
		Knobs: rep.Knobs, Applied: a.c.applied.Load(), Pool: rep.Pool}
	if data, err := msg.Encode(&hs); err == nil {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		a.checkDuplicateHost(pctx, res, now)
		if _, err := res.Hosts.Put(pctx, a.cfg.Host, data); err == nil {
			a.c.liveness.Add(1)
		}
		cancel()
	}
	a.flush(ctx, res)
}

// queueEvents moves the pending object events into the outbox.
func (a *Agent) queueEvents(now time.Time) {
	for _, ev := range a.takeEvents(now) {
		if data, err := msg.Encode(ev); err == nil {
			a.out.add(outMsg{subject: a.cfg.Names.Event(a.cfg.Host), id: msgID(a.boot, ev.Seq), data: data})
			a.c.events.Add(int64(len(ev.Events)))
		}
	}
}

// flush publishes the outbox.
func (a *Agent) flush(ctx context.Context, res *bus.Resources) {
	n, err := a.out.flush(ctx, res.JS)
	a.c.published.Add(int64(n))
	if err != nil && ctx.Err() == nil {
		a.c.publishErr.Add(1)
		a.log.Debug("control bus: publish deferred", "err", err)
	}
}

func msgID(boot int64, seq uint64) string {
	return strconv.FormatInt(boot, 36) + "." + strconv.FormatUint(seq, 36)
}

// checkDuplicateHost warns (every 30 s at most) when the liveness record
// of this host name was last written by another daemon (another boot)
// within the last few intervals: two daemons share a host name, which
// merges their records and breaks sharing of their files.
func (a *Agent) checkDuplicateHost(ctx context.Context, res *bus.Resources, now time.Time) {
	e, err := res.Hosts.Get(ctx, a.cfg.Host)
	if err != nil {
		return
	}
	var hs msg.HostState
	if msg.Decode(e.Value(), &hs) != nil || hs.Boot == a.boot {
		return
	}
	if now.Sub(time.Unix(0, hs.Time)) > 3*a.cfg.Interval+time.Second {
		return // a previous run of this host
	}
	if hs.Mount == a.cfg.Mount && hs.Boot < a.boot {
		// This daemon's own previous boot, restarted quickly: one mount
		// point holds one live daemon (a second is refused at mount), so
		// an older boot on our mount point is us.
		return
	}
	a.c.dupHost.Add(1)
	if last := a.dupWarned.Load(); now.UnixNano()-last > int64(30*time.Second) && a.dupWarned.CompareAndSwap(last, now.UnixNano()) {
		a.log.Error("another daemon uses this host name on the control bus: give each daemon a unique --host",
			"host", a.cfg.Host, "other_mount", hs.Mount, "other_boot", hs.Boot)
	}
}

// poolReport is the report's pool section.
func (a *Agent) poolReport() *msg.Pool {
	sh := a.cfg.Sharing
	if sh == nil {
		return nil
	}
	t, st := sh.Tier(), sh.Stats()
	u := t.Usage()
	p := &msg.Pool{Bypass: t.Bypassed(), LastUse: t.ExtentUse(), LastWrite: t.ExtentWrites(), StarvedAt: t.StarvedAt(), Imports: st.Imports,
		Shares: st.Shares, ImportNs: st.ImportNs}
	if w := t.Writer(); w != nil {
		for _, l := range w.Leases() {
			p.Held = append(p.Held, l.Extent)
		}
	}
	p.ExtentSize = t.ExtentSize()
	if p.ExtentSize > 0 {
		p.Extents = uint32(u.CapacityBytes / p.ExtentSize)
	}
	return p
}
