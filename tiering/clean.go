package tiering

import (
	"time"
)

// cleanDelay is how long an object must stay without dirty blocks before
// its clean record is written. Streaming writers make an object go dirty →
// clean → dirty many times a second as write-back keeps up; recording each
// transition would put two metadata commits on every write. Flush and Close
// record clean at once.
const cleanDelay = 500 * time.Millisecond

type cleanItem struct {
	o  *object
	at time.Time
}

// scheduleClean queues o for a clean record once it has been idle for
// cleanDelay. o.mu held for writing.
func (s *Store) scheduleClean(o *object) {
	if !o.metaDirty || !o.clean() || o.deleted || s.volatile {
		return
	}
	s.cleanMu.Lock()
	s.cleanQueue = append(s.cleanQueue, cleanItem{o, s.clk.Now()})
	s.cleanMu.Unlock()
	s.cleanReady.broadcast()
}

// cleanLoop writes clean records for objects that stayed idle.
func (s *Store) cleanLoop() {
	defer s.wg.Done()
	tick := s.clk.NewTicker(cleanDelay / 4)
	defer tick.Stop()
	for {
		select {
		case <-tick.C():
		case <-s.ctx.Done():
			return
		}
		s.cleanMu.Lock()
		cut := s.clk.Now().Add(-cleanDelay)
		n := 0
		for n < len(s.cleanQueue) && s.cleanQueue[n].at.Before(cut) {
			n++
		}
		due := append([]cleanItem(nil), s.cleanQueue[:n]...)
		s.cleanQueue = append(s.cleanQueue[:0], s.cleanQueue[n:]...)
		s.cleanMu.Unlock()
		for len(due) > 0 {
			n := min(len(due), cleanBatchSize)
			s.cleanBatch(due[:n])
			due = due[n:]
		}
	}
}

// cleanBatchSize is how many clean records one metadata commit carries.
const cleanBatchSize = 256

// cleanBatch records the idle objects of items clean in one metadata
// commit. Each object stays locked until the commit is done, so none can be
// dirtied between its snapshot and its record (no two paths ever hold two
// object locks otherwise, so holding several here cannot deadlock).
func (s *Store) cleanBatch(items []cleanItem) {
	var locked []*object
	recs := make(map[ObjectID]*objectRecord, len(items))
	seen := make(map[*object]bool, len(items))
	for _, it := range items {
		o := it.o
		if seen[o] { // an object can be queued more than once
			continue
		}
		seen[o] = true
		o.mu.Lock()
		if o.deleted || !o.clean() || !o.metaDirty || o.awaitG4 {
			o.mu.Unlock()
			continue
		}
		locked = append(locked, o)
		recs[o.id] = o.record(stateClean)
	}
	if len(locked) == 0 {
		return
	}
	err := s.meta.putMany(recs)
	for _, o := range locked {
		if err == nil {
			o.metaDirty, o.persisted = false, true
			s.signalFlushed(o)
		}
		o.mu.Unlock()
	}
	if err != nil {
		s.log.Error("persist clean objects", "objects", len(locked), "err", err)
	}
}

func (s *Store) cleanIfIdle(o *object) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.deleted || !o.clean() || !o.metaDirty || s.volatile || o.awaitG4 {
		return // an export waiting for G4 stays recorded dirty (g4recover.go)
	}
	if err := s.persistCleanLocked(o); err != nil {
		s.log.Error("persist clean object", "object", o.id, "err", err)
	}
}

// persistAllClean records every idle object clean (at Close, after the
// final write-back).
func (s *Store) persistAllClean() {
	s.cleanMu.Lock()
	s.cleanQueue = nil
	s.cleanMu.Unlock()
	s.mu.RLock()
	objs := make([]*object, 0, len(s.objects))
	for _, o := range s.objects {
		objs = append(objs, o)
	}
	s.mu.RUnlock()
	for _, o := range objs {
		s.cleanIfIdle(o)
	}
}
