package heat

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
)

// Ranking keeps object-level heat for reports: the n hottest objects
// (Hottest), the least recently used ones (Coldest) and a score histogram
// (Histogram), at a cost per report that does not grow with the number of
// tracked objects.
//
// # Score
//
// The score is Tracker's: each Touch decays the score exponentially with
// HalfLife, adds Gain and caps the sum at MaxScore, so scores are in
// [0, MaxScore]. Each key stores its score as of its last Touch and that
// time, so Score is Tracker's computation. Ranking uses the
// time-normalised log score
//
//	lg = log2(score at t) + t        (t in half-lives since the first Touch)
//
// for which the score at any later time T is 2^(lg−T). This is forward decay
// (Cormode, Shkapenyuk, Srivastava, Xu, "Forward Decay: A Practical Time
// Decay Model for Streaming Systems", ICDE 2009) in log form, as
// Policy's OrderDecay does: decay scales every untouched score by the same
// factor, so the order of keys by lg is their order by score at any time T
// after the last Touch, and lg of an untouched key never changes. The
// MaxScore cap is applied at Touch time, in the linear domain, so a key
// capped at 100 later than another ranks above it, as its score does.
// lg is a pure function of the stored score and time, computed when
// needed. Precision: lg is a float64 in half-lives, so after T half-lives
// since the first Touch two scores closer than a relative T·2^−52 (1e−10
// after a year at the default 60 s half-life) may rank in either order.
//
// # Time
//
// A Ranking keeps one clock: the latest time passed to Touch. A Touch with
// an earlier time is recorded at the clock (scores and LRU order stay
// consistent), and Score, Hottest, Coldest and Histogram evaluate at
// max(now, clock). With non-decreasing times the scores equal Tracker's
// (to float rounding, ~1e−12 relative); Tracker instead clamps per key.
//
// # Hottest: candidate set, no full scan
//
// The Ranking keeps a candidate set C (up to capN keys, sorted by lg as of
// the last Hottest call; capN = max(4n, 256, previous capN / 2) for that
// call's n), a dirty list D, and a floor F with the invariant
//
//	every tracked key outside C ∪ D has lg ≤ F.
//
// Touch keeps it in O(1): a key outside C whose new lg exceeds F is put on
// D. Hottest merges C ∪ D into a new C (the capN largest lg, by a bounded
// min-heap), raises F to the largest lg it dropped, and answers from C. The
// answer is exact when C holds at least n keys with lg ≥ F (keys outside C
// are all ≤ F; a key equal to F is a tie in score). lg changes only on
// Touch, and only upwards, so after a merge C holds capN keys with lg ≥ F
// and the condition holds unless more than capN−n of them were Removed
// since, or n grew past the previous call's capN; then Hottest rebuilds C
// by one full scan (O(keys), counted in the rescans field). A key touched
// to a score below the floor costs Touch one comparison; D holds only keys
// that rose above it, at most the number of distinct keys touched between
// two Hottest calls (4 bytes each). Merging costs about one cache miss per
// key of D: with 1,000,000 keys, a report after 10,000 touches merged
// ~600–900 keys (uniform or Zipf touches) in ~0.1–0.2 ms, and 10,000 keys
// in ~3 ms in the worst case where every touch beats the floor (Gain =
// MaxScore); Touch callers wait for the report's lock meanwhile.
//
// # Coldest: LRU list
//
// Keys are on an intrusive doubly linked list in Touch order (the clock
// makes it also last-access order). Coldest walks it from the least
// recently used end: O(n + skipped keys). Park takes a key off the list
// until its next Touch, so keys that skip would reject every time are not
// walked again.
//
// # Histogram: incremental log bins
//
// The Ranking counts keys per lg bin of width 1/256 half-life in a ring of
// 2048 bins that covers every lg that can still score 10 or more; keys
// below it are counted in one "below 10" total. Touch and Remove move one
// count, Histogram sums at most 2048 bins (O(1) in the number of keys). A
// bin is assigned to the decile of its centre, so a key whose score lies
// within a factor 2^(1/512) (0.14 %) of a decile boundary (10, 20, …, 90)
// may be counted in the neighbouring decile; the sum of the deciles is
// exactly Len.
//
// # Cost and memory
//
// Touch is O(1): one map lookup, one exp2 and one log2, an LRU move and a
// histogram update under one mutex; it does not allocate for a tracked key
// (D's backing array is reused). Memory is one slab entry per key (48 bytes
// for an 8-byte key: key, score, last access, access count, list links,
// histogram bin, flags) plus the key→slot map; up to 2^31−1 keys.
//
// A Ranking is safe for concurrent use.
type Ranking[K comparable] struct {
	cfg     RankingConfig
	perNano float64 // half-lives per nanosecond: 1/HalfLife

	mu    sync.Mutex
	idx   map[K]int32  // key → slot in ents
	ents  []rkEntry[K] // slab; freed slots are chained through next
	free  int32        // first free slot, or rkNil
	head  int32        // most recently touched key on the LRU list, or rkNil
	tail  int32        // least recently touched key on the LRU list, or rkNil
	begun bool         // a Touch has set epoch and clock
	epoch int64        // UnixNano of the first Touch (t = 0)
	clock int64        // UnixNano of the latest Touch
	cand  []int32      // C: slots, sorted by lg (largest first) when built
	dirty []int32      // D: slots that rose above floor since the last merge
	floor float64      // F: upper bound on lg of keys outside C ∪ D
	capN  int          // capacity of C
	sel   rkSelect     // scratch heap for merges and rescans
	hist  rkHist       // lg bins for Histogram
	// rescans counts full scans done by Hottest (read by tests).
	rescans uint64
}

// RankingConfig configures a Ranking. Zero fields take the heat defaults.
type RankingConfig struct {
	// HalfLife is the time in which an untouched score halves (> 0;
	// 0 means DefaultHalfLife).
	HalfLife time.Duration
	// Gain is the points one access adds before the MaxScore cap, in
	// (0, MaxScore] (0 means DefaultGain).
	Gain float64
}

func (c *RankingConfig) fill() error {
	if c.HalfLife == 0 {
		c.HalfLife = DefaultHalfLife
	}
	if c.Gain == 0 {
		c.Gain = DefaultGain
	}
	switch {
	case c.HalfLife < 0:
		return fmt.Errorf("%w: half-life %v must be positive", ErrConfig, c.HalfLife)
	case !(c.Gain > 0 && c.Gain <= MaxScore):
		return fmt.Errorf("%w: gain %v outside (0, %v]", ErrConfig, c.Gain, MaxScore)
	}
	return nil
}

// Ranked is one key of a report.
type Ranked[K comparable] struct {
	// Key is the tracked key.
	Key K
	// Score is the heat score in [0, MaxScore] at the report's time.
	Score float64
	// LastAccess is the time of the key's last Touch (after the clock
	// clamp, see Ranking), as time.Unix(0, ns).
	LastAccess time.Time
	// Accesses is the number of Touch calls since the key started being
	// tracked (its first Touch, or its first Touch after a Remove).
	Accesses uint64
}

// rkNil is the "no slot" link.
const rkNil int32 = -1

// rkEntry flags.
const (
	rkLive   uint8 = 1 << iota // slot holds a tracked key
	rkInC                      // key is in cand
	rkInD                      // key is in dirty
	rkParked                   // key is off the LRU list
)

// rkEntry is one tracked key (48 bytes for an 8-byte key).
type rkEntry[K comparable] struct {
	key   K
	score float64 // score at the last Touch, in (0, MaxScore]
	at    int64   // UnixNano of the last Touch
	n     uint64  // Touch count
	prev  int32   // towards head (more recent); rkNil at head
	next  int32   // towards tail (older); rkNil at tail; free-list link
	bin   int32   // histBin(lg) − histBin(t of at): |bin| <= 256·|log2 score| + 1
	flags uint8
}

// minCand is the smallest candidate set capacity.
const minCand = 256

// NewRanking returns an empty Ranking. It returns an error wrapping
// ErrConfig when cfg.HalfLife is negative or cfg.Gain is outside
// (0, MaxScore].
func NewRanking[K comparable](cfg RankingConfig) (*Ranking[K], error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	return &Ranking[K]{
		cfg:     cfg,
		perNano: 1 / float64(cfg.HalfLife),
		idx:     make(map[K]int32),
		free:    rkNil,
		head:    rkNil,
		tail:    rkNil,
		floor:   math.Inf(-1),
	}, nil
}

// Config returns the effective configuration (defaults filled in).
func (r *Ranking[K]) Config() RankingConfig { return r.cfg }

// halfLives converts a UnixNano time to half-lives since epoch.
func (r *Ranking[K]) halfLives(ns int64) float64 { return float64(ns-r.epoch) * r.perNano }

// scoreAt returns e's score at ns (>= e.at), as Tracker computes it.
func (r *Ranking[K]) scoreAt(e *rkEntry[K], ns int64) float64 {
	return e.score * math.Exp2(-float64(ns-e.at)*r.perNano)
}

// lgOf returns e's log score: log2(score) + half-lives since epoch.
func (r *Ranking[K]) lgOf(e *rkEntry[K]) float64 {
	return math.Log2(e.score) + r.halfLives(e.at)
}

// binOf returns histBin(r.lgOf(e)) without a log2, from e.bin.
func (r *Ranking[K]) binOf(e *rkEntry[K]) int64 {
	return int64(e.bin) + histBin(r.halfLives(e.at))
}

// Touch records one access of k at now: decay, add Gain, cap at MaxScore;
// k moves to the most recently used end of the LRU list (leaving Park).
// An unknown key starts from 0. O(1); no allocation for a tracked key.
func (r *Ranking[K]) Touch(k K, now time.Time) {
	ns := now.UnixNano()
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.begun {
		r.begun, r.epoch, r.clock = true, ns, ns
		r.hist.base = histBin(math.Log2(10)) - 1
	}
	if ns < r.clock {
		ns = r.clock
	} else {
		r.clock = ns
	}
	t := r.halfLives(ns)
	s, ok := r.idx[k]
	if !ok {
		s = r.alloc(k)
	}
	e := &r.ents[s]
	var old float64 // decayed score
	if ok {
		old = r.scoreAt(e, ns)
		r.hist.add(r.binOf(e), -1, t)
	}
	e.score, e.at = min(old+r.cfg.Gain, MaxScore), ns
	e.n++
	lg := r.lgOf(e)
	b := histBin(lg)
	e.bin = int32(b - histBin(t))
	r.hist.add(b, 1, t)
	if e.flags&(rkInC|rkInD) == 0 && lg > r.floor {
		e.flags |= rkInD
		r.dirty = append(r.dirty, s)
	}
	switch {
	case !ok || e.flags&rkParked != 0:
		e.flags &^= rkParked
		r.pushFront(s)
	case s != r.head:
		r.unlink(s)
		r.pushFront(s)
	}
}

// alloc gives k a slot with score 0, not on the LRU list.
func (r *Ranking[K]) alloc(k K) int32 {
	var s int32
	if r.free != rkNil {
		s = r.free
		r.free = r.ents[s].next
	} else {
		s = int32(len(r.ents))
		r.ents = append(r.ents, rkEntry[K]{})
	}
	r.ents[s] = rkEntry[K]{key: k, prev: rkNil, next: rkNil, flags: rkLive}
	r.idx[k] = s
	return s
}

func (r *Ranking[K]) unlink(s int32) {
	e := &r.ents[s]
	if e.prev != rkNil {
		r.ents[e.prev].next = e.next
	} else {
		r.head = e.next
	}
	if e.next != rkNil {
		r.ents[e.next].prev = e.prev
	} else {
		r.tail = e.prev
	}
	e.prev, e.next = rkNil, rkNil
}

func (r *Ranking[K]) pushFront(s int32) {
	e := &r.ents[s]
	e.prev, e.next = rkNil, r.head
	if r.head != rkNil {
		r.ents[r.head].prev = s
	} else {
		r.tail = s
	}
	r.head = s
}

// Remove forgets k (the object was deleted); a later Touch starts from 0.
// Unknown keys are ignored. O(1).
func (r *Ranking[K]) Remove(k K) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.idx[k]
	if !ok {
		return
	}
	delete(r.idx, k)
	e := &r.ents[s]
	r.hist.add(r.binOf(e), -1, 0) // a decrement never slides the ring
	if e.flags&rkParked == 0 {
		r.unlink(s)
	}
	// Clearing the flags makes stale cand/dirty references to s inert.
	r.ents[s] = rkEntry[K]{prev: rkNil, next: r.free}
	r.free = s
}

// Park takes k off the LRU list until its next Touch, so Coldest no longer
// walks it (use it for keys that Coldest's skip would keep rejecting, such
// as objects already sunk to G4). A parked key keeps its score and still
// counts in Hottest, Histogram, Score and Len. Unknown or already parked
// keys are ignored. O(1).
func (r *Ranking[K]) Park(k K) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.idx[k]
	if !ok || r.ents[s].flags&rkParked != 0 {
		return
	}
	r.unlink(s)
	r.ents[s].flags |= rkParked
}

// Len returns the number of tracked keys (parked ones included).
func (r *Ranking[K]) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.idx)
}

// Score returns k's score in [0, MaxScore] at max(now, clock) and whether
// k is tracked (0, false if not). It does not change any state.
func (r *Ranking[K]) Score(k K, now time.Time) (float64, bool) {
	ns := now.UnixNano()
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.idx[k]
	if !ok {
		return 0, false
	}
	return r.scoreAt(&r.ents[s], max(ns, r.clock)), true
}

// ranked builds the report row of e at ns.
func (r *Ranking[K]) ranked(e *rkEntry[K], ns int64) Ranked[K] {
	return Ranked[K]{Key: e.key, Score: r.scoreAt(e, ns), LastAccess: time.Unix(0, e.at), Accesses: e.n}
}

// Hottest appends to dst the min(n, Len) keys with the highest scores at
// max(now, clock), highest first (equal scores in any order), and returns
// the extended slice; pass buf[:0] to reuse a buffer. Cost: O((capN + |D|)
// log capN) with capN = max(4·min(n, Len), 256, previous capN / 2) and |D|
// the keys that rose above the floor since the previous call; a full
// O(Len) scan only after n grew past the previous call's capN or more than
// capN−n of the candidates were Removed (see Ranking).
func (r *Ranking[K]) Hottest(n int, now time.Time, dst []Ranked[K]) []Ranked[K] {
	ns := now.UnixNano()
	r.mu.Lock()
	defer r.mu.Unlock()
	if n <= 0 || len(r.idx) == 0 {
		return dst
	}
	n = min(n, len(r.idx))
	r.capN = max(4*n, minCand, r.capN/2) // shrinks by halves after a large n
	if r.merge(); !r.exact(n) {
		r.rescan()
	}
	ns = max(ns, r.clock)
	for _, s := range r.cand[:min(n, len(r.cand))] {
		dst = append(dst, r.ranked(&r.ents[s], ns))
	}
	return dst
}

// merge rebuilds cand from cand ∪ dirty (a key is never in both) and
// raises floor to the largest lg it dropped.
func (r *Ranking[K]) merge() {
	r.sel.reset(r.capN)
	for _, s := range r.cand {
		if e := &r.ents[s]; e.flags&rkInC != 0 {
			e.flags &^= rkInC // also dedups stale repeats of a reused slot
			r.sel.push(r.lgOf(e), s)
		}
	}
	for _, s := range r.dirty {
		if e := &r.ents[s]; e.flags&rkInD != 0 {
			e.flags &^= rkInD
			r.sel.push(r.lgOf(e), s)
		}
	}
	r.dirty = r.dirty[:0]
	r.floor = max(r.floor, r.sel.dropped)
	r.adopt()
}

// rescan rebuilds cand from every key and sets floor exactly.
func (r *Ranking[K]) rescan() {
	r.rescans++
	r.sel.reset(r.capN)
	for i := range r.ents {
		e := &r.ents[i]
		if e.flags&rkLive == 0 {
			continue
		}
		e.flags &^= rkInC | rkInD
		r.sel.push(r.lgOf(e), int32(i))
	}
	r.dirty = r.dirty[:0]
	r.floor = r.sel.dropped
	r.adopt()
}

// adopt makes the selection the new cand, largest lg first.
func (r *Ranking[K]) adopt() {
	slices.SortFunc(r.sel.h, func(a, b rkCand) int { return cmp.Compare(b.lg, a.lg) })
	r.cand = r.cand[:0]
	for _, c := range r.sel.h {
		r.ents[c.slot].flags |= rkInC
		r.cand = append(r.cand, c.slot)
	}
}

// exact reports whether the first n (<= Len) keys of cand are the top
// keys, given that every key outside cand has lg <= floor.
func (r *Ranking[K]) exact(n int) bool {
	switch {
	case len(r.cand) < n:
		return false
	case len(r.cand) == len(r.idx):
		return true
	}
	return r.lgOf(&r.ents[r.cand[n-1]]) >= r.floor
}

// Coldest appends to dst up to n keys that were not touched for at least
// minIdle before max(now, clock), least recently used first, with their
// scores at that time, and returns the extended slice. Parked keys are not
// considered; keys for which skip returns true are passed over (skip may
// be nil). Cost: O(n + skipped): every skipped key costs one step per call,
// so Park keys that skip will keep rejecting.
//
// skip is called with the Ranking's lock held: it must be quick, must not
// call the Ranking, and must not wait on a lock that is held by code that
// calls the Ranking (for example a lock held around Touch).
func (r *Ranking[K]) Coldest(n int, now time.Time, minIdle time.Duration, skip func(K) bool, dst []Ranked[K]) []Ranked[K] {
	ns := now.UnixNano()
	r.mu.Lock()
	defer r.mu.Unlock()
	if n <= 0 || !r.begun {
		return dst
	}
	ns = max(ns, r.clock)
	limit := ns - int64(max(minIdle, 0))
	for s := r.tail; s != rkNil && n > 0; s = r.ents[s].prev {
		e := &r.ents[s]
		if e.at > limit {
			break // the rest of the list is more recent
		}
		if skip != nil && skip(e.key) {
			continue
		}
		dst = append(dst, r.ranked(e, ns))
		n--
	}
	return dst
}

// Histogram returns the number of keys per score decile at
// max(now, clock): [0,10), [10,20), …, [80,90), [90,100]. It sums at most
// 2048 bins, not the keys; the counts are exact except that a key within
// 0.14 % of a decile boundary may be counted in the neighbouring decile
// (see Ranking). The counts sum to Len.
func (r *Ranking[K]) Histogram(now time.Time) [10]int64 {
	ns := now.UnixNano()
	r.mu.Lock()
	defer r.mu.Unlock()
	var out [10]int64
	if !r.begun {
		return out
	}
	return r.hist.deciles(r.halfLives(max(ns, r.clock)))
}

// rkCand is a key of a selection: its log score and slot.
type rkCand struct {
	lg   float64
	slot int32
}

// rkSelect keeps the limit largest lg pushed to it (a min-heap) and the
// largest lg it dropped.
type rkSelect struct {
	h       []rkCand
	limit   int
	dropped float64
}

func (s *rkSelect) reset(limit int) {
	s.h, s.limit, s.dropped = s.h[:0], limit, math.Inf(-1)
}

func (s *rkSelect) push(lg float64, slot int32) {
	if len(s.h) < s.limit {
		s.h = append(s.h, rkCand{lg, slot})
		for i := len(s.h) - 1; i > 0; {
			p := (i - 1) / 2
			if s.h[p].lg <= s.h[i].lg {
				break
			}
			s.h[p], s.h[i] = s.h[i], s.h[p]
			i = p
		}
		return
	}
	if lg <= s.h[0].lg {
		s.dropped = max(s.dropped, lg)
		return
	}
	s.dropped = max(s.dropped, s.h[0].lg)
	s.h[0] = rkCand{lg, slot}
	for i, n := 0, len(s.h); ; {
		m, l := i, 2*i+1
		if l < n && s.h[l].lg < s.h[m].lg {
			m = l
		}
		if l+1 < n && s.h[l+1].lg < s.h[m].lg {
			m = l + 1
		}
		if m == i {
			return
		}
		s.h[i], s.h[m] = s.h[m], s.h[i]
		i = m
	}
}

// Histogram bins: histPerHL bins per half-life of lg (per factor 2 of
// score), in a ring of histRing bins. The ring must span the lg range of
// scores 10..MaxScore, log2(10)·histPerHL ≈ 851 bins, plus room for the
// clock to advance between slides.
const (
	histPerHL = 256
	histRing  = 2048 // power of two
)

// histBin returns the bin of a log score.
func histBin(lg float64) int64 { return int64(math.Floor(lg * histPerHL)) }

// rkHist counts keys per lg bin. Bins below base hold only keys whose
// score is below 10 at the clock (hence at any later time) and are summed
// in below.
type rkHist struct {
	bins  [histRing]int64
	base  int64
	below int64
}

// add adds d to bin b; t is the clock in half-lives, used to slide the
// ring when b is past its end (only increments at the clock do that).
func (h *rkHist) add(b, d int64, t float64) {
	if b >= h.base+histRing {
		h.slide(b, t)
	}
	if b < h.base {
		h.below += d
		return
	}
	h.bins[b&(histRing-1)] += d
}

// slide moves base as far up as the clock t allows (bins below it score
// < 10), folding the bins it passes into below, so that bin b fits.
func (h *rkHist) slide(b int64, t float64) {
	nb := max(h.base, histBin(t+math.Log2(10))-1)
	if b >= nb+histRing { // unreachable for lg <= log2(MaxScore)+t; stay safe
		nb = b - histRing + 1
	}
	for x := h.base; x < nb && x < h.base+histRing; x++ {
		i := x & (histRing - 1)
		h.below += h.bins[i]
		h.bins[i] = 0
	}
	h.base = nb
}

// deciles returns the counts per score decile at time t (half-lives): a
// bin goes to the decile of its centre.
func (h *rkHist) deciles(t float64) [10]int64 {
	var out [10]int64
	var edge [10]float64 // edge[d]: bin coordinate of score 10·d at t
	for d := 1; d < 10; d++ {
		edge[d] = (t + math.Log2(float64(10*d))) * histPerHL
	}
	out[0] = h.below
	d := 0
	for x := h.base; x < h.base+histRing; x++ {
		c := h.bins[x&(histRing-1)]
		if c == 0 {
			continue
		}
		for mid := float64(x) + 0.5; d < 9 && mid >= edge[d+1]; {
			d++
		}
		out[d] += c
	}
	return out
}
