// Package sidecar is the per-host agent of ctxmemd's control loop
// (DESIGN "Control loop"): it reports block heat, tier occupancy and object
// events to the schedulers over NATS, keeps the host's liveness record, and
// carries out the schedulers' commands (sink, demote, promote, prestage,
// pin, drop namespace, policy knobs) on the tiering core. The scheduler
// itself is package sidecar/scheduler; subjects and schemas are package
// sidecar/msg.
//
// The agent never touches the data path: object heat is the core's
// (tiering.Store.ObjectRanking), object changes reach it as the core's
// events (tiering.Store.Subscribe) and the sharing component's notes
// (sharing.Sharer.Notes), and everything it sends is queued in a bounded
// outbox that survives a NATS outage (oldest dropped first when full).
package sidecar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ctxmem/ctxmemd/heat"
	"github.com/ctxmem/ctxmemd/sharing"
	"github.com/ctxmem/ctxmemd/sidecar/bus"
	"github.com/ctxmem/ctxmemd/sidecar/msg"
	"github.com/ctxmem/ctxmemd/tiering"
)

// Files is what the agent needs from the catalog (implemented by
// *catalog.Names): naming objects by namespace and path, and dropping a
// namespace.
type Files interface {
	// Path returns the namespace and path of the file whose object is id.
	Path(id tiering.ObjectID) (ns, path string, ok bool)
	// Lookup returns the object of the regular file path in namespace ns;
	// errors wrap fs.ErrNotExist or fs.ErrInvalid.
	Lookup(ns, path string) (tiering.ObjectID, error)
	// DropNamespace removes every file of ns; errors wrap fs.ErrNotExist
	// for an unknown namespace.
	DropNamespace(ctx context.Context, ns string) (int, error)
}

// Config configures an Agent. Zero fields take the defaults given.
type Config struct {
	// Host names this host on the bus (a msg.ValidToken).
	Host string
	// Names are the cluster's subjects and buckets.
	Names msg.Names
	// Interval between reports and liveness updates (default 1 s).
	Interval time.Duration
	// HotN and ColdN are the report's list lengths (defaults 64 and 256).
	HotN, ColdN int
	// BufferBytes bounds telemetry queued while NATS is unreachable
	// (default 8 MiB; oldest dropped first).
	BufferBytes int
	// Workers run commands concurrently (default 2).
	Workers int
	// Version and Mount are shown in the liveness record.
	Version, Mount string
	// Namespaces are the served namespaces (reported).
	Namespaces []string
	// Sharing is the host's sharing through the shared pool (G3.5), or
	// nil: the agent carries out share and reclaim_extent commands on it
	// and reports its notes.
	Sharing *sharing.Sharer
	// Log receives the agent's logs (default slog.Default()).
	Log *slog.Logger
}

// Agent is one host's sidecar. Create it with New (it subscribes to the
// store's events) and Run it.
type Agent struct {
	cfg   Config
	log   *slog.Logger
	store *tiering.Store
	files Files
	rank  *heat.Ranking[tiering.ObjectID] // the store's (ObjectRanking)
	subs  *tiering.Events                 // the store's object events
	boot  int64
	out   *outbox

	evMu    sync.Mutex
	pending []pendingEvent // stored/removed events not yet published
	// named are events that carry their name already: wanted (looked up
	// here, found nowhere) and stale (a shared file's pool record).
	named  []msg.Event
	evDrop int64

	seenMu sync.Mutex
	seen   map[string]struct{} // command ids applied by this process
	seenQ  []string

	seq atomic.Uint64
	// reportMu serializes BuildReport (the report loop's and any other
	// caller's, such as a test or benchmark): it guards last.
	reportMu sync.Mutex
	last     tiering.Stats // previous report's counters
	c        counters
	resyncMu sync.Mutex
	// applied is the applied-commands bucket once the bus is set up.
	applied    atomic.Pointer[jetstream.KeyValue]
	needResync atomic.Bool
	// eventsDue asks Run to publish pending events before the next report
	// (a wanted name: the sooner the scheduler hears, the sooner a holder
	// shares it).
	eventsDue  atomic.Bool
	lastWanted atomic.Int64 // unix ns of the last early publish of wanted names
	dupWarned  atomic.Int64 // unix ns of the last duplicate-host warning
	flushNow   chan struct{}
}

type pendingEvent struct {
	kind  string
	id    tiering.ObjectID
	tries int // intervals its path was not known yet
}

// nameTries is how many intervals a stored event waits for its file name
// (the store creates the object just before the mount links the name).
const nameTries = 3

type counters struct {
	published, events, liveness      atomic.Int64
	applied, duplicates, failed      atomic.Int64
	malformed, publishErr, connected atomic.Int64
	dupHost                          atomic.Int64
}

// maxPendingEvents bounds queued object events (oldest dropped first).
const maxPendingEvents = 200_000

// New creates an agent for store and files and subscribes it to the
// store's events. Errors: a bad host name or configuration, a store
// opened without tiering.Config.RankObjects.
func New(cfg Config, store *tiering.Store, files Files) (*Agent, error) {
	if err := msg.ValidToken(cfg.Host); err != nil {
		return nil, fmt.Errorf("sidecar host name: %w", err)
	}
	if err := msg.ValidToken(cfg.Names.Cluster); err != nil {
		return nil, fmt.Errorf("sidecar cluster name: %w", err)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.HotN <= 0 {
		cfg.HotN = 64
	}
	if cfg.ColdN <= 0 {
		cfg.ColdN = 256
	}
	if cfg.BufferBytes <= 0 {
		cfg.BufferBytes = 8 << 20
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 2
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	rank := store.ObjectRanking()
	if rank == nil {
		return nil, errors.New("sidecar: the store keeps no object ranking (tiering.Config.RankObjects)")
	}
	a := &Agent{cfg: cfg, log: cfg.Log.With("component", "sidecar"), store: store, files: files, rank: rank,
		subs: store.Subscribe(0), boot: time.Now().UnixNano(), out: newOutbox(cfg.BufferBytes),
		seen: make(map[string]struct{}), flushNow: make(chan struct{}, 1)}
	return a, nil
}

// onStoreEvent turns a store event into the bus event the scheduler
// hears: a new KV file (cache class; device objects are not KV cache the
// cluster may share), a move between tiers, a removal.
func (a *Agent) onStoreEvent(ev tiering.Event) {
	switch ev.Kind {
	case tiering.EventCreated:
		if ev.Durability == tiering.DurabilityCache {
			a.queueEvent(msg.EvStored, ev.ID)
		}
	case tiering.EventMoved:
		a.queueEvent(msg.EvMoved, ev.ID)
	case tiering.EventRemoved, tiering.EventLost:
		a.queueEvent(msg.EvRemoved, ev.ID)
	}
}

// onNote turns a sharing note into a bus event. A wanted name is
// published at once instead of at the next report, at most every
// wantedEvery (every create of a new file is a missed lookup too): the
// sooner the scheduler hears, the sooner a holder shares it.
func (a *Agent) onNote(n sharing.Note) {
	switch n.Kind {
	case sharing.NoteImported:
		a.queueEvent(msg.EvImported, n.ID)
	case sharing.NoteShared:
		a.queueEvent(msg.EvShared, n.ID)
	case sharing.NoteStale, sharing.NoteWanted:
		kind := msg.EvStale
		if n.Kind == sharing.NoteWanted {
			kind = msg.EvWanted
		}
		a.evMu.Lock()
		if len(a.named) < maxPendingEvents {
			a.named = append(a.named, msg.Event{Kind: kind, Namespace: n.Namespace, Path: n.Path})
		}
		a.evMu.Unlock()
		if kind != msg.EvWanted {
			return
		}
		now := time.Now().UnixNano()
		if last := a.lastWanted.Load(); now-last >= int64(wantedEvery) && a.lastWanted.CompareAndSwap(last, now) {
			a.eventsDue.Store(true)
			a.kick()
		}
	}
}

// wantedEvery bounds how often missed lookups are published ahead of the
// next report.
const wantedEvery = 20 * time.Millisecond

// eventLoop reads the store's events and the sharer's notes until ctx
// ends. Owner: Run (its WaitGroup).
func (a *Agent) eventLoop(ctx context.Context) {
	var notes <-chan sharing.Note
	if a.cfg.Sharing != nil {
		notes = a.cfg.Sharing.Notes()
	}
	events := a.subs.C()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				events = nil // the store closed
				continue
			}
			a.onStoreEvent(ev)
		case n := <-notes:
			a.onNote(n)
		}
	}
}

func (a *Agent) queueEvent(kind string, id tiering.ObjectID) {
	a.evMu.Lock()
	if len(a.pending) >= maxPendingEvents {
		a.pending = a.pending[1:]
		a.evDrop++
	}
	a.pending = append(a.pending, pendingEvent{kind: kind, id: id})
	a.evMu.Unlock()
}

// Boot returns the agent's boot id (unix ns of its start): object ids in
// reports are valid within it.
func (a *Agent) Boot() int64 { return a.boot }

// Run reports, keeps liveness and takes commands until ctx ends. It
// (re)creates the cluster's JetStream resources and this host's command
// consumer whenever they are missing (a NATS server restarted without its
// store), and keeps going while NATS is down: telemetry waits in the
// outbox. It returns nil when ctx ends.
func (a *Agent) Run(ctx context.Context, nc *nats.Conn, lim bus.Limits) error {
	cmds := make(chan jetstream.Msg, 64)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer a.subs.Close()
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.eventLoop(ctx)
	}()
	for i := 0; i < a.cfg.Workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.worker(ctx, nc, cmds)
		}()
	}
	var res *bus.Resources
	var cc jetstream.ConsumeContext
	var ccReconnects uint64 // the connection's reconnect count when cc started
	consumeBroken := make(chan struct{}, 1)
	defer func() {
		if cc != nil {
			cc.Stop()
		}
	}()
	tick := time.NewTicker(a.cfg.Interval)
	defer tick.Stop()
	due := true
	for {
		if nc.IsConnected() {
			a.c.connected.Store(1)
			if res == nil {
				r, err := bus.Ensure(ctx, nc, a.cfg.Names, lim)
				if err != nil {
					a.log.Warn("control bus: cannot set up streams and buckets", "err", err)
				} else {
					res = r
				}
			}
			if cc != nil && nc.Stats().Reconnects != ccReconnects {
				// The connection was re-established (NATS restarted):
				// start a fresh pull loop rather than trust the old one
				// to have resumed.
				cc.Stop()
				cc = nil
			}
			if res != nil && cc == nil {
				c, err := a.consume(ctx, res, cmds, consumeBroken)
				if err != nil {
					a.log.Warn("control bus: cannot consume commands", "err", err)
					res = nil // re-ensure next round
				} else {
					cc = c
					ccReconnects = nc.Stats().Reconnects
				}
			}
		} else {
			a.c.connected.Store(0)
		}
		if res != nil {
			a.applied.Store(&res.Applied)
		}
		if a.needResync.Swap(false) {
			a.resync(ctx)
		}
		// While the bus is down, telemetry only queues: no publish or
		// liveness call waits out its timeout on a dead connection.
		live := res
		if !nc.IsConnected() {
			live = nil
		}
		if due {
			a.report(ctx, live)
		} else if live != nil {
			if a.eventsDue.Swap(false) {
				a.queueEvents(time.Now())
			}
			a.flush(ctx, live)
		}
		due = false
		select {
		case <-ctx.Done():
			return nil
		case <-consumeBroken:
			if cc != nil {
				cc.Stop()
				cc = nil
			}
			res = nil
		case <-a.flushNow:
		case <-tick.C:
			due = true
		}
	}
}

// consume starts taking this host's commands.
func (a *Agent) consume(ctx context.Context, res *bus.Resources, cmds chan<- jetstream.Msg, broken chan<- struct{}) (jetstream.ConsumeContext, error) {
	names := a.cfg.Names
	cons, err := res.JS.CreateOrUpdateConsumer(ctx, names.Commands(), jetstream.ConsumerConfig{
		Durable: names.HostConsumer(a.cfg.Host), FilterSubject: names.Command(a.cfg.Host),
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 2 * time.Minute, MaxDeliver: 5,
		MaxAckPending: 256, DeliverPolicy: jetstream.DeliverAllPolicy,
		Description: "commands for ctxmemd host " + a.cfg.Host,
	})
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", names.HostConsumer(a.cfg.Host), err)
	}
	return cons.Consume(func(m jetstream.Msg) {
		select {
		case cmds <- m:
		case <-ctx.Done():
		}
	}, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) ||
			errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrNoHeartbeat) {
			a.log.Warn("control bus: command consumer lost; recreating", "err", err)
			select {
			case broken <- struct{}{}:
			default:
			}
		}
	}))
}

// Stats are the agent's counters for status.
type Stats struct {
	Host            string `json:"host"`
	Connected       bool   `json:"connected"`
	Published       int64  `json:"published_messages"`
	Events          int64  `json:"events"`
	Applied         int64  `json:"commands_applied"`
	Duplicates      int64  `json:"commands_duplicate"`
	Failed          int64  `json:"commands_failed"`
	Malformed       int64  `json:"messages_malformed"`
	Queued          int    `json:"queued_messages"`
	QueuedBytes     int    `json:"queued_bytes"`
	DroppedMessages int64  `json:"dropped_messages"`
	DroppedEvents   int64  `json:"dropped_events"`
	// DroppedStoreEvents counts the store's object events dropped before
	// the agent read them (tiering.Events.Dropped).
	DroppedStoreEvents int64 `json:"dropped_store_events,omitempty"`
	// DroppedPoolEvents counts G3.5 tier events (deleted own blocks,
	// stale records) dropped before they were read
	// (g35.Tier.DroppedEvents), and sharing notes dropped
	// (sharing.Stats.DroppedNotes).
	DroppedPoolEvents int64 `json:"dropped_pool_events,omitempty"`
	// EagerShared counts files shared to the pool eagerly (pool_share: eager),
	// EagerSkipped stored files not shared (pool above its high mark, an
	// import, an error), EagerDropped stored files dropped from a full
	// queue.
	EagerShared  int64 `json:"eager_shared,omitempty"`
	EagerSkipped int64 `json:"eager_skipped,omitempty"`
	EagerDropped int64 `json:"eager_dropped,omitempty"`
	// EagerWaitMs and EagerShareMs are the mean time, over the files
	// shared eagerly, from write-back done to the start of the share (the
	// queue) and of the share itself (sharing.Stats), in ms.
	EagerWaitMs    float64 `json:"eager_wait_ms,omitempty"`
	EagerShareMs   float64 `json:"eager_share_ms,omitempty"`
	TrackedObjects int     `json:"tracked_objects"`
	// PoolShares counts files this host published to the pool, and
	// PoolSharedBytes the bytes of blocks it put there for them
	// (sharing.Stats): with the other hosts' G3.5 hits, what pool writes
	// a hit costs.
	PoolShares      int64 `json:"pool_shares,omitempty"`
	PoolSharedBytes int64 `json:"pool_shared_bytes,omitempty"`
	// DuplicateHost counts reports that found this host name's liveness
	// record written by another daemon.
	DuplicateHost int64 `json:"duplicate_host"`
}

// Stats returns a snapshot of the agent's counters.
func (a *Agent) Stats() Stats {
	q, qb, dropped := a.out.stats()
	a.evMu.Lock()
	evDrop := a.evDrop
	a.evMu.Unlock()
	st := Stats{Host: a.cfg.Host, Connected: a.c.connected.Load() == 1, Published: a.c.published.Load(),
		Events: a.c.events.Load(), Applied: a.c.applied.Load(), Duplicates: a.c.duplicates.Load(),
		Failed: a.c.failed.Load(), Malformed: a.c.malformed.Load(), Queued: q, QueuedBytes: qb,
		DroppedMessages: dropped, DroppedEvents: evDrop, TrackedObjects: a.rank.Len(),
		DuplicateHost: a.c.dupHost.Load(), DroppedStoreEvents: a.subs.Dropped()}
	if sh := a.cfg.Sharing; sh != nil {
		ss := sh.Stats()
		st.DroppedPoolEvents = sh.Tier().DroppedEvents() + ss.DroppedNotes
		st.EagerShared, st.EagerSkipped, st.EagerDropped = ss.EagerShared, ss.EagerSkipped, ss.EagerDropped
		if n := ss.EagerShared; n > 0 {
			st.EagerWaitMs = float64(ss.EagerWaitNs) / float64(n) / 1e6
			st.EagerShareMs = float64(ss.EagerShareNs) / float64(n) / 1e6
		}
		st.PoolShares, st.PoolSharedBytes = ss.Shares, ss.SharedBytes
	}
	return st
}

// replicaName is the OS host name and pid, for liveness and issuer fields.
func replicaName() string {
	h, _ := os.Hostname()
	return h + ":" + strconv.Itoa(os.Getpid())
}
