package tiering

import "time"

// Observer receives object-level notifications from the store: the
// sidecar uses them for its heat ranking and its stored/removed events.
// Calls are made synchronously on the data path (Accessed on every ReadAt
// and WriteAt call), so implementations must be cheap and must not call
// back into the Store.
type Observer interface {
	// Created: a new object (CreateWith, Import). ns is its namespace,
	// kind its label, d its durability class.
	Created(id ObjectID, ns, kind string, d Durability)
	// Accessed: one ReadAt or WriteAt call on the object at now.
	Accessed(id ObjectID, now time.Time)
	// Removed: the object was deleted or lost.
	Removed(id ObjectID)
	// Stored: the object is sealed (its last writer closed it, Expedite)
	// and every block written before is stored below G2 (none dirty). It
	// is called with the object's lock held: enqueue, never block.
	Stored(id ObjectID)
}

// SetObserver registers o (nil to stop). Objects that exist already are
// not replayed: list them with Objects.
func (s *Store) SetObserver(o Observer) {
	if o == nil {
		s.obs.Store(nil)
		return
	}
	s.obs.Store(&o)
}

func (s *Store) observer() Observer {
	if p := s.obs.Load(); p != nil {
		return *p
	}
	return nil
}

func (s *Store) now() time.Time { return time.Now() }

// noteStoredLocked tells the observer that o is sealed and clean (see
// Observer.Stored). o.mu held for writing.
func (s *Store) noteStoredLocked(o *object) {
	if o.sealed && o.dirty == 0 && !o.deleted {
		if ob := s.observer(); ob != nil {
			ob.Stored(o.id)
		}
	}
}
