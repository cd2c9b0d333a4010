package kvevents

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/ctxmem/ctxmemd/tiering"
)

// Names resolves objects to files (in the daemon: the catalog's name
// service for Path, the FUSE mount for Writing).
type Names interface {
	// Path is the namespace and the path inside it of the file whose
	// object is id; ok is false when it has no name.
	Path(id tiering.ObjectID) (ns, path string, ok bool)
	// Writing reports whether the file is open for writing.
	Writing(id tiering.ObjectID) bool
}

// Tiers tells where objects live (satisfied by *tiering.Store).
type Tiers interface {
	// ServingTier names the slowest tier a whole read of the object
	// needs ("G2", "G3", "G3.5", "G4").
	ServingTier(id tiering.ObjectID) (string, error)
	// Objects lists every live object.
	Objects() []tiering.ObjectInfo
}

// Sink receives batches (satisfied by *Publisher).
type Sink interface {
	Publish(events []Event) (uint64, error)
}

// Tracker defaults.
const (
	DefaultInterval     = 250 * time.Millisecond
	DefaultSweepPerTick = 2048
	DefaultMaxBatch     = 1024
)

// TrackerOptions configure a Tracker.
type TrackerOptions struct {
	Sink  Sink
	Names Names
	Tiers Tiers
	// Layouts maps a namespace to the HashFunc of its file names;
	// namespaces without one publish nothing.
	Layouts map[string]HashFunc
	// Kind is the ObjectInfo.Kind of the files to walk at start
	// (fusefs.ObjectKind); other objects are never published.
	Kind string
	// Interval is the sweep period (0 = DefaultInterval).
	Interval time.Duration
	// SweepPerTick is how many published files each sweep re-checks for
	// a tier change (0 = DefaultSweepPerTick).
	SweepPerTick int
	// MaxBatch is the most events per batch (0 = DefaultMaxBatch).
	MaxBatch int
	Logger   *slog.Logger
}

// Tracker turns file changes into events. The medium of a file is its
// serving tier (the slowest tier a whole read of it needs: where a router
// should expect to load it from); a file is published while it has a name
// that its namespace's layout parses, is not open for writing, and
// exists in the store. Changes of names and completeness arrive as hints
// (Changed); tier moves are found by a sweep that re-checks
// SweepPerTick published files every Interval, so a move is announced at
// most ceil(files/SweepPerTick) × Interval after it happened.
//
// Several files with the same hash in the same medium (two namespaces,
// NIXL's _k and _v files) are counted: the hash is stored when the first
// appears there and removed when the last leaves.
type Tracker struct {
	o   TrackerOptions
	log *slog.Logger

	mu      sync.Mutex
	pending map[tiering.ObjectID]struct{}
	wake    chan struct{}

	// Owned by Run.
	pub    map[tiering.ObjectID]entry
	counts map[entry]uint32
	sweep  []tiering.ObjectID
	events []Event
}

// entry is a published (hash, medium); medium 0 means not published.
type entry struct {
	hash   uint64
	medium uint8
}

var media = []string{"", tiering.TierG2, tiering.TierG3, tiering.TierG35, tiering.TierG4}

func mediumOf(name string) uint8 {
	for i := 1; i < len(media); i++ {
		if media[i] == name {
			return uint8(i)
		}
	}
	return 0
}

// NewTracker returns a tracker; Run starts it.
func NewTracker(o TrackerOptions) *Tracker {
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.SweepPerTick <= 0 {
		o.SweepPerTick = DefaultSweepPerTick
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = DefaultMaxBatch
	}
	t := &Tracker{o: o, log: o.Logger, pending: map[tiering.ObjectID]struct{}{}, wake: make(chan struct{}, 1),
		pub: map[tiering.ObjectID]entry{}, counts: map[entry]uint32{}}
	if t.log == nil {
		t.log = slog.Default()
	}
	return t
}

// Changed is the hint that file id may have changed (fusefs
// Options.OnChange). It never blocks.
func (t *Tracker) Changed(id tiering.ObjectID) {
	t.mu.Lock()
	t.pending[id] = struct{}{}
	t.mu.Unlock()
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// Run publishes AllBlocksCleared, then a BlockStored for every file the
// mount holds, then changes, until ctx ends.
func (t *Tracker) Run(ctx context.Context) error {
	t.events = append(t.events, Event{Kind: AllBlocksCleared})
	t.flush()
	// The walk: every file is a pending hint.
	objs := t.o.Tiers.Objects()
	t.mu.Lock()
	for _, o := range objs {
		if o.Kind == t.o.Kind && t.o.Layouts[o.Namespace] != nil {
			t.pending[o.ID] = struct{}{}
		}
	}
	t.mu.Unlock()
	tick := time.NewTicker(t.o.Interval)
	defer tick.Stop()
	for {
		t.drain()
		select {
		case <-ctx.Done():
			return nil
		case <-t.wake:
			// Let a burst of hints gather into one batch.
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(5 * time.Millisecond):
			}
		case <-tick.C:
			t.sweepTick()
		}
	}
}

// drain reconciles pending hints, MaxBatch at a time.
func (t *Tracker) drain() {
	for {
		t.mu.Lock()
		ids := make([]tiering.ObjectID, 0, min(len(t.pending), t.o.MaxBatch))
		for id := range t.pending {
			if len(ids) == t.o.MaxBatch {
				break
			}
			ids = append(ids, id)
			delete(t.pending, id)
		}
		t.mu.Unlock()
		if len(ids) == 0 {
			return
		}
		for _, id := range ids {
			t.apply(id, t.want(id))
		}
		t.flush()
	}
}

// want is what file id should be published as now.
func (t *Tracker) want(id tiering.ObjectID) entry {
	ns, rel, ok := t.o.Names.Path(id)
	if !ok || t.o.Names.Writing(id) {
		return entry{}
	}
	f := t.o.Layouts[ns]
	if f == nil {
		return entry{}
	}
	h, ok := f(rel)
	if !ok {
		return entry{}
	}
	tier, err := t.o.Tiers.ServingTier(id)
	if err != nil {
		return entry{}
	}
	return entry{h, mediumOf(tier)}
}

// sweepTick re-checks the medium of the next SweepPerTick published files.
func (t *Tracker) sweepTick() {
	if len(t.sweep) == 0 {
		for id := range t.pub {
			t.sweep = append(t.sweep, id)
		}
	}
	n := min(len(t.sweep), t.o.SweepPerTick)
	for _, id := range t.sweep[:n] {
		old, ok := t.pub[id]
		if !ok {
			continue
		}
		tier, err := t.o.Tiers.ServingTier(id)
		want := entry{}
		if err == nil {
			want = entry{old.hash, mediumOf(tier)}
		}
		if want.medium == 0 {
			want = entry{}
		}
		t.apply(id, want)
		if len(t.events) >= t.o.MaxBatch {
			t.flush()
		}
	}
	t.sweep = t.sweep[n:]
	t.flush()
}

// apply moves file id from its published state to want, queueing the
// events: removal from the old medium first, then the store.
func (t *Tracker) apply(id tiering.ObjectID, want entry) {
	if want.medium == 0 {
		want = entry{}
	}
	old := t.pub[id]
	if old == want {
		return
	}
	if old.medium != 0 {
		if t.counts[old]--; t.counts[old] == 0 {
			delete(t.counts, old)
			t.events = append(t.events, Event{Kind: BlockRemoved, Hashes: []uint64{old.hash}, Medium: media[old.medium]})
		}
	}
	if want.medium != 0 {
		if t.counts[want]++; t.counts[want] == 1 {
			t.events = append(t.events, Event{Kind: BlockStored, Hashes: []uint64{want.hash}, Medium: media[want.medium]})
		}
		t.pub[id] = want
	} else {
		delete(t.pub, id)
	}
}

// flush publishes the queued events (MaxBatch per batch).
func (t *Tracker) flush() {
	for len(t.events) > 0 {
		n := min(len(t.events), t.o.MaxBatch)
		if _, err := t.o.Sink.Publish(t.events[:n]); err != nil {
			t.log.Warn("kvevents: publish", "err", err)
		}
		t.events = t.events[n:]
	}
	t.events = t.events[:0:0]
}
