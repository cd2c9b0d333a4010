package tiering

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// Garbage: block copies in a tier below G2 that no live block uses.
//
// Open finds them by listing G3 and G4 and matching the listings against
// the metadata database (recover.go); CollectGarbage finds them while the
// store runs by listing G3, G3.5 and G4 and matching each listed key
// against the live object table. Both queue what they find with gc, and
// nothing is deleted on the strength of a listing alone: gcOne re-checks
// every copy under its object's lock just before the delete (copyState)
// and deletes inside a busy span of the block, so a put that lands after
// the listing (the key written again) keeps its copy. That is mark (the
// listing and the first check) then sweep (the re-check at delete time).

// copyLoc records which tiers' listings hold a key.
type copyLoc struct{ g3, g35, g4 bool }

// listing is what one tier's Range returned: key → length in bytes.
type listing map[tier.Key]int64

// listTier returns t's listing (nil for a nil tier). A listing that fails
// part way returns the error and no keys, so callers never act on half of
// a tier.
func listTier(ctx context.Context, t tier.Tier) (listing, error) {
	if t == nil {
		return nil, nil
	}
	l := make(listing)
	if err := t.Range(ctx, func(k tier.Key, n int64) bool { l[k] = n; return true }); err != nil {
		return nil, err
	}
	return l, nil
}

// listTierCtx is listTier bounded by ctx even for a tier whose Range does
// not watch ctx: the Range runs in a goroutine of its own that the caller
// stops waiting for when ctx ends.
func listTierCtx(ctx context.Context, t tier.Tier) (listing, error) {
	type result struct {
		l   listing
		err error
	}
	ch := make(chan result, 1)
	go func() { l, err := listTier(ctx, t); ch <- result{l, err} }()
	select {
	case r := <-ch:
		return r.l, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("list %s: %w", t.Name(), ctx.Err())
	}
}

// copies is every listed copy by key (recovery's view of the tiers).
type copies map[tier.Key]*copyLoc

// add records tier ti's copy of k.
func (p copies) add(k tier.Key, ti int) {
	c := p[k]
	if c == nil {
		c = &copyLoc{}
		p[k] = c
	}
	switch ti {
	case tiG3:
		c.g3 = true
	case tiG35:
		c.g35 = true
	case tiG4:
		c.g4 = true
	}
}

// addListing merges tier ti's listing l.
func (p copies) addListing(l listing, ti int) {
	for k := range l {
		p.add(k, ti)
	}
}

// addRange merges t's Range as tier ti straight in, without a listing of
// its own (no second copy of a large index); a Range that fails part way
// leaves part of it, so only a caller that gives up on an error uses it.
func (p copies) addRange(ctx context.Context, t tier.Tier, ti int) error {
	if t == nil {
		return nil
	}
	return t.Range(ctx, func(k tier.Key, _ int64) bool { p.add(k, ti); return true })
}

// queueCopies queues the deletion of every listed copy of k (garbage).
func (s *Store) queueCopies(k tier.Key, c *copyLoc) {
	if c.g3 {
		s.gc(s.g3, k)
	}
	if c.g35 {
		s.gc(s.g35, k)
	}
	if c.g4 {
		s.gc(s.g4, k)
	}
}

// GCOptions configure CollectGarbage.
type GCOptions struct {
	// DryRun only reports what would be queued for deletion.
	DryRun bool `json:"dry_run,omitempty"`
}

// GCReport is what CollectGarbage found, per tier below G2.
type GCReport struct {
	DryRun bool           `json:"dry_run"`
	Tiers  []GCTierReport `json:"tiers"`
	// ElapsedSeconds is how long the listings and checks took.
	ElapsedSeconds float64 `json:"elapsed_s"`
}

// GCTierReport is one tier of a GCReport.
type GCTierReport struct {
	Tier string `json:"tier"`
	// Listed is the number of copies the tier's listing holds.
	Listed int64 `json:"listed"`
	// Garbage is the number of copies no live block uses, and Bytes
	// their payload bytes (queued, already queued, or in a dry run to be
	// queued).
	Garbage int64 `json:"garbage"`
	Bytes   int64 `json:"bytes"`
	// Queued is how many of them this call queued for deletion (0 in a
	// dry run); AlreadyQueued how many were waiting in the GC queue
	// already (a delete that failed and is retried, say).
	Queued        int64 `json:"queued"`
	AlreadyQueued int64 `json:"already_queued"`
	// Busy counts copies whose block had a put or delete in flight:
	// left alone (a later run decides).
	Busy int64 `json:"busy"`
	// Skipped says why the tier was not collected (G4's recovery is
	// pending); Error is the listing's failure.
	Skipped string `json:"skipped,omitempty"`
	Error   string `json:"error,omitempty"`
}

// Garbage returns the copies found in every tier.
func (r GCReport) Garbage() (copies, bytes int64) {
	for _, t := range r.Tiers {
		copies += t.Garbage
		bytes += t.Bytes
	}
	return copies, bytes
}

// ErrBusy is returned by Fsck and CollectGarbage while another call of the
// same kind runs.
var ErrBusy = errors.New("already running")

// Uses of a listed copy (copyUse).
const (
	useGarbage = iota // no live block uses it
	useLive           // the live block records it
	useBusy           // a put or delete of the key is in flight: undecided
)

// copyUse tells whether t's listed copy of k is used by a live block. It
// takes the object's read lock and changes nothing (gcOne decides again,
// under the write lock, before any delete).
func (s *Store) copyUse(t tier.Tier, k tier.Key) int {
	// The import counter is read before the object table (see Import):
	// with no import in flight now, any import that registered k before
	// the listing has made its object visible already.
	importing := s.importing.Load()
	o := s.get(ObjectID(k.Object))
	if o == nil {
		if t == s.g35 && importing > 0 {
			return useBusy // maybe an import's key, its object not yet visible
		}
		return useGarbage
	}
	o.mu.RLock()
	defer o.mu.RUnlock()
	switch {
	case o.deleted || o.gen != k.Gen || o.ns != k.Namespace:
		return useGarbage // the key is never written again
	case o.isBusy(k.Index):
		return useBusy
	case s.holds(o.blocks.get(k.Index), t):
		return useLive
	}
	return useGarbage
}

// CollectGarbage lists G3, G3.5 and G4 (each listing bounded by ctx; G4's
// also by its own list timeout) and queues for deletion every copy no live
// block uses: copies of deleted or rewritten objects whose deletion was
// lost (a kill -9 before the GC ran, a delete that failed at a restart), a
// put that outlived its block, objects planted in the bucket by hand. It
// returns what it found per tier; with DryRun it queues nothing. Safe
// while the store serves: a copy whose block has a put or delete in
// flight is left alone (Busy), and every queued copy is checked again
// under its object's lock before it is deleted (see the top of this
// file), so a copy written after the listing is never collected. G4 is
// not collected while its recovery is pending (the store started while it
// did not answer). Copies already queued are not queued again. Errors:
// ErrClosed, ErrBusy (another CollectGarbage runs), ctx errors; a
// listing that fails is reported in its tier's Error, the others go on.
func (s *Store) CollectGarbage(ctx context.Context, o GCOptions) (GCReport, error) {
	rep := GCReport{DryRun: o.DryRun}
	if s.closed.Load() {
		return rep, ErrClosed
	}
	if !s.collectMu.TryLock() {
		return rep, fmt.Errorf("gc: %w", ErrBusy)
	}
	defer s.collectMu.Unlock()
	start := time.Now()
	for _, c := range []struct {
		t  tier.Tier
		ti int
	}{{s.g3, tiG3}, {s.g35, tiG35}, {s.g4, tiG4}} {
		if c.t == nil {
			continue
		}
		tr := GCTierReport{Tier: tierNames[c.ti]}
		if c.t == s.g4 && s.g4Waiting() {
			tr.Skipped = "G4's recovery is pending (the store started while G4 did not answer): its listing is not trusted yet"
			rep.Tiers = append(rep.Tiers, tr)
			continue
		}
		l, err := listTierCtx(ctx, c.t)
		if err != nil {
			if ctx.Err() != nil {
				return rep, ctx.Err()
			}
			tr.Error = err.Error()
			rep.Tiers = append(rep.Tiers, tr)
			continue
		}
		tr.Listed = int64(len(l))
		i := 0
		for k, n := range l {
			if i++; i%4096 == 0 && ctx.Err() != nil {
				return rep, ctx.Err()
			}
			switch s.copyUse(c.t, k) {
			case useLive:
				continue
			case useBusy:
				tr.Busy++
				continue
			}
			queued := s.gcQueued(c.t, k)
			if _, err := c.t.Stat(ctx, k); !queued && errors.Is(err, tier.ErrNotFound) {
				continue // deleted since the listing (Stat asks the tier's index)
			}
			tr.Garbage++
			tr.Bytes += n
			switch {
			case queued:
				tr.AlreadyQueued++
			case !o.DryRun:
				s.gc(c.t, k)
				tr.Queued++
			}
		}
		rep.Tiers = append(rep.Tiers, tr)
	}
	rep.ElapsedSeconds = time.Since(start).Seconds()
	if n, b := rep.Garbage(); n > 0 {
		s.log.Info("gc: garbage found", "copies", n, "bytes", b, "dry_run", o.DryRun)
	}
	return rep, nil
}
