package heat

import (
	"cmp"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// rkTol is the score tolerance of the comparisons with the reference
// model (scores are in [0, 100]; the log-domain rounding is ~1e-11).
const rkTol = 1e-9

func newRanking[K comparable](t testing.TB, cfg RankingConfig) *Ranking[K] {
	t.Helper()
	r, err := NewRanking[K](cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// rkModel is the brute-force reference: Tracker's formula per key, the
// Ranking's clock rule, and an LRU order by touch sequence number.
type rkModel struct {
	hl    time.Duration
	gain  float64
	begun bool
	clock int64
	seq   int
	m     map[int]*rkModelEntry
}

type rkModelEntry struct {
	score  float64 // as of at
	at     int64
	seq    int
	n      uint64
	parked bool
}

func newRKModel(cfg RankingConfig) *rkModel {
	return &rkModel{hl: cfg.HalfLife, gain: cfg.Gain, m: map[int]*rkModelEntry{}}
}

func (m *rkModel) touch(k int, ns int64) {
	if !m.begun || ns > m.clock {
		m.begun, m.clock = true, ns
	}
	ns = m.clock
	e := m.m[k]
	if e == nil {
		e = &rkModelEntry{}
		m.m[k] = e
	}
	e.score = min(m.scoreAt(e, ns)+m.gain, MaxScore)
	e.at, e.n, e.parked = ns, e.n+1, false
	m.seq++
	e.seq = m.seq
}

func (m *rkModel) scoreAt(e *rkModelEntry, ns int64) float64 {
	if e.n == 0 {
		return 0
	}
	return e.score * math.Exp2(-float64(ns-e.at)/float64(m.hl))
}

func (m *rkModel) reportTime(ns int64) int64 { return max(ns, m.clock) }

type rkModelRow struct {
	k int
	e *rkModelEntry
	s float64
}

func (m *rkModel) rows(ns int64) []rkModelRow {
	rows := make([]rkModelRow, 0, len(m.m))
	for k, e := range m.m {
		rows = append(rows, rkModelRow{k, e, m.scoreAt(e, ns)})
	}
	return rows
}

// checkRow compares a report row with the model.
func (m *rkModel) checkRow(t *testing.T, what string, g Ranked[int], ns int64) {
	t.Helper()
	e := m.m[g.Key]
	if e == nil {
		t.Fatalf("%s: key %d is not tracked", what, g.Key)
	}
	if want := m.scoreAt(e, ns); math.Abs(g.Score-want) > rkTol {
		t.Fatalf("%s: key %d score %v, want %v", what, g.Key, g.Score, want)
	}
	if g.LastAccess.UnixNano() != e.at || g.Accesses != e.n {
		t.Fatalf("%s: key %d last access %d accesses %d, want %d, %d",
			what, g.Key, g.LastAccess.UnixNano(), g.Accesses, e.at, e.n)
	}
}

func (m *rkModel) checkHottest(t *testing.T, got []Ranked[int], n int, now int64) {
	t.Helper()
	ns := m.reportTime(now)
	rows := m.rows(ns)
	slices.SortFunc(rows, func(a, b rkModelRow) int { return cmp.Compare(b.s, a.s) })
	if want := min(n, len(rows)); len(got) != want {
		t.Fatalf("Hottest(%d) returned %d keys, want %d", n, len(got), want)
	}
	seen := map[int]bool{}
	for i, g := range got {
		if seen[g.Key] {
			t.Fatalf("Hottest: key %d twice", g.Key)
		}
		seen[g.Key] = true
		m.checkRow(t, "Hottest", g, ns)
		// The i-th score must be the i-th largest score (keys may differ
		// only among equal scores).
		if math.Abs(g.Score-rows[i].s) > rkTol {
			t.Fatalf("Hottest(%d)[%d] = key %d score %v, brute force has key %d score %v",
				n, i, g.Key, g.Score, rows[i].k, rows[i].s)
		}
	}
}

func (m *rkModel) checkColdest(t *testing.T, got []Ranked[int], n int, now int64, minIdle time.Duration, skip func(int) bool) {
	t.Helper()
	ns := m.reportTime(now)
	rows := m.rows(ns)
	slices.SortFunc(rows, func(a, b rkModelRow) int { return cmp.Compare(a.e.seq, b.e.seq) })
	var want []int
	for _, r := range rows {
		if len(want) == n || ns-r.e.at < int64(minIdle) {
			break
		}
		if r.e.parked || (skip != nil && skip(r.k)) {
			continue
		}
		want = append(want, r.k)
	}
	if len(got) != len(want) {
		t.Fatalf("Coldest(%d, idle %v) returned %d keys, want %d", n, minIdle, len(got), len(want))
	}
	for i, g := range got {
		if g.Key != want[i] {
			t.Fatalf("Coldest(%d, idle %v)[%d] = key %d, want %d", n, minIdle, i, g.Key, want[i])
		}
		m.checkRow(t, "Coldest", g, ns)
	}
}

// checkHistogram checks that got is a valid assignment of the model's
// keys to deciles given the documented 2^(1/512) tolerance.
func (m *rkModel) checkHistogram(t *testing.T, got [10]int64, now int64) {
	t.Helper()
	ns := m.reportTime(now)
	decile := func(s float64) int { return min(int(s/10), 9) }
	f := math.Exp2(1.0/512 + 1e-9)
	var sure, maybe [10]int64
	var total int64
	for _, r := range m.rows(ns) {
		lo, hi := decile(r.s/f), decile(r.s*f)
		if lo == hi {
			sure[lo]++
		}
		for d := lo; d <= hi; d++ {
			maybe[d]++
		}
	}
	for d := range 10 {
		total += got[d]
		if got[d] < sure[d] || got[d] > maybe[d] {
			t.Fatalf("Histogram decile %d = %d, want in [%d, %d] (got %v)", d, got[d], sure[d], maybe[d], got)
		}
	}
	if total != int64(len(m.m)) {
		t.Fatalf("Histogram total %d, want %d", total, len(m.m))
	}
}

// checkRankingInvariants verifies the internal structure: map and slab,
// LRU links and order, histogram counts and the candidate-floor
// invariant that makes Hottest exact.
func checkRankingInvariants[K comparable](t *testing.T, r *Ranking[K]) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	live, unparked := 0, 0
	for i, e := range r.ents {
		if e.flags&rkLive == 0 {
			continue
		}
		live++
		if e.flags&rkParked == 0 {
			unparked++
		}
		if s, ok := r.idx[e.key]; !ok || s != int32(i) {
			t.Fatalf("slot %d: key not mapped to it", i)
		}
		if e.flags&rkInC != 0 && e.flags&rkInD != 0 {
			t.Fatalf("slot %d in both candidate set and dirty list", i)
		}
		if r.binOf(&e) != histBin(r.lgOf(&e)) {
			t.Fatalf("slot %d: stored histogram bin %d, want %d", i, r.binOf(&e), histBin(r.lgOf(&e)))
		}
		if lg := r.lgOf(&e); e.flags&(rkInC|rkInD) == 0 && lg > r.floor {
			t.Fatalf("slot %d outside C and D has lg %v above floor %v", i, lg, r.floor)
		}
	}
	if live != len(r.idx) {
		t.Fatalf("%d live slots, %d keys", live, len(r.idx))
	}
	free := 0
	for s := r.free; s != rkNil; s = r.ents[s].next {
		free++
	}
	if free+live != len(r.ents) {
		t.Fatalf("free %d + live %d != slots %d", free, live, len(r.ents))
	}
	n, prev, last := 0, rkNil, int64(math.MaxInt64)
	for s := r.head; s != rkNil; s = r.ents[s].next {
		e := r.ents[s]
		if e.prev != prev || e.flags&rkLive == 0 || e.flags&rkParked != 0 {
			t.Fatalf("LRU list broken at slot %d", s)
		}
		if e.at > last {
			t.Fatalf("LRU list not in last-access order at slot %d", s)
		}
		last, prev = e.at, s
		n++
	}
	if prev != r.tail || n != unparked {
		t.Fatalf("LRU list: %d keys, tail %d; want %d keys, tail %d", n, prev, unparked, r.tail)
	}
	if !r.begun {
		return
	}
	want := map[int64]int64{}
	var below int64
	for _, e := range r.ents {
		if e.flags&rkLive == 0 {
			continue
		}
		if b := histBin(r.lgOf(&e)); b < r.hist.base {
			below++
		} else {
			want[b]++
		}
	}
	if below != r.hist.below {
		t.Fatalf("histogram below = %d, want %d", r.hist.below, below)
	}
	for x := r.hist.base; x < r.hist.base+histRing; x++ {
		if got := r.hist.bins[x&(histRing-1)]; got != want[x] {
			t.Fatalf("histogram bin %d = %d, want %d", x, got, want[x])
		}
		delete(want, x)
	}
	if len(want) != 0 {
		t.Fatalf("keys in bins outside the ring: %v", want)
	}
	if tc := r.halfLives(r.clock); float64(r.hist.base) > (tc+math.Log2(10))*histPerHL {
		t.Fatalf("histogram base %d above the score-10 bin at the clock", r.hist.base)
	}
}

func TestRankingConfig(t *testing.T) {
	for _, c := range []RankingConfig{
		{HalfLife: -time.Second},
		{Gain: -1},
		{Gain: MaxScore + 1},
		{Gain: math.NaN()},
	} {
		if _, err := NewRanking[int](c); !errors.Is(err, ErrConfig) {
			t.Errorf("NewRanking(%+v) error = %v, want ErrConfig", c, err)
		}
	}
	r := newRanking[int](t, RankingConfig{})
	if c := r.Config(); c.HalfLife != DefaultHalfLife || c.Gain != DefaultGain {
		t.Fatalf("defaults = %+v", c)
	}
	if got := r.Hottest(5, t0, nil); len(got) != 0 {
		t.Fatalf("empty Hottest = %v", got)
	}
	if got := r.Coldest(5, t0, 0, nil, nil); len(got) != 0 {
		t.Fatalf("empty Coldest = %v", got)
	}
	if h := r.Histogram(t0); h != [10]int64{} {
		t.Fatalf("empty Histogram = %v", h)
	}
}

func TestRankingScoreAndCap(t *testing.T) {
	r := newRanking[string](t, RankingConfig{})
	r.Touch("a", t0)
	if s, ok := r.Score("a", t0); !ok || !near(s, 25) {
		t.Fatalf("score after one touch = %v, %v", s, ok)
	}
	r.Touch("a", t0.Add(DefaultHalfLife))
	if s, _ := r.Score("a", t0.Add(DefaultHalfLife)); !near(s, 37.5) {
		t.Fatalf("score after decay and touch = %v, want 37.5", s)
	}
	for range 10 {
		r.Touch("b", t0.Add(DefaultHalfLife))
	}
	if s, _ := r.Score("b", t0.Add(DefaultHalfLife)); s != MaxScore {
		t.Fatalf("capped score = %v, want exactly %v", s, MaxScore)
	}
	// "c" is capped one half-life after "b": at any later time it is
	// twice as hot, although both were at the cap.
	for range 5 {
		r.Touch("c", t0.Add(2*DefaultHalfLife))
	}
	later := t0.Add(3 * DefaultHalfLife)
	got := r.Hottest(3, later, nil)
	if len(got) != 3 || got[0].Key != "c" || got[1].Key != "b" || got[2].Key != "a" {
		t.Fatalf("Hottest = %+v, want c, b, a", got)
	}
	if !near(got[0].Score, 50) || !near(got[1].Score, 25) || !near(got[2].Score, 37.5/4) {
		t.Fatalf("Hottest scores = %v %v %v, want 50 25 9.375", got[0].Score, got[1].Score, got[2].Score)
	}
	if got[1].Accesses != 10 || !got[1].LastAccess.Equal(t0.Add(DefaultHalfLife)) {
		t.Fatalf("b row = %+v", got[1])
	}
	if _, ok := r.Score("zzz", later); ok {
		t.Fatal("unknown key reported as tracked")
	}
	// A report time before the clock is evaluated at the clock.
	if s, _ := r.Score("c", t0); s != MaxScore {
		t.Fatalf("score before the clock = %v, want %v", s, MaxScore)
	}
}

// With non-decreasing times the Ranking's scores are Tracker's.
func TestRankingMatchesTracker(t *testing.T) {
	cfg := RankingConfig{HalfLife: 3 * time.Second, Gain: 17}
	r := newRanking[int](t, cfg)
	tr, _ := NewTracker[int](TrackerConfig{HalfLife: cfg.HalfLife, Gain: cfg.Gain})
	rng := rand.New(rand.NewPCG(7, 7))
	now := t0
	for range 20000 {
		now = now.Add(time.Duration(rng.Int64N(int64(200 * time.Millisecond))))
		k := int(rng.ExpFloat64() * 30)
		r.Touch(k, now)
		tr.Touch(k, now)
	}
	now = now.Add(time.Second)
	n := 0
	tr.Range(now, func(k int, want float64) bool {
		got, ok := r.Score(k, now)
		if !ok || math.Abs(got-want) > rkTol {
			t.Fatalf("key %d: Ranking %v, Tracker %v", k, got, want)
		}
		n++
		return true
	})
	if n != r.Len() {
		t.Fatalf("Tracker has %d keys, Ranking %d", n, r.Len())
	}
}

func TestRankingRemovePark(t *testing.T) {
	r := newRanking[int](t, RankingConfig{HalfLife: time.Second, Gain: 10})
	for k := range 6 {
		for range k + 1 {
			r.Touch(k, t0.Add(time.Duration(k)*time.Millisecond))
		}
	}
	now := t0.Add(time.Second)
	keys := func(rows []Ranked[int]) []int {
		var out []int
		for _, x := range rows {
			out = append(out, x.Key)
		}
		return out
	}
	if got := keys(r.Coldest(10, now, 0, nil, nil)); !slices.Equal(got, []int{0, 1, 2, 3, 4, 5}) {
		t.Fatalf("Coldest = %v", got)
	}
	// minIdle: keys 4 and 5 were touched less than 997 ms ago.
	if got := keys(r.Coldest(10, now, 997*time.Millisecond, nil, nil)); !slices.Equal(got, []int{0, 1, 2, 3}) {
		t.Fatalf("Coldest(minIdle) = %v", got)
	}
	odd := func(k int) bool { return k%2 == 1 }
	if got := keys(r.Coldest(2, now, 0, odd, nil)); !slices.Equal(got, []int{0, 2}) {
		t.Fatalf("Coldest(skip odd) = %v", got)
	}

	r.Remove(5)
	r.Remove(5)  // twice: no-op
	r.Remove(99) // unknown: no-op
	r.Park(0)
	r.Park(0)
	r.Park(98)
	if r.Len() != 5 {
		t.Fatalf("Len = %d, want 5", r.Len())
	}
	if got := keys(r.Hottest(10, now, nil)); !slices.Equal(got, []int{4, 3, 2, 1, 0}) {
		t.Fatalf("Hottest after Remove(5), Park(0) = %v (parked keys stay)", got)
	}
	if got := keys(r.Coldest(10, now, 0, nil, nil)); !slices.Equal(got, []int{1, 2, 3, 4}) {
		t.Fatalf("Coldest after Park(0) = %v", got)
	}
	if _, ok := r.Score(5, now); ok {
		t.Fatal("removed key still tracked")
	}
	if s, ok := r.Score(0, now); !ok || !near(s, 5) {
		t.Fatalf("parked key score = %v, %v; want 5", s, ok)
	}
	// Touch unparks to the most recent end; a removed key starts over.
	r.Touch(0, now)
	r.Touch(5, now)
	if got := keys(r.Coldest(10, now, 0, nil, nil)); !slices.Equal(got, []int{1, 2, 3, 4, 0, 5}) {
		t.Fatalf("Coldest after Touch(0), Touch(5) = %v", got)
	}
	if s, _ := r.Score(5, now); !near(s, 10) {
		t.Fatalf("re-added key score = %v, want 10", s)
	}
	r.Park(3)
	r.Remove(3) // removing a parked key
	r.Park(5)   // head of the list
	r.Park(1)   // tail of the list
	if got := keys(r.Coldest(10, now, 0, nil, nil)); !slices.Equal(got, []int{2, 4, 0}) {
		t.Fatalf("Coldest = %v", got)
	}
	checkRankingInvariants(t, r)
}

// TestRankingRandom drives a Ranking and the brute-force model with the
// same random operations (skewed keys, caps, decays, time jumps and
// out-of-order times, Removes of hot keys, Park) and compares every report
// with a brute-force scan of all keys.
func TestRankingRandom(t *testing.T) {
	for seed, cfg := range []RankingConfig{
		{HalfLife: time.Second, Gain: 25},
		{HalfLife: 10 * time.Second, Gain: 60},
		{HalfLife: 500 * time.Millisecond, Gain: 7.5},
		{HalfLife: time.Second, Gain: MaxScore},
		{HalfLife: 2 * time.Second, Gain: 0.01},
	} {
		rng := rand.New(rand.NewPCG(uint64(seed), 42))
		r := newRanking[int](t, cfg)
		m := newRKModel(cfg)
		const keys = 3000
		hl := int64(cfg.HalfLife)
		now := t0.UnixNano()
		reports := 0
		var buf []Ranked[int]
		for step := range 24000 {
			switch p := rng.IntN(1000); {
			case p < 900: // touch a skewed key
				now += rng.Int64N(hl / 50)
				ns := now
				if rng.IntN(20) == 0 {
					ns -= rng.Int64N(hl) // out of order: clamped to the clock
				}
				k := int(rng.ExpFloat64()*keys/10) % keys
				if rng.IntN(4) == 0 {
					k = rng.IntN(keys)
				}
				r.Touch(k, time.Unix(0, ns))
				m.touch(k, ns)
			case p < 925:
				k := rng.IntN(keys)
				r.Remove(k)
				delete(m.m, k)
			case p < 950:
				k := int(rng.ExpFloat64()*keys/10) % keys
				r.Park(k)
				if e := m.m[k]; e != nil {
					e.parked = true
				}
			case p < 953: // remove many of the hottest keys: forces rescans
				rep := r.Hottest(rng.IntN(400)+1, time.Unix(0, now), nil)
				for _, x := range rep {
					if rng.IntN(3) > 0 {
						r.Remove(x.Key)
						delete(m.m, x.Key)
					}
				}
			case p < 955:
				now += rng.Int64N(8 * hl) // a long quiet period
			case p < 985:
				now += rng.Int64N(hl / 50)
			default: // report
				reports++
				at := now + rng.Int64N(hl)
				if rng.IntN(10) == 0 {
					at = now - rng.Int64N(hl) // before the clock
				}
				n := rng.IntN(64) + 1
				if rng.IntN(20) == 0 {
					n = rng.IntN(1200) + 1
				}
				buf = r.Hottest(n, time.Unix(0, at), buf[:0])
				m.checkHottest(t, buf, n, at)
				idle := time.Duration(0)
				if rng.IntN(2) == 0 {
					idle = time.Duration(rng.Int64N(2 * hl))
				}
				var skip func(int) bool
				if rng.IntN(2) == 0 {
					d := rng.IntN(5) + 2
					skip = func(k int) bool { return k%d == 0 }
				}
				n = rng.IntN(300) + 1
				buf = r.Coldest(n, time.Unix(0, at), idle, skip, buf[:0])
				m.checkColdest(t, buf, n, at, idle, skip)
				if r.Len() != len(m.m) {
					t.Fatalf("Len = %d, want %d", r.Len(), len(m.m))
				}
				if reports%32 == 0 {
					checkRankingInvariants(t, r)
				}
				m.checkHistogram(t, r.Histogram(time.Unix(0, at)), at)
			}
			if step%5000 == 0 {
				checkRankingInvariants(t, r)
			}
		}
		checkRankingInvariants(t, r)
		t.Logf("config %+v: %d reports, %d full rescans, %d keys", cfg, reports, r.rescans, r.Len())
		if r.rescans*4 > uint64(reports) {
			t.Fatalf("%d full rescans for %d reports", r.rescans, reports)
		}
	}
}

// Without Removes, Hottest never scans all keys (the first report merges
// the keys touched so far, all of them dirty).
func TestRankingNoRescan(t *testing.T) {
	r := newRanking[int](t, RankingConfig{HalfLife: 10 * time.Second})
	rng := rand.New(rand.NewPCG(3, 3))
	const keys = 50000
	now := t0
	for k := range keys {
		r.Touch(k, now)
	}
	var buf []Ranked[int]
	for range 100 {
		for range 1000 {
			now = now.Add(time.Millisecond)
			r.Touch(int(rng.ExpFloat64()*1000)%keys, now)
			r.Touch(rng.IntN(keys), now)
		}
		buf = r.Hottest(64, now, buf[:0])
		buf = r.Hottest(16, now, buf[:0])
	}
	if r.rescans != 0 {
		t.Fatalf("%d full rescans, want 0", r.rescans)
	}
	r.mu.Lock()
	nd := len(r.dirty)
	r.mu.Unlock()
	if nd != 0 {
		t.Fatalf("dirty list holds %d keys after a report", nd)
	}
	checkRankingInvariants(t, r)
}

func TestRankingHistogram(t *testing.T) {
	// Gain 24: scores 24, 48, 72, 96 lie away from the decile boundaries.
	r := newRanking[int](t, RankingConfig{HalfLife: time.Second, Gain: 24})
	r.Touch(1, t0)
	r.Touch(2, t0)
	r.Touch(2, t0)
	for range 4 {
		r.Touch(3, t0)
	}
	if h := r.Histogram(t0); h != [10]int64{2: 1, 4: 1, 9: 1} {
		t.Fatalf("Histogram at t0 = %v", h)
	}
	// After 2 half-lives: 6, 12, 24.
	if h := r.Histogram(t0.Add(2 * time.Second)); h != [10]int64{0: 1, 1: 1, 2: 1} {
		t.Fatalf("Histogram after 2 half-lives = %v", h)
	}
	// Far later the ring slides: everything is below 10.
	late := t0.Add(time.Hour)
	r.Touch(4, late)
	if h := r.Histogram(late); h != [10]int64{0: 3, 2: 1} {
		t.Fatalf("Histogram an hour later = %v", h)
	}
	r.Remove(1)
	r.Remove(4)
	if h := r.Histogram(late); h != [10]int64{0: 2} {
		t.Fatalf("Histogram after Remove = %v", h)
	}
	checkRankingInvariants(t, r)
}

// bruteHottest returns the n largest scores at now over every key of r,
// from its slab (for checks where no external model exists).
func bruteHottest[K comparable](r *Ranking[K], n int, now time.Time) []float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	ns := max(now.UnixNano(), r.clock)
	var s []float64
	for _, e := range r.ents {
		if e.flags&rkLive != 0 {
			s = append(s, r.scoreAt(&e, ns))
		}
	}
	slices.SortFunc(s, func(a, b float64) int { return cmp.Compare(b, a) })
	return s[:min(n, len(s))]
}

func TestRankingConcurrent(t *testing.T) {
	r := newRanking[int](t, RankingConfig{HalfLife: 50 * time.Millisecond})
	var clock atomic.Int64
	clock.Store(t0.UnixNano())
	tick := func() time.Time { return time.Unix(0, clock.Add(int64(10*time.Microsecond))) }
	const keys = 5000
	var writers, reporter sync.WaitGroup
	var stop atomic.Bool
	for g := range 3 {
		writers.Add(1)
		go func() {
			defer writers.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for range 30000 {
				k := int(rng.ExpFloat64()*keys/20) % keys
				switch rng.IntN(50) {
				case 0:
					r.Remove(k)
				case 1:
					r.Park(k)
				default:
					r.Touch(k, tick())
				}
			}
		}()
	}
	reporter.Add(1)
	go func() {
		defer reporter.Done()
		var buf []Ranked[int]
		for !stop.Load() {
			now := time.Unix(0, clock.Load())
			buf = r.Hottest(32, now, buf[:0])
			for i := 1; i < len(buf); i++ {
				if buf[i].Score > buf[i-1].Score+rkTol {
					t.Errorf("Hottest not sorted: %v then %v", buf[i-1].Score, buf[i].Score)
					return
				}
			}
			buf = r.Coldest(64, now, 0, func(k int) bool { return k%3 == 0 }, buf[:0])
			r.Histogram(now)
			r.Score(1, now)
			r.Len()
		}
	}()
	writers.Wait()
	stop.Store(true)
	reporter.Wait()
	checkRankingInvariants(t, r)
	now := time.Unix(0, clock.Load())
	got := r.Hottest(50, now, nil)
	want := bruteHottest(r, 50, now)
	if len(got) != len(want) {
		t.Fatalf("Hottest returned %d keys, want %d", len(got), len(want))
	}
	for i := range got {
		if math.Abs(got[i].Score-want[i]) > rkTol {
			t.Fatalf("Hottest[%d] score %v, brute force %v", i, got[i].Score, want[i])
		}
	}
}

// Many keys hover around the candidate floor (uniform touches with a
// short half-life; skewed touches with a long one, where frequency and
// recency mix). Every report is compared with a brute-force scan, which
// catches a floor that is too high or raised wrongly.
func TestRankingFloorChurn(t *testing.T) {
	for _, tc := range []struct {
		hl     time.Duration
		gain   float64
		skewed bool
	}{
		{time.Second, 3, false},
		{20 * time.Second, 3, true},
		{5 * time.Second, 1, true},
	} {
		r := newRanking[int](t, RankingConfig{HalfLife: tc.hl, Gain: tc.gain})
		rng := rand.New(rand.NewPCG(11, 5))
		const keys = 4000
		now := t0
		var buf []Ranked[int]
		for round := range 400 {
			for range 100 {
				now = now.Add(time.Duration(rng.Int64N(int64(2 * time.Millisecond))))
				k := rng.IntN(keys)
				if tc.skewed {
					k = int(rng.ExpFloat64()*keys/8) % keys
				}
				r.Touch(k, now)
			}
			if round%10 == 0 {
				checkRankingInvariants(t, r) // also checks floor before the merge
			}
			// n = 64 sets capN = 256; n = 256 then reports all of the
			// candidate set, down to the keys next to the floor.
			n := 64 + 192*(round%2)
			buf = r.Hottest(n, now, buf[:0])
			want := bruteHottest(r, n, now)
			if len(buf) != len(want) {
				t.Fatalf("%+v round %d: Hottest returned %d keys, want %d", tc, round, len(buf), len(want))
			}
			for i := range buf {
				if math.Abs(buf[i].Score-want[i]) > rkTol {
					t.Fatalf("%+v round %d: Hottest(%d)[%d] score %v, brute force %v",
						tc, round, n, i, buf[i].Score, want[i])
				}
			}
		}
		if r.rescans != 0 {
			t.Fatalf("%+v: %d full rescans, want 0", tc, r.rescans)
		}
		checkRankingInvariants(t, r)
	}
}
