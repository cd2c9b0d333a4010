// Package scheduler is ctxmemd's central KV block manager (DESIGN "Control
// loop"): it reads the hosts' heat reports and events from JetStream,
// decides placement across hosts, and sends commands back. Any number of
// replicas may run; they are stateless: leadership is a key in a
// JetStream key-value bucket (created by compare-and-set, renewed by
// compare-and-set, lost when its TTL passes), only the leader acts, the
// leader reads telemetry through one durable consumer shared by all
// replicas (a new leader continues where the old one stopped) and rebuilds
// its view of which host holds which object by asking every live host for
// a resync. Commands carry deterministic ids and are published with that
// id as JetStream message id, so a decision taken twice (by two replicas
// around a leadership change) is delivered once, and hosts apply an id at
// most once.
package scheduler

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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

	"github.com/ctxmem/ctxmemd/sidecar/bus"
	"github.com/ctxmem/ctxmemd/sidecar/msg"
)

// Config configures a Scheduler. Zero fields take the defaults given.
type Config struct {
	// Names are the cluster's subjects and buckets.
	Names msg.Names
	// ID names this replica (default "<hostname>-<pid>-<random>").
	ID string
	// ColdThreshold: objects whose heat score is below it (default 30)
	// and idle for Grace (default 5 min) are sunk to G4.
	ColdThreshold float64
	Grace         time.Duration
	// PressureMargin: when a host's G2 (or G3) usage passes (high
	// watermark − PressureMargin) × capacity, the scheduler demotes (or
	// sinks) the host's coldest objects before its own watermark evictor
	// has to (default 0.05).
	PressureMargin float64
	// MaxCommandsPerReport bounds the commands one report triggers
	// (default 64).
	MaxCommandsPerReport int
	// PoolHigh and PoolLow are the shared pool's watermarks, fractions of
	// its extents (defaults 0.90 and 0.75): above PoolHigh leased, the
	// least recently used extents are reclaimed down to PoolLow.
	PoolHigh, PoolLow float64
	// Limits size the JetStream resources (see bus.Limits).
	Limits bus.Limits
	// Log receives the scheduler's logs (default slog.Default()).
	Log *slog.Logger
}

func (c *Config) fill() error {
	if err := msg.ValidToken(c.Names.Cluster); err != nil {
		return fmt.Errorf("scheduler cluster name: %w", err)
	}
	if c.ID == "" {
		h, _ := os.Hostname()
		var b [3]byte
		_, _ = rand.Read(b[:])
		c.ID = fmt.Sprintf("%s-%d-%s", h, os.Getpid(), hex.EncodeToString(b[:]))
	}
	if c.ColdThreshold == 0 {
		c.ColdThreshold = 30
	}
	if c.ColdThreshold < 0 || c.ColdThreshold > 100 {
		return fmt.Errorf("scheduler cold threshold %v: want 0-100", c.ColdThreshold)
	}
	if c.Grace == 0 {
		c.Grace = 5 * time.Minute
	}
	if c.PressureMargin == 0 {
		c.PressureMargin = 0.05
	}
	if c.MaxCommandsPerReport == 0 {
		c.MaxCommandsPerReport = 64
	}
	if c.PoolHigh == 0 {
		c.PoolHigh = 0.90
	}
	if c.PoolLow == 0 {
		c.PoolLow = 0.75
	}
	if !(c.PoolLow > 0 && c.PoolLow < c.PoolHigh && c.PoolHigh <= 1) {
		return fmt.Errorf("scheduler pool watermarks %v/%v: want 0 < low < high <= 1", c.PoolLow, c.PoolHigh)
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return nil
}

// Scheduler is one replica. Create it with New and Run it.
type Scheduler struct {
	cfg Config
	log *slog.Logger

	leader atomic.Bool
	mu     sync.Mutex // guards the leader's state below
	hosts  map[string]*hostView
	names  *view                   // global view: (namespace, path) → hosts and their object ids
	sent   map[string]time.Time    // command id → when sent, until acked
	waits  map[string]chan msg.Ack // command id → waiter (requests)
	shared map[objKey]string       // names published to the pool → owner host
	// importers: hosts holding a name only as an import of the pool.
	importers map[objKey]map[string]bool
	// staleRound counts the times a name's pool records went stale (its
	// next share is forced, under a new command id).
	staleRound map[objKey]int
	// shareTry counts failed shares of a name; shareKey maps a pending
	// share command id to its name.
	shareTry    map[objKey]int
	shareKey    map[string]objKey
	shareFailAt map[objKey]time.Time
	res         *bus.Resources
	stats       Stats
}

type objKey struct{ ns, path string }

type hostView struct {
	idx    uint32 // the host's index in the view
	boot   int64
	last   *msg.Report
	seen   time.Time
	byID   map[uint64]nameRef // this boot's object ids → their names in the view
	synced bool               // a resync finished since this replica became leader
	// fairAnswered is the host's latest msg.Pool.StarvedAt that the
	// pool's fair-share rule answered (poolLocked).
	fairAnswered int64
}

// Stats are a replica's counters.
type Stats struct {
	ID           string           `json:"id"`
	Leader       bool             `json:"leader"`
	Reports      int64            `json:"reports"`
	Events       int64            `json:"events"`
	Acks         map[string]int64 `json:"acks"`
	Commands     map[string]int64 `json:"commands"` // sent, by op
	Malformed    int64            `json:"malformed"`
	Hosts        int              `json:"hosts"`
	ViewObjects  int              `json:"view_objects"`
	Leaderships  int64            `json:"leaderships"` // times this replica became leader
	PendingCmds  int              `json:"pending_commands"`
	PrestageReqs int64            `json:"prestage_requests"`
	Wanted       int64            `json:"wanted"`         // failed lookups reported by hosts
	Shared       int              `json:"shared_objects"` // names known to be in the pool
	PoolHeld     int              `json:"pool_extents_held"`
	PoolExtents  int              `json:"pool_extents"`
}

// New validates cfg and returns a replica.
func New(cfg Config) (*Scheduler, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	return &Scheduler{cfg: cfg, log: cfg.Log.With("component", "scheduler", "replica", cfg.ID),
		stats: Stats{ID: cfg.ID, Acks: map[string]int64{}, Commands: map[string]int64{}}}, nil
}

// ID returns the replica id.
func (s *Scheduler) ID() string { return s.cfg.ID }

// IsLeader reports whether this replica currently acts.
func (s *Scheduler) IsLeader() bool { return s.leader.Load() }

// Stats returns a snapshot of the counters.
func (s *Scheduler) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Leader = s.leader.Load()
	st.Acks = cloneMap(s.stats.Acks)
	st.Commands = cloneMap(s.stats.Commands)
	st.Hosts = len(s.hosts)
	st.ViewObjects = s.names.len()
	st.PendingCmds = len(s.sent)
	st.Shared = len(s.shared)
	st.PoolHeld, st.PoolExtents, _ = s.poolUseLocked()
	return st
}

func cloneMap(m map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Run takes part in leader election and, while leader, acts, until ctx
// ends (then it releases leadership if it holds it). NATS outages are
// waited out. It returns nil when ctx ends.
func (s *Scheduler) Run(ctx context.Context, nc *nats.Conn) error {
	ttl := s.cfg.Limits.LeaderTTL
	if ttl == 0 {
		ttl = 5 * time.Second
	}
	period := max(ttl/3, 300*time.Millisecond)
	var res *bus.Resources
	var rev uint64
	var act *acting
	var actReconnects uint64
	stop := func() {
		if act != nil {
			act.stop()
			act = nil
		}
		if s.leader.Swap(false) {
			s.log.Info("scheduler: leadership lost")
		}
	}
	defer func() {
		stop()
		if res != nil && rev != 0 {
			cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = res.Scheduler.Delete(cctx, msg.LeaderKey, jetstream.LastRevision(rev))
			cancel()
		}
	}()
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		if res == nil && nc.IsConnected() {
			r, err := bus.Ensure(ctx, nc, s.cfg.Names, s.cfg.Limits)
			if err != nil {
				s.log.Warn("scheduler: cannot set up streams and buckets", "err", err)
			} else {
				res = r
				s.mu.Lock()
				s.res = r
				s.mu.Unlock()
			}
		}
		if res != nil {
			rec, _ := msg.Encode(&msg.Leader{V: msg.Version, ID: s.cfg.ID, Since: time.Now().UnixNano(), Host: hostPid()})
			cctx, cancel := context.WithTimeout(ctx, period)
			_, _ = res.Scheduler.Put(cctx, msg.ReplicaKey(s.cfg.ID), rec)
			if rev == 0 {
				r, err := res.Scheduler.Create(cctx, msg.LeaderKey, rec)
				if err == nil {
					rev = r
					s.leader.Store(true)
					s.mu.Lock()
					s.stats.Leaderships++
					s.mu.Unlock()
					s.log.Info("scheduler: leadership acquired")
					a, err := s.startActing(ctx, res, nc)
					if err != nil {
						s.log.Warn("scheduler: cannot act as leader; releasing", "err", err)
						_ = res.Scheduler.Delete(cctx, msg.LeaderKey, jetstream.LastRevision(rev))
						rev = 0
						stop()
					} else {
						act = a
						actReconnects = nc.Stats().Reconnects
					}
				} else if errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrBucketNotFound) {
					res = nil
				}
			} else {
				cur, _ := msg.Encode(&msg.Leader{V: msg.Version, ID: s.cfg.ID, Since: time.Now().UnixNano(), Host: hostPid()})
				r, err := res.Scheduler.Update(cctx, msg.LeaderKey, cur, rev)
				switch {
				case err == nil:
					rev = r
				case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyNotFound),
					errors.Is(err, jetstream.ErrBucketNotFound), errors.Is(err, jetstream.ErrStreamNotFound):
					// Someone else holds it, or the key (or the whole
					// store) is gone: stop acting and compete again.
					rev = 0
					stop()
					if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
						res = nil
					}
				default:
					// NATS unreachable: keep acting until the TTL would
					// have passed, then stand down.
					if act != nil && time.Since(act.renewed) > ttl {
						rev = 0
						stop()
					}
				}
				if err == nil && act != nil {
					act.renewed = time.Now()
					if nc.Stats().Reconnects != actReconnects {
						// NATS came back: restart the telemetry consumer and
						// the request subscriptions, and rebuild the view.
						act.stop()
						act = nil
						if a, err := s.startActing(ctx, res, nc); err != nil {
							s.log.Warn("scheduler: cannot act again after a reconnect; releasing", "err", err)
							_ = res.Scheduler.Delete(cctx, msg.LeaderKey, jetstream.LastRevision(rev))
							rev = 0
							stop()
						} else {
							act = a
							actReconnects = nc.Stats().Reconnects
							s.log.Info("scheduler: resumed after a reconnect")
						}
					}
				}
			}
			cancel()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func hostPid() string {
	h, _ := os.Hostname()
	return h + ":" + strconv.Itoa(os.Getpid())
}
