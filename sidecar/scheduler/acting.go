package scheduler

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ctxmem/ctxmemd/sidecar/bus"
	"github.com/ctxmem/ctxmemd/sidecar/msg"
)

// acting is the leader's work: the telemetry consumer and the request
// subscriptions. stop undoes it.
type acting struct {
	cc      jetstream.ConsumeContext
	subs    []*nats.Subscription
	cancel  context.CancelFunc
	renewed time.Time
	done    chan struct{}
}

func (a *acting) stop() {
	a.cancel()
	a.cc.Stop()
	for _, sub := range a.subs {
		_ = sub.Unsubscribe()
	}
	<-a.done
}

// startActing begins leading: a fresh view, the telemetry consumer, the
// request subjects, and a resync command to every live host.
func (s *Scheduler) startActing(ctx context.Context, res *bus.Resources, nc *nats.Conn) (*acting, error) {
	names := s.cfg.Names
	s.mu.Lock()
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
	s.mu.Unlock()
	cons, err := res.JS.CreateOrUpdateConsumer(ctx, names.Telemetry(), jetstream.ConsumerConfig{
		Durable: names.SchedulerConsumer(), AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: 30 * time.Second, MaxAckPending: 4096, DeliverPolicy: jetstream.DeliverNewPolicy,
		Description: "the acting ctxmemd scheduler",
	})
	if err != nil {
		return nil, fmt.Errorf("telemetry consumer: %w", err)
	}
	actx, cancel := context.WithCancel(ctx)
	a := &acting{cancel: cancel, renewed: time.Now(), done: make(chan struct{})}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		s.telemetry(actx, res, m)
		_ = m.Ack()
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("consume telemetry: %w", err)
	}
	a.cc = cc
	for subj, fn := range map[string]nats.MsgHandler{
		names.Prestage(): func(m *nats.Msg) { go s.prestage(actx, res, m) },
		names.Control():  func(m *nats.Msg) { go s.control(actx, res, m) },
	} {
		sub, err := nc.QueueSubscribe(subj, "ctxmem-scheduler", fn)
		if err != nil {
			a.cc.Stop()
			cancel()
			for _, s := range a.subs {
				_ = s.Unsubscribe()
			}
			return nil, fmt.Errorf("subscribe %s: %w", subj, err)
		}
		a.subs = append(a.subs, sub)
	}
	go func() {
		defer close(a.done)
		s.resyncAll(actx, res)
		s.expireLoop(actx)
	}()
	return a, nil
}

// resyncAll asks every host listed in the hosts bucket for its inventory.
func (s *Scheduler) resyncAll(ctx context.Context, res *bus.Resources) {
	keys, err := res.Hosts.ListKeys(ctx)
	if err != nil {
		s.log.Warn("scheduler: list hosts", "err", err)
		return
	}
	for host := range keys.Keys() {
		s.send(ctx, res, &msg.Command{Op: msg.OpResync, Host: host,
			ID: msg.CommandID(msg.OpResync, host, s.cfg.ID, time.Now().UnixNano())})
	}
}

// expireLoop forgets commands that were never acknowledged (so a decision
// can be taken again) and hosts that stopped reporting.
func (s *Scheduler) expireLoop(ctx context.Context) {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		ttl := s.cfg.Limits.HostTTL
		if ttl == 0 {
			ttl = 10 * time.Second
		}
		s.mu.Lock()
		for id, at := range s.sent {
			if now.Sub(at) > 2*time.Minute {
				delete(s.sent, id)
			}
		}
		for h, hv := range s.hosts {
			if now.Sub(hv.seen) > 3*ttl {
				s.forgetHostLocked(h)
			}
		}
		s.mu.Unlock()
	}
}

func (s *Scheduler) forgetHostLocked(host string) {
	hv := s.hosts[host]
	if hv == nil {
		return
	}
	for _, r := range hv.byID {
		if slot, ok := s.names.resolve(r); ok {
			s.names.unhold(hv.idx, slot)
		}
	}
	delete(s.hosts, host)
}

// send publishes cmd on the host's command subject with its id as the
// JetStream message id, unless a command with that id is awaiting an ack.
// It reports whether it was published.
func (s *Scheduler) send(ctx context.Context, res *bus.Resources, cmd *msg.Command) bool {
	cmd.V = msg.Version
	cmd.Issuer = s.cfg.ID
	cmd.Issued = time.Now().UnixNano()
	s.mu.Lock()
	if _, ok := s.sent[cmd.ID]; ok {
		s.mu.Unlock()
		return false
	}
	s.sent[cmd.ID] = time.Now()
	s.mu.Unlock()
	data, err := msg.Encode(cmd)
	if err == nil {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err = res.JS.PublishMsg(pctx, &nats.Msg{Subject: s.cfg.Names.Command(cmd.Host), Data: data,
			Header: nats.Header{jetstream.MsgIDHeader: []string{cmd.ID}}})
		cancel()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		delete(s.sent, cmd.ID)
		s.log.Warn("scheduler: command not sent", "id", cmd.ID, "host", cmd.Host, "op", cmd.Op, "err", err)
		return false
	}
	s.stats.Commands[cmd.Op]++
	s.log.Debug("scheduler: command sent", "id", cmd.ID, "host", cmd.Host, "op", cmd.Op, "ns", cmd.Namespace,
		"path", cmd.Path, "why", cmd.Reason)
	return true
}

// telemetry handles one report, event batch or ack.
func (s *Scheduler) telemetry(ctx context.Context, res *bus.Resources, m jetstream.Msg) {
	switch s.cfg.Names.KindOf(m.Subject()) {
	case "report":
		var r msg.Report
		if err := msg.Decode(m.Data(), &r); err != nil {
			s.malformed(m, err)
			return
		}
		s.onReport(ctx, res, &r)
	case "event":
		var e msg.Events
		if err := msg.Decode(m.Data(), &e); err != nil {
			s.malformed(m, err)
			return
		}
		for _, c := range s.onEvents(&e) {
			s.send(ctx, res, c)
		}
	case "ack":
		var a msg.Ack
		if err := msg.Decode(m.Data(), &a); err != nil {
			s.malformed(m, err)
			return
		}
		s.onAck(&a)
	default:
		s.malformed(m, fmt.Errorf("unexpected subject"))
	}
}

func (s *Scheduler) malformed(m jetstream.Msg, err error) {
	s.mu.Lock()
	s.stats.Malformed++
	s.mu.Unlock()
	s.log.Warn("scheduler: dropping malformed message", "subject", m.Subject(), "bytes", len(m.Data()), "err", err)
}

// hostLocked returns the view of host for boot, resetting it when the
// host restarted (object ids are per boot).
func (s *Scheduler) hostLocked(host string, boot int64) *hostView {
	hv := s.hosts[host]
	if hv != nil && hv.boot != boot && boot != 0 {
		s.forgetHostLocked(host)
		hv = nil
	}
	if hv == nil {
		hv = &hostView{idx: s.names.hostIndex(host), boot: boot, byID: map[uint64]nameRef{}}
		s.hosts[host] = hv
	}
	hv.seen = time.Now()
	return hv
}

// onEvents updates the view from an event batch and returns the commands
// it calls for (share requests for wanted names).
func (s *Scheduler) onEvents(e *msg.Events) []*msg.Command {
	s.mu.Lock()
	defer s.mu.Unlock()
	var cmds []*msg.Command
	s.stats.Events += int64(len(e.Events))
	hv := s.hostLocked(e.Host, e.Boot)
	for _, ev := range e.Events {
		switch ev.Kind {
		case msg.EvWanted:
			cmds = append(cmds, s.wantedLocked(e.Host, objKey{ev.Namespace, ev.Path})...)
			continue
		case msg.EvShared:
			if ev.Path != "" {
				s.shared[objKey{ev.Namespace, ev.Path}] = e.Host
			}
		case msg.EvStale:
			// The published records went stale: the next want shares it
			// again, with fresh records.
			k := objKey{ev.Namespace, ev.Path}
			delete(s.shared, k)
			s.staleRound[k]++
			continue
		case msg.EvImported:
			if ev.Path != "" {
				k := objKey{ev.Namespace, ev.Path}
				if s.importers[k] == nil {
					s.importers[k] = map[string]bool{}
				}
				s.importers[k][e.Host] = true
			}
		}
		switch ev.Kind {
		case msg.EvStored, msg.EvMoved, msg.EvShared, msg.EvImported:
			if ev.Path == "" {
				continue
			}
			s.holdLocked(hv, ev.Namespace, ev.Path, ev.ID)
		case msg.EvRemoved:
			if r, ok := hv.byID[ev.ID]; ok {
				delete(hv.byID, ev.ID)
				slot, live := s.names.resolve(r)
				if !live {
					continue // the name left the view already
				}
				if cur, held := s.names.idOf(slot, e.Host); held && cur != ev.ID {
					continue // the host holds the name under a newer id (deleted and made again)
				}
				k := s.names.name(slot)
				s.names.unhold(hv.idx, slot)
				if s.shared[k] == e.Host {
					delete(s.shared, k)
				}
				if m := s.importers[k]; m != nil {
					delete(m, e.Host)
					if len(m) == 0 {
						delete(s.importers, k)
					}
				}
			}
		}
	}
	if e.Resync && e.Last {
		hv.synced = true
	}
	return cmds
}

// holdLocked records that the host of view hv holds (ns, path) as object
// id; a renamed object leaves its old name. s.mu held.
func (s *Scheduler) holdLocked(hv *hostView, ns, path string, id uint64) {
	r := s.names.hold(hv.idx, ns, path, id)
	if old, ok := hv.byID[id]; ok && old != r {
		if slot, live := s.names.resolve(old); live {
			s.names.unhold(hv.idx, slot)
		}
	}
	hv.byID[id] = r
}

// parentDir returns "a/b" for "a/b/c", "" for "c".
func parentDir(p string) string {
	if i := strings.LastIndexByte(p, '/'); i > 0 {
		return p[:i]
	}
	return ""
}

// shareRetryAfter is how long after a failed share a name is not asked
// for again.
const shareRetryAfter = 2 * time.Second

// maxSharePerWant bounds the share commands one wanted directory causes.
const maxSharePerWant = 256

// wantedLocked handles host's failed lookup of k: when another host holds
// k privately, that host is told to share it (G3.5), so the wanting host
// (and every later one) reads it from the pool instead of recomputing.
func (s *Scheduler) wantedLocked(host string, k objKey) []*msg.Command {
	s.stats.Wanted++
	if _, isFile := s.names.lookup(k.ns, k.path); !isFile {
		// A directory (a session) this host does not have: share the
		// files under it that other hosts hold.
		var out []*msg.Command
		for f := range s.names.under(k.ns, k.path) {
			if len(out) >= maxSharePerWant {
				break
			}
			if c := s.wantFileLocked(host, f); c != nil {
				out = append(out, c)
			}
		}
		return out
	}
	if c := s.wantFileLocked(host, k); c != nil {
		return []*msg.Command{c}
	}
	return nil
}

// wantFileLocked returns the share command for file k wanted by host, or
// nil when it is shared already or no other host holds it. s.mu held.
func (s *Scheduler) wantFileLocked(host string, k objKey) *msg.Command {
	if _, done := s.shared[k]; done {
		return nil
	}
	if at, failed := s.shareFailAt[k]; failed && time.Since(at) < shareRetryAfter {
		return nil // the last share failed (pool full?): do not flood the holder
	}
	// Only a host that computed the file can share it: an importer's
	// copy is the pool record itself.
	slot, ok := s.names.lookup(k.ns, k.path)
	if !ok {
		return nil
	}
	var holders []string
	for h := range s.names.holders(slot) {
		if h != host && !s.importers[k][h] {
			holders = append(holders, h)
		}
	}
	if len(holders) == 0 {
		return nil
	}
	sort.Strings(holders)
	h := holders[0]
	hv := s.hosts[h]
	if hv == nil || hv.last == nil || hv.last.Pool == nil || hv.last.Pool.Bypass {
		return nil // the holder has no usable pool
	}
	id, _ := s.names.idOf(slot, h)
	round := s.staleRound[k]
	// A failed share (pool full, link down) may be asked again: the try
	// count makes it a new command id (ids are applied at most once).
	cid := msg.CommandID(msg.OpShare, h, hv.boot, id, round, s.shareTry[k])
	s.shareKey[cid] = k
	return &msg.Command{ID: cid, Host: h, Op: msg.OpShare,
		Namespace: k.ns, Path: k.path, Object: id, Boot: hv.boot, Force: round > 0, Reason: "wanted by " + host}
}

func (s *Scheduler) onAck(a *msg.Ack) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Acks[a.Status]++
	delete(s.sent, a.ID)
	if k, ok := s.shareKey[a.ID]; ok {
		delete(s.shareKey, a.ID)
		if a.Status != msg.AckOK && a.Status != msg.AckDuplicate {
			s.shareTry[k]++
			s.shareFailAt[k] = time.Now()
		}
	}
	if w := s.waits[a.ID]; w != nil {
		select {
		case w <- *a:
		default:
		}
	}
}

// Holders returns the hosts known to hold (ns, path) and their object ids
// (the global view; empty when unknown).
func (s *Scheduler) Holders(ns, path string) map[string]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]uint64{}
	if slot, ok := s.names.lookup(ns, path); ok {
		for h, id := range s.names.holders(slot) {
			out[h] = id
		}
	}
	return out
}
