package tiering

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/health"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// Online fsck: read every copy of every live block in G3, G3.5 and G4 in
// full, each verified by its tier (CRC32C of the payload; G4 also its
// header), and report what fails.
//
// Health: every read goes through its tier's health machine (package
// tiering/health), as the data path's reads do (getFrom). A tier that is
// down or bypassed is not asked: its copies count as unreadable at once
// (FsckTierReport.Refused), with the machine's reason as their error, and
// are never dropped. The outcome of every read made is given to the
// machine, so a tier that does not answer (a hung disk: each read then
// waits its ReadTimeout) goes down after health.Config.DownAfter failed
// reads in a row (5), and the rest of the walk does not wait on it: a
// check of a hung tier takes about DownAfter / Concurrency read timeouts,
// not one per copy. A down local tier comes back when the core's probe
// succeeds; a down G4 lets one read through as a probe now and then.
//
// Locking: a copy is read without the object lock, inside a busy span of
// its block (object.busy), as write-back, eviction and sink store a copy:
// no write-back, eviction put, sink, share or GC delete of the key can run
// while it is read, so the copy the block's flag records is the copy read
// (G3's reclaim may still move it, same bytes, or forget it, which the
// re-check after the read sees). A block whose key is busy when its turn
// comes is tried again after the pass (a few times, then counted as
// skipped). After the read the object lock is taken again and the result
// counts only if the block is still the same block state with the same
// flag; only then is anything dropped.
//
// Dropping a copy (FsckOptions.Drop) is what a read that meets it does,
// made durable: the block's flag is cleared and the copy queued for
// deletion (a G3 delete of a quarantined record writes a tombstone, so the
// record does not come back at the next start). What then becomes of the
// block: a dirty block keeps its G2 bytes, which write-back stores; a
// block with another copy reads from it; a block with only a G2 copy left
// is made dirty again so write-back stores it anew; a block with no copy
// at all makes its object lost (Store.lose: the front end removes the
// file; readers get an error, never wrong bytes).

// FsckOptions configure Fsck. Zero values take the defaults.
type FsckOptions struct {
	// Tiers names the tiers to check ("G3", "G3.5", "G4"); empty: every
	// tier below G2 the store has.
	Tiers []string
	// Drop forgets every corrupt or missing copy (see above).
	Drop bool
	// Concurrency is the number of copies read at once (default 4, at
	// most 64).
	Concurrency int
	// ReadTimeout bounds each read (default 30 s; a local tier's by
	// Config.LocalReadTimeout when that is shorter): a tier that does not
	// answer in time counts the copy unreadable, and the read as a failed
	// call for the tier's health (enough of them in a row take the tier
	// down, and its other copies are then not read: see the top of this
	// file).
	ReadTimeout time.Duration
	// BytesPerSecond limits the read rate (0: unlimited), so a check
	// does not take the tiers' bandwidth from the engines.
	BytesPerSecond int64
	// MaxBad bounds FsckReport.Bad and Lost (default 100).
	MaxBad int
	// Name, if set, names an object in the report (the daemon gives the
	// file's path). It is called without store locks held, before a lost
	// object is removed.
	Name func(ObjectID) string
}

// FsckReport is what Fsck found.
type FsckReport struct {
	// Drop is FsckOptions.Drop.
	Drop bool `json:"drop"`
	// Objects is the number of objects walked.
	Objects int64 `json:"objects"`
	// Tiers has one entry per tier checked.
	Tiers []FsckTierReport `json:"tiers"`
	// Bad lists the first MaxBad bad copies; BadOmitted counts the rest.
	Bad        []FsckBadCopy `json:"bad,omitempty"`
	BadOmitted int64         `json:"bad_omitted,omitempty"`
	// Rewritten counts blocks whose only copy left was in G2 and that
	// were made dirty again so write-back stores them anew.
	Rewritten int64 `json:"rewritten"`
	// LostObjects counts objects that lost a block with no copy left
	// (with Drop); Lost lists the first MaxBad of them.
	LostObjects int64      `json:"lost_objects"`
	Lost        []ObjectID `json:"lost,omitempty"`
	// Interrupted is set when ctx ended (or the store closed) before the
	// walk was done: the counts cover what was checked.
	Interrupted    bool    `json:"interrupted,omitempty"`
	ElapsedSeconds float64 `json:"elapsed_s"`
}

// FsckTierReport counts one tier's copies.
type FsckTierReport struct {
	Tier string `json:"tier"`
	// Checked counts copies read (whatever the outcome), Bytes the bytes
	// of those that passed their checks.
	Checked int64 `json:"checked"`
	Bytes   int64 `json:"bytes"`
	// Corrupt: the copy failed its checksum or header checks. Missing:
	// the block records a copy the tier does not have. Unreadable: the
	// tier did not answer (an I/O error, S3 down, a timeout) or was not
	// asked (Refused: its health was down or bypassed): not verified,
	// never dropped.
	Corrupt    int64 `json:"corrupt"`
	Missing    int64 `json:"missing"`
	Unreadable int64 `json:"unreadable"`
	// Skipped counts copies whose block stayed busy (a put or delete in
	// flight) every time its turn came: not checked this time.
	Skipped int64 `json:"skipped"`
	// Dropped counts the corrupt and missing copies forgotten (Drop).
	Dropped int64 `json:"dropped"`
	// Refused counts the copies not read because the tier's health
	// machine refused the read (the tier was down or bypassed: package
	// tiering/health); they are counted in Unreadable too.
	Refused int64 `json:"refused,omitempty"`
	// Health is the tier's health state when the check ended ("up",
	// "degraded", "down", "bypassed") and HealthReason why it is not up.
	Health       string `json:"health,omitempty"`
	HealthReason string `json:"health_reason,omitempty"`
	// NotChecked says why the tier was not checked (a pool in bypass).
	NotChecked string `json:"not_checked,omitempty"`
}

// FsckBadCopy is one bad copy.
type FsckBadCopy struct {
	Object    ObjectID `json:"object"`
	Namespace string   `json:"namespace"`
	Kind      string   `json:"kind,omitempty"`
	// Path is the object's name from FsckOptions.Name ("" without it).
	Path  string `json:"path,omitempty"`
	Block uint32 `json:"block"`
	Gen   uint64 `json:"gen"`
	Tier  string `json:"tier"`
	// Problem is FsckCorrupt, FsckMissing or FsckUnreadable; Error the
	// tier's error.
	Problem string `json:"problem"`
	Error   string `json:"error"`
	// Dropped is set when the copy was forgotten.
	Dropped bool `json:"dropped"`
	// Outcome says what became of the block (Fsck* outcome constants).
	Outcome string `json:"outcome"`
	// OtherCopies are the tiers still holding the block after the check
	// ("G2" for a DRAM copy).
	OtherCopies []string `json:"other_copies,omitempty"`
}

// Problems of FsckBadCopy.
const (
	FsckCorrupt    = "corrupt"
	FsckMissing    = "missing"
	FsckUnreadable = "unreadable"
)

// Outcomes of FsckBadCopy.
const (
	// FsckKept: not dropped (no Drop, or an unreadable copy); a read
	// uses OtherCopies, or loses the object when there is none.
	FsckKept = "kept"
	// FsckDirty: the block is dirty; its G2 copy holds its newest bytes
	// and write-back stores them.
	FsckDirty = "dirty"
	// FsckRewritten: only a G2 copy was left; it is written back anew.
	FsckRewritten = "rewritten"
	// FsckOtherCopy: the block reads from another tier's copy.
	FsckOtherCopy = "other_copy"
	// FsckLost: no copy left: the object is lost.
	FsckLost = "lost"
)

// BadCopies returns the number of corrupt and missing copies found.
func (r FsckReport) BadCopies() int64 {
	var n int64
	for _, t := range r.Tiers {
		n += t.Corrupt + t.Missing
	}
	return n
}

// Unreadable returns the number of copies that could not be read.
func (r FsckReport) Unreadable() int64 {
	var n int64
	for _, t := range r.Tiers {
		n += t.Unreadable
	}
	return n
}

// Clean reports whether every copy checked was good (nothing corrupt,
// missing or unreadable, nothing skipped, not interrupted).
func (r FsckReport) Clean() bool {
	for _, t := range r.Tiers {
		if t.Corrupt+t.Missing+t.Unreadable+t.Skipped > 0 {
			return false
		}
	}
	return !r.Interrupted
}

// ParseTier returns the canonical name of a tier below G2 ("G3", "G3.5",
// "G4"; case-insensitive, "G35" accepted).
func ParseTier(name string) (string, error) {
	switch strings.ToUpper(strings.TrimSpace(name)) {
	case "G3":
		return TierG3, nil
	case "G3.5", "G35":
		return TierG35, nil
	case "G4":
		return TierG4, nil
	}
	return "", fmt.Errorf("%w: tier %q (want G3, G3.5 or G4)", ErrInvalid, name)
}

// fsckItem is one copy to check: tier ti's copy of block idx of o, whose
// block state was b when the walk saw it.
type fsckItem struct {
	o   *object
	idx uint32
	b   *blockState
	ti  int
}

// fscker is one Fsck run.
type fscker struct {
	s     *Store
	o     FsckOptions
	lim   *rateLimiter
	mu    sync.Mutex
	rep   FsckReport
	tiers [nTiers]*FsckTierReport
	retry []fsckItem // items whose block was busy, for another turn
}

// Fsck checks every copy of every live block in the selected tiers (see
// the top of this file), reading each in full with its tier's
// verification, o.Concurrency at a time, each read bounded by
// o.ReadTimeout, at most o.BytesPerSecond, each through the tier's health
// machine (a down or bypassed tier is not read; its copies are unreadable
// at once). It holds no object lock during a read. With o.Drop it forgets corrupt and missing copies and declares
// objects left without any copy lost. Unreadable copies (the tier did not
// answer) are reported and kept. A corrupt copy is quarantined by its tier
// whatever o.Drop says, as on any read (G3 stops serving it, G4 deletes
// it). Errors: ErrClosed, ErrBusy (another Fsck runs), ErrInvalid (an
// unknown tier, or one the store does not have); when ctx ends the report
// so far is returned with Interrupted set and ctx's error.
func (s *Store) Fsck(ctx context.Context, o FsckOptions) (FsckReport, error) {
	if s.closed.Load() {
		return FsckReport{}, ErrClosed
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 4
	}
	o.Concurrency = min(o.Concurrency, 64)
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = 30 * time.Second
	}
	if o.MaxBad <= 0 {
		o.MaxBad = 100
	}
	f := &fscker{s: s, o: o, rep: FsckReport{Drop: o.Drop}}
	if o.BytesPerSecond > 0 {
		f.lim = &rateLimiter{rate: float64(o.BytesPerSecond)}
	}
	var want [nTiers]bool
	if len(o.Tiers) == 0 {
		want[tiG3], want[tiG35], want[tiG4] = true, true, true
	}
	for _, name := range o.Tiers {
		n, err := ParseTier(name)
		if err != nil {
			return FsckReport{}, err
		}
		ti := slices.Index(tierNames[:], n)
		if s.tierAt(ti) == nil {
			return FsckReport{}, fmt.Errorf("%w: the store has no %s tier", ErrInvalid, n)
		}
		want[ti] = true
	}
	for _, ti := range []int{tiG3, tiG35, tiG4} {
		t := s.tierAt(ti)
		if !want[ti] || t == nil {
			continue
		}
		f.rep.Tiers = append(f.rep.Tiers, FsckTierReport{Tier: tierNames[ti]})
		tr := &f.rep.Tiers[len(f.rep.Tiers)-1]
		if b, ok := t.(interface{ Bypassed() bool }); ok && b.Bypassed() {
			// A pool in bypass answers every read "not found": that
			// says nothing about its copies, and dropping them would
			// lose every imported object.
			tr.NotChecked = "the pool is in bypass (link down)"
			want[ti] = false
		}
	}
	for i := range f.rep.Tiers {
		f.tiers[slices.Index(tierNames[:], f.rep.Tiers[i].Tier)] = &f.rep.Tiers[i]
	}
	if !s.fsckMu.TryLock() {
		return FsckReport{}, fmt.Errorf("fsck: %w", ErrBusy)
	}
	defer s.fsckMu.Unlock()
	start := time.Now()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.ctx, cancel)() // the store closing ends the check

	items := make(chan fsckItem)
	go func() {
		defer close(items)
		f.walk(ctx, want, items)
	}()
	f.work(ctx, items)
	// Blocks that were busy get a few more turns, further apart.
	for round := 1; round <= 5 && len(f.retry) > 0 && ctx.Err() == nil; round++ {
		t := time.NewTimer(time.Duration(round) * 50 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		again := f.retry
		f.retry = nil
		ch := make(chan fsckItem)
		go func() {
			defer close(ch)
			for _, it := range again {
				select {
				case ch <- it:
				case <-ctx.Done():
					return
				}
			}
		}()
		f.work(ctx, ch)
	}
	for _, it := range f.retry {
		f.tiers[it.ti].Skipped++
	}
	for i := range f.rep.Tiers {
		tr := &f.rep.Tiers[i]
		hs := s.health[slices.Index(tierNames[:], tr.Tier)].Snapshot()
		tr.Health, tr.HealthReason = hs.State.String(), hs.Reason
	}
	f.rep.ElapsedSeconds = time.Since(start).Seconds()
	if err := ctx.Err(); err != nil {
		f.rep.Interrupted = true
		if s.ctx.Err() != nil {
			return f.rep, ErrClosed
		}
		return f.rep, err
	}
	if n := f.rep.BadCopies(); n > 0 || f.rep.Unreadable() > 0 {
		var refused int64
		for _, t := range f.rep.Tiers {
			refused += t.Refused
		}
		s.log.Warn("fsck: bad copies found", "bad", n, "unreadable", f.rep.Unreadable(), "refused_by_health", refused, "dropped", o.Drop,
			"rewritten", f.rep.Rewritten, "objects_lost", f.rep.LostObjects)
	}
	return f.rep, nil
}

// walk sends every copy to check, object by object in id order.
func (f *fscker) walk(ctx context.Context, want [nTiers]bool, out chan<- fsckItem) {
	s := f.s
	s.mu.RLock()
	objs := make([]*object, 0, len(s.objects))
	for _, o := range s.objects {
		objs = append(objs, o)
	}
	s.mu.RUnlock()
	sort.Slice(objs, func(i, j int) bool { return objs[i].id < objs[j].id })
	var batch []fsckItem
	for _, o := range objs {
		batch = batch[:0]
		o.mu.RLock()
		if !o.deleted {
			for idx, b := range o.blocks.all() {
				for _, ti := range []int{tiG3, tiG35, tiG4} {
					if want[ti] && s.holds(b, s.tierAt(ti)) {
						batch = append(batch, fsckItem{o: o, idx: idx, b: b, ti: ti})
					}
				}
			}
		}
		o.mu.RUnlock()
		if len(batch) == 0 {
			continue
		}
		f.mu.Lock()
		f.rep.Objects++
		f.mu.Unlock()
		sort.Slice(batch, func(i, j int) bool {
			if batch[i].idx != batch[j].idx {
				return batch[i].idx < batch[j].idx
			}
			return batch[i].ti < batch[j].ti
		})
		for _, it := range batch {
			select {
			case out <- it:
			case <-ctx.Done():
				return
			}
		}
	}
}

// work checks the items with o.Concurrency workers until the channel
// closes or ctx ends.
func (f *fscker) work(ctx context.Context, items <-chan fsckItem) {
	var wg sync.WaitGroup
	for range f.o.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []byte
			for it := range items {
				if ctx.Err() != nil {
					continue // drain
				}
				if it.o.bs > cap(buf) {
					buf = make([]byte, it.o.bs)
				}
				if abandoned := f.check(ctx, it, buf[:it.o.bs]); abandoned {
					buf = nil // a read that did not answer still owns it
				}
			}
		}()
	}
	wg.Wait()
}

// check reads one copy and records (and with Drop, handles) the outcome.
// It reports whether the read was left behind still running (its buffer
// must not be reused).
func (f *fscker) check(ctx context.Context, it fsckItem, buf []byte) (abandoned bool) {
	s, o, t := f.s, it.o, f.s.tierAt(it.ti)
	if err := f.lim.wait(ctx, len(buf)); err != nil {
		return false
	}
	o.mu.Lock()
	if o.deleted || o.blocks.get(it.idx) != it.b || !s.holds(it.b, t) {
		o.mu.Unlock()
		return false // dropped, rewritten elsewhere or removed since the walk
	}
	if o.isBusy(it.idx) {
		o.mu.Unlock()
		f.mu.Lock()
		f.retry = append(f.retry, it)
		f.mu.Unlock()
		return false
	}
	o.beginBusy(it.idx) // no put or delete of the key while it is read
	k := o.key(it.idx)
	o.mu.Unlock()

	// Through the tier's health, as getFrom: a down or bypassed tier is
	// not asked, and what the read meets tells the machine.
	h := s.health[it.ti]
	var n int
	err := h.Admit(health.Get)
	refused := err != nil
	if !refused {
		n, abandoned, err = f.read(ctx, it.ti, t, k, buf)
		if err != nil && ctx.Err() != nil {
			h.Observe(health.Get, context.Canceled) // the check ended, not the tier
		} else {
			h.Observe(health.Get, err)
		}
	}

	o.mu.Lock()
	if ctx.Err() != nil && err != nil {
		s.endBusyLocked(o, it.idx, true)
		o.mu.Unlock()
		return abandoned // interrupted: not counted
	}
	b := it.b
	if o.deleted || o.gen != k.Gen || o.blocks.get(it.idx) != b || !s.holds(b, t) {
		// Changed during the read (G3's reclaim forgot the copy, a
		// truncate dropped the block): the result is about a copy the
		// block no longer has.
		s.endBusyLocked(o, it.idx, true)
		o.mu.Unlock()
		return abandoned
	}
	problem := ""
	switch {
	case err == nil:
	case errors.Is(err, tier.ErrCorrupt):
		problem = FsckCorrupt
		s.c.crcErrors.Add(1)
		s.log.Error("fsck: corrupt copy", "tier", t.Name(), "key", k.String(), "err", err)
	case errors.Is(err, tier.ErrNotFound):
		problem = FsckMissing
		s.log.Error("fsck: copy missing", "tier", t.Name(), "key", k.String(), "err", err)
	default:
		problem = FsckUnreadable
		if !refused { // a refusal: the change of health was logged once
			s.logLimited("fsck: copy unreadable", "tier", t.Name(), "key", k.String(), "err", err)
		}
	}
	var bad *FsckBadCopy
	lost := false
	if problem != "" {
		bad = &FsckBadCopy{Object: o.id, Namespace: o.ns, Kind: o.kind, Block: it.idx, Gen: k.Gen,
			Tier: t.Name(), Problem: problem, Error: err.Error(), Outcome: FsckKept}
		if f.o.Drop && problem != FsckUnreadable {
			lost = f.dropLocked(o, it.idx, b, it.ti, t, k, bad)
		}
		bad.OtherCopies = s.copiesOf(b, t)
	}
	s.endBusyLocked(o, it.idx, true)
	o.mu.Unlock()

	f.record(it.ti, n, bad, refused, lost, o.id)
	if lost {
		s.lose(o.id, fmt.Errorf("fsck: block %d: its %s copy is %s and no other copy is left: %w", it.idx, t.Name(), problem, tier.ErrNotFound))
	}
	return abandoned
}

// dropLocked forgets tier ti's bad copy of block idx (state b) and
// decides what becomes of the block; it reports whether the object is
// lost. o.mu held for writing, inside the check's busy span.
func (f *fscker) dropLocked(o *object, idx uint32, b *blockState, ti int, t tier.Tier, k tier.Key, bad *FsckBadCopy) bool {
	s := f.s
	switch ti {
	case tiG3:
		b.in.drop(tiG3)
	case tiG35:
		b.in.drop(tiG35)
	case tiG4:
		b.in.drop(tiG4)
	}
	// Until the delete is done the copy could come back at a restart
	// (a G3 record with no tombstone yet): recorded stale, so the object
	// is not recorded clean with it meanwhile.
	o.markStale(idx, s.tierBit(t))
	s.gc(t, k)
	bad.Dropped = true
	g := b.g2.Load()
	switch {
	case b.dirty:
		bad.Outcome = FsckDirty
	case !b.in.empty():
		bad.Outcome = FsckOtherCopy
	case g != nil:
		// Its G2 copy is the block's bytes (a clean block's G2 copy was
		// read, verified, from a lower tier or written by the front end):
		// stored again by write-back.
		s.copyForwardLocked(o, b, k, nil)
		bad.Outcome = FsckRewritten
	default:
		bad.Outcome = FsckLost
		return true
	}
	return false
}

// copiesOf lists the tiers other than t holding block b. o.mu held.
func (s *Store) copiesOf(b *blockState, t tier.Tier) []string {
	var out []string
	if b.g2.Load() != nil {
		out = append(out, TierG2)
	}
	for _, c := range []struct {
		t    tier.Tier
		name string
	}{{s.g3, TierG3}, {s.g35, TierG35}, {s.g4, TierG4}} {
		if c.t != t && s.holds(b, c.t) {
			out = append(out, c.name)
		}
	}
	return out
}

// read reads t's copy of k into buf in full, bounded by ReadTimeout (for
// a local tier, by Config.LocalReadTimeout when that is shorter, as every
// other read of it is) even for a tier whose Get ignores its context (a
// local disk that hangs), or when ctx ends: the read then runs on in its
// goroutine with buf, abandoned is set, and the read counts as late for
// tier ti until it returns (Store.boundedUntil, BlockedIn).
func (f *fscker) read(ctx context.Context, ti int, t tier.Tier, k tier.Key, buf []byte) (n int, abandoned bool, err error) {
	d := f.o.ReadTimeout
	if f.s.isLocal(t) && f.s.cfg.LocalReadTimeout > 0 {
		d = min(d, f.s.cfg.LocalReadTimeout)
	}
	rctx, cancel := context.WithTimeout(ctx, d)
	// Store.boundedUntil: a read given up is counted as late until it
	// returns (Store.BlockedIn), as the data path's are.
	var gn int // the call's own results: written late by an abandoned read
	var gerr error
	if !f.s.boundedUntil(ti, ctx.Done(), d, func() { gn, gerr = t.Get(rctx, k, buf, 0) }, func() {}, cancel) {
		if ctx.Err() != nil {
			return 0, true, ctx.Err()
		}
		return 0, true, fmt.Errorf("%s get %v: no answer within %v: %w", t.Name(), k, d, tier.ErrUnavailable)
	}
	cancel()
	if gerr != nil && ctx.Err() == nil && errors.Is(gerr, context.DeadlineExceeded) {
		gerr = fmt.Errorf("%s get %v: no answer within %v: %w", t.Name(), k, d, gerr)
	}
	return gn, false, gerr
}

// record counts one checked copy (n good bytes, or bad; refused: its read
// was refused by the tier's health) in the report.
func (f *fscker) record(ti, n int, bad *FsckBadCopy, refused, lost bool, id ObjectID) {
	if bad != nil && f.o.Name != nil {
		bad.Path = f.o.Name(id) // outside store locks, before the loss removes the name
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	tr := f.tiers[ti]
	tr.Checked++
	if bad == nil {
		tr.Bytes += int64(n)
		return
	}
	switch bad.Problem {
	case FsckCorrupt:
		tr.Corrupt++
	case FsckMissing:
		tr.Missing++
	case FsckUnreadable:
		tr.Unreadable++
		if refused {
			tr.Refused++
		}
	}
	if bad.Dropped {
		tr.Dropped++
	}
	if bad.Outcome == FsckRewritten {
		f.rep.Rewritten++
	}
	if lost {
		f.rep.LostObjects++
		if len(f.rep.Lost) < f.o.MaxBad {
			f.rep.Lost = append(f.rep.Lost, id)
		}
	}
	if len(f.rep.Bad) < f.o.MaxBad {
		f.rep.Bad = append(f.rep.Bad, *bad)
	} else {
		f.rep.BadOmitted++
	}
}

// rateLimiter spaces reads so that they average at most rate bytes per
// second.
type rateLimiter struct {
	mu   sync.Mutex
	rate float64 // bytes per second
	next time.Time
}

// wait returns when n more bytes may be read (nil limiter: at once), or
// ctx's error.
func (l *rateLimiter) wait(ctx context.Context, n int) error {
	if l == nil {
		return ctx.Err()
	}
	l.mu.Lock()
	now := time.Now()
	if l.next.Before(now) {
		l.next = now
	}
	at := l.next
	l.next = l.next.Add(time.Duration(float64(n) / l.rate * float64(time.Second)))
	l.mu.Unlock()
	d := time.Until(at)
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
