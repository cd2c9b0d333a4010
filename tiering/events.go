package tiering

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctxmem/ctxmemd/heat"
)

// EventKind names what happened to an object (Event.Kind).
type EventKind uint8

const (
	// EventCreated: a new object (CreateWith, Import).
	EventCreated EventKind = iota + 1
	// EventStored: the object is sealed (its last writer closed it,
	// Expedite) and every block written before is stored below G2 (none
	// dirty): what eager sharing waits for.
	EventStored
	// EventMoved: Sink, Demote or Prestage moved the object's blocks
	// between tiers.
	EventMoved
	// EventRemoved: the object was deleted (Delete, or evicted whole from
	// a store without lower tiers).
	EventRemoved
	// EventLost: a block of the object was gone from every tier, so the
	// object was dropped whole.
	EventLost
)

func (k EventKind) String() string {
	switch k {
	case EventCreated:
		return "created"
	case EventStored:
		return "stored"
	case EventMoved:
		return "moved"
	case EventRemoved:
		return "removed"
	case EventLost:
		return "lost"
	}
	return "unknown"
}

// Event is one object-level change, delivered to subscribers (Subscribe).
type Event struct {
	Kind EventKind
	ID   ObjectID
	// Namespace, Label and Durability are the object's, as given at
	// create.
	Namespace  string
	Label      string
	Durability Durability
}

// Events is one subscription to the store's object events (Subscribe).
// Delivery never blocks the store: when the subscriber falls behind by
// more than its buffer, events are dropped and counted (Dropped).
type Events struct {
	s       *Store
	ch      chan Event
	dropped atomic.Int64
	once    sync.Once
}

// DefaultEventBuffer is the buffer Subscribe gives when asked for 0.
const DefaultEventBuffer = 16384

// Subscribe returns a new subscription to object events from now on
// (objects that exist already are not replayed: list them with Objects),
// buffering up to buffer events (0: DefaultEventBuffer). The channel is
// closed by Close, or when the store closes. Safe for concurrent use.
func (s *Store) Subscribe(buffer int) *Events {
	if buffer <= 0 {
		buffer = DefaultEventBuffer
	}
	e := &Events{s: s, ch: make(chan Event, buffer)}
	s.subMu.Lock()
	defer s.subMu.Unlock()
	if s.subsClosed {
		close(e.ch)
		return e
	}
	s.subs = append(s.subs, e)
	return e
}

// C returns the channel events arrive on.
func (e *Events) C() <-chan Event { return e.ch }

// Dropped returns how many events were dropped because the buffer was
// full.
func (e *Events) Dropped() int64 { return e.dropped.Load() }

// Close ends the subscription and closes its channel.
func (e *Events) Close() {
	s := e.s
	s.subMu.Lock()
	defer s.subMu.Unlock()
	for i, x := range s.subs {
		if x == e {
			s.subs = append(s.subs[:i:i], s.subs[i+1:]...)
			break
		}
	}
	e.once.Do(func() { close(e.ch) })
}

// closeEvents closes every subscription (Store.Close).
func (s *Store) closeEvents() {
	s.subMu.Lock()
	defer s.subMu.Unlock()
	s.subsClosed = true
	for _, e := range s.subs {
		e.once.Do(func() { close(e.ch) })
	}
	s.subs = nil
}

// emit delivers an event about o to every subscriber without blocking; it
// may be called with o.mu held. The read lock is held across the sends so
// that no send meets a channel Close has closed (Close takes the write
// lock); emits run concurrently with each other.
func (s *Store) emit(kind EventKind, o *object) {
	s.subMu.RLock()
	defer s.subMu.RUnlock()
	if len(s.subs) == 0 {
		return
	}
	ev := Event{Kind: kind, ID: o.id, Namespace: o.ns, Label: o.kind, Durability: o.dur}
	for _, e := range s.subs {
		select {
		case e.ch <- ev:
		default:
			e.dropped.Add(1)
		}
	}
}

// ObjectRanking returns the store's ranking of objects by heat (decayed
// access count, Config.RankObjects), or nil when the store keeps none.
// Every ReadAt and WriteAt call, passthrough open and create touches it;
// a removed or lost object leaves it. The control plane reports the
// hottest and coldest objects from it and may Touch or Park entries.
func (s *Store) ObjectRanking() *heat.Ranking[ObjectID] { return s.rank }

// touched records an access to id in the object ranking.
func (s *Store) touched(id ObjectID) {
	if s.rank != nil {
		s.rank.Touch(id, s.clk.Now())
	}
}

func (s *Store) now() time.Time { return s.clk.Now() }

// noteStoredLocked emits EventStored when o is sealed and clean. o.mu
// held for writing.
func (s *Store) noteStoredLocked(o *object) {
	if o.sealed && o.dirty == 0 && !o.deleted {
		s.emit(EventStored, o)
	}
}

// forgetRanked drops id from the object ranking.
func (s *Store) forgetRanked(id ObjectID) {
	if s.rank != nil {
		s.rank.Remove(id)
	}
}
