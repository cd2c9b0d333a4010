package tiering

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// Starting without G4's listing.
//
// Recovery needs every tier's listing to tell a block that is merely in G4
// from a block that is gone. When G4 does not answer at Open (object store
// down), the store starts anyway and finishes G4's part of recovery in the
// background once G4 answers (recoverG4Loop):
//
//   - A clean object's written block that is not in G3 is assumed to be in
//     G4 (b.in holds G4, unverified): the object is kept, its record is kept,
//     and a read of such a block goes to G4, which fails with
//     tier.ErrUnavailable (EIO) while the store is down. Nothing is
//     declared lost on a listing that is missing.
//   - An NBD export recorded dirty (the daemon died) is rebuilt from G3 and
//     marked awaitG4: its holes may be blocks only G4 holds, so reading a
//     hole and every write, truncate or discard fail with ErrUnavailable
//     (EIO) until G4's blocks are merged in, and its record is not marked
//     clean meanwhile (a clean record would list only the G3 blocks).
//   - G4 garbage is not collected: without the listing it is unknown.
//
// When a Range of G4 succeeds, reconcileG4 applies what recovery would
// have decided, to the blocks that nothing has changed since: a listed
// block not in G3 gets G4 in b.in (G3 wins where both hold one, see recover); an
// assumed block that is
// not listed and has no other copy makes its object lost, as it would
// have been at Open; exports get their G4 blocks; then listed copies that
// no live block uses are queued for deletion (copyState re-checks each one
// against the live flags, so a block written meanwhile is never deleted).
type g4Recovery struct {
	// blocks are the blocks of clean objects recovered without G4's
	// listing, by key, with the blockState recovery made for each (a
	// block replaced, dropped or written since is left alone).
	blocks map[tier.Key]*blockState
	// exports are the dirty NBD exports recovered without G4 (awaitG4).
	exports []*object
}

// Backoff of the background listing of G4 (variables for tests).
var (
	g4RelistMin = time.Second
	g4RelistMax = 30 * time.Second
)

// errAwaitG4 is the error of operations on an export that waits for G4's
// listing.
var errAwaitG4 = fmt.Errorf("%w: export recovered without the G4 listing; waiting for the object store", tier.ErrUnavailable)

// g4Waiting reports whether G4's part of recovery is still pending.
func (s *Store) g4Waiting() bool {
	s.g4recMu.Lock()
	defer s.g4recMu.Unlock()
	return s.g4rec != nil
}

// G4Recovering reports whether the store started without G4's listing and
// has not yet recovered G4's blocks (status shows G4 degraded meanwhile).
func (s *Store) G4Recovering() bool { return s.g4Waiting() }

// startG4Recovery starts the background listing of G4 if Open could not
// list it.
func (s *Store) startG4Recovery() {
	if !s.g4Waiting() {
		return
	}
	s.wg.Add(1)
	go s.recoverG4Loop()
}

// recoverG4Loop lists G4 with backoff until a listing succeeds, then
// reconciles. It logs once per change of state, not per attempt. A Range
// cannot be cancelled (the tier bounds it), so it runs in a goroutine of
// its own that the loop stops waiting for when the store closes.
func (s *Store) recoverG4Loop() {
	defer s.wg.Done()
	wait := g4RelistMin
	state := "unavailable" // recover logged the first failure
	timer := time.NewTimer(wait)
	defer timer.Stop()
	attempts := 0
	for {
		select {
		case <-timer.C:
		case <-s.ctx.Done():
			return
		}
		type result struct {
			listed map[tier.Key]int64
			err    error
		}
		res := make(chan result, 1)
		go func() { // ends within the tier's list timeout; see above
			listed := make(map[tier.Key]int64)
			err := s.g4.Range(s.ctx, func(k tier.Key, n int64) bool { listed[k] = n; return true })
			res <- result{listed, err}
		}()
		var r result
		select {
		case r = <-res:
		case <-s.ctx.Done():
			return
		}
		attempts++
		if r.err == nil {
			s.reconcileG4(r.listed, attempts)
			return
		}
		now := "unavailable"
		if !errors.Is(r.err, tier.ErrUnavailable) {
			now = "failing"
		}
		if now != state {
			s.log.Warn("G4 listing still failing; retrying in the background", "state", now, "err", r.err)
			state = now
		}
		wait = min(2*wait, g4RelistMax)
		timer.Reset(wait)
	}
}

// reconcileG4 finishes recovery with G4's listing (see g4Recovery).
func (s *Store) reconcileG4(listed map[tier.Key]int64, attempts int) {
	s.g4recMu.Lock()
	rec := s.g4rec
	s.g4recMu.Unlock()
	if rec == nil {
		return
	}
	used := make(map[tier.Key]bool)
	lost := make(map[ObjectID]tier.Key)
	confirmed := 0
	for k, b := range rec.blocks {
		o := s.get(ObjectID(k.Object))
		if o == nil {
			continue
		}
		o.mu.Lock()
		if o.deleted || o.gen != k.Gen || o.ns != k.Namespace || o.blocks.get(k.Index) != b || b.version != 0 {
			// Dropped, truncated or written since recovery: the live
			// paths own its flags now (and copyState its G4 copy).
			o.mu.Unlock()
			continue
		}
		_, inList := listed[k]
		switch {
		case b.in.has(tiG3):
			// G3 wins, as in recover: a G4 copy of a block G3 holds may
			// be a stale one whose delete failed during the outage.
			b.in.drop(tiG4)
		case inList:
			b.in.add(tiG4)
			used[k] = true
			confirmed++
		case b.in.has(tiG35) || b.g2.Load() != nil:
			b.in.drop(tiG4)
		default:
			lost[o.id] = k
		}
		o.mu.Unlock()
	}
	byObject := make(map[uint64][]tier.Key)
	for k := range listed {
		byObject[k.Object] = append(byObject[k.Object], k)
	}
	merged := 0
	for _, o := range rec.exports {
		o.mu.Lock()
		if !o.deleted {
			for _, k := range byObject[uint64(o.id)] {
				if k.Namespace != o.ns || k.Gen != o.gen || int64(k.Index)*int64(o.bs) >= o.size {
					continue
				}
				if o.blocks.get(k.Index) != nil {
					continue // in G3 too: G3 wins (recoverDevice); the G4 copy is garbage
				}
				o.blocks.set(k.Index, &blockState{in: tiersOf(tiG4)})
				used[k] = true
				merged++
			}
		}
		o.awaitG4 = false
		s.scheduleClean(o)
		o.mu.Unlock()
	}
	for id, k := range lost {
		s.lose(id, fmt.Errorf("block %s: %w: in no tier (G4's listing, once it answered, does not hold it)", k, tier.ErrNotFound))
	}
	garbage := 0
	for k := range listed {
		if !used[k] {
			garbage++
			s.gc(s.g4, k) // copyState keeps copies that live blocks use
		}
	}
	s.g4recMu.Lock()
	s.g4rec = nil
	s.g4recMu.Unlock()
	s.log.Info("G4 recovered: listing complete", "attempts", attempts, "g4_blocks", len(listed),
		"blocks_confirmed", confirmed, "export_blocks", merged, "objects_lost", len(lost), "garbage_candidates", garbage)
}

// g4recState is embedded in Store: the pending G4 recovery, if any.
type g4recState struct {
	g4recMu sync.Mutex
	g4rec   *g4Recovery // nil once G4 is recovered (or was listed at Open)
}
