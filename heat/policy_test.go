package heat

import (
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

func newPolicy[K comparable](t *testing.T, cfg PolicyConfig) *Policy[K] {
	t.Helper()
	p, err := NewPolicy[K](cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// ref is one reference as the core makes it: Access, then Insert on a miss
// (free room assumed).
func ref(p *Policy[int], k int, now time.Time) bool {
	h := Mix64(uint64(k))
	if p.Access(k, h, now) {
		return true
	}
	p.Insert(k, h, now)
	return false
}

func pvictim[K comparable](t *testing.T, p *Policy[K]) K {
	t.Helper()
	k, ok := p.Victim()
	if !ok {
		t.Fatal("no victim")
	}
	return k
}

func TestPolicyConfigErrors(t *testing.T) {
	for _, cfg := range []PolicyConfig{
		{},
		{Capacity: 10, Order: 9},
		{Capacity: 10, HalfLife: -1},
		{Capacity: 10, SampleFactor: -1},
		{Capacity: 10, ReuseMinCount: -1},
	} {
		if _, err := NewPolicy[int](cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("NewPolicy(%+v) err = %v, want ErrConfig", cfg, err)
		}
	}
	p := newPolicy[int](t, PolicyConfig{Capacity: 10})
	c := p.Config()
	if c.Order != OrderDecay || c.HalfLife != DefaultPolicyHalfLife ||
		c.SampleFactor != DefaultPolicySampleFactor || c.ReuseMinCount != DefaultReuseMinCount {
		t.Fatalf("defaults not filled: %+v", c)
	}
}

func TestPolicyResidency(t *testing.T) {
	for _, o := range []Order{OrderDecay, OrderLRU2, OrderLRU} {
		t.Run(o.String(), func(t *testing.T) {
			p := newPolicy[int](t, PolicyConfig{Capacity: 16, Order: o})
			if _, ok := p.Victim(); ok {
				t.Fatal("empty policy has a victim")
			}
			if ref(p, 1, at(1)) {
				t.Fatal("first reference hit")
			}
			if !ref(p, 1, at(2)) || !p.Contains(1) || p.Len() != 1 {
				t.Fatal("second reference missed")
			}
			p.Insert(1, Mix64(1), at(3)) // no-op for a resident key
			if p.Len() != 1 {
				t.Fatal("Insert duplicated a key")
			}
			if !p.Remove(1) || p.Remove(1) || p.Contains(1) || p.Len() != 0 {
				t.Fatal("Remove")
			}
			if p.Access(1, Mix64(1), at(4)) {
				t.Fatal("removed key hit")
			}
		})
	}
}

func TestPolicyDecayOrder(t *testing.T) {
	p := newPolicy[int](t, PolicyConfig{Capacity: 1024, HalfLife: time.Minute, NoAdmission: true})
	min := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	// Key 1: four references at t0 (count 4). Key 2: one at t0+1m.
	for range 4 {
		ref(p, 1, min(0))
	}
	ref(p, 2, min(1))
	if v := pvictim(t, p); v != 2 {
		t.Fatalf("victim %d: at 1m key 1 has 2 refs' worth, key 2 has 1", v)
	}
	// Key 3: one reference at t0+3m; key 1 has decayed to 4/8 = 0.5 < 1.
	ref(p, 3, min(3))
	p.Remove(2)
	if v := pvictim(t, p); v != 1 {
		t.Fatalf("victim %d: key 1 decayed to 0.5, key 3 is 1", v)
	}
	// Another reference to key 1 at 3m: 0.5+1 = 1.5 > 1.
	ref(p, 1, min(3))
	if v := pvictim(t, p); v != 3 {
		t.Fatalf("victim %d after refreshing key 1", v)
	}
}

// TestPolicyDecayMatchesModel compares the decay order with decayed counts
// computed directly (sum of 2^-(now-t_i)/H over each key's references).
// Keys are never re-inserted after removal, so every key enters with a
// count of 1.
func TestPolicyDecayMatchesModel(t *testing.T) {
	const H = time.Minute
	p := newPolicy[int](t, PolicyConfig{Capacity: 1 << 12, HalfLife: H, NoAdmission: true})
	rng := rand.New(rand.NewPCG(3, 4))
	refs := map[int][]time.Time{}
	gone := map[int]bool{}
	now := t0
	for step := range 3000 {
		now = now.Add(time.Duration(rng.IntN(20)) * time.Second)
		k := rng.IntN(150)
		if gone[k] {
			continue
		}
		if step%7 == 0 && len(refs) > 0 {
			v := pvictim(t, p)
			// The victim must have the minimal decayed count (ties within 1e-9).
			count := func(k int) float64 {
				s := 0.0
				for _, tm := range refs[k] {
					s += math.Exp2(-float64(now.Sub(tm)) / float64(H))
				}
				return s
			}
			cv := count(v)
			for k := range refs {
				if c := count(k); c < cv-1e-9 {
					t.Fatalf("step %d: victim %d has count %.6f but key %d has %.6f", step, v, cv, k, c)
				}
			}
			p.Remove(v)
			delete(refs, v)
			gone[v] = true
			continue
		}
		ref(p, k, now)
		refs[k] = append(refs[k], now)
	}
}

// TestPolicyLRUMatchesModel checks OrderLRU against a recency list.
func TestPolicyLRUMatchesModel(t *testing.T) {
	p := newPolicy[int](t, PolicyConfig{Capacity: 64, Order: OrderLRU})
	rng := rand.New(rand.NewPCG(5, 6))
	last := map[int]int{}
	for step := 1; step <= 4000; step++ {
		k := rng.IntN(100)
		ref(p, k, at(step))
		last[k] = step
		if len(last) > 50 {
			v := pvictim(t, p)
			for key, s := range last {
				if s < last[v] {
					t.Fatalf("step %d: victim %d (last %d) but %d is older (%d)", step, v, last[v], key, s)
				}
			}
			p.Remove(v)
			delete(last, v)
		}
	}
}

func TestPolicyLRU2MatchesLRU2(t *testing.T) {
	p := newPolicy[int](t, PolicyConfig{Capacity: 64, Order: OrderLRU2})
	l := NewLRU2[int]()
	rng := rand.New(rand.NewPCG(8, 9))
	for step := 1; step <= 4000; step++ {
		k := rng.IntN(100)
		ref(p, k, at(step))
		l.Touch(k, at(step))
		if l.Len() > 50 {
			v1, v2 := pvictim(t, p), victim(t, l)
			if v1 != v2 {
				t.Fatalf("step %d: policy victim %d, LRU2 victim %d", step, v1, v2)
			}
			p.Remove(v1)
			l.Remove(v2)
		}
	}
}

func TestPolicyShouldAdmit(t *testing.T) {
	p := newPolicy[int](t, PolicyConfig{Capacity: 1024, HalfLife: time.Minute})
	if !p.ShouldAdmit(Mix64(99), at(0)) {
		t.Fatal("empty policy rejects")
	}
	ref(p, 1, at(0))
	// A new key has the same count (1) as the fresh victim: rejected.
	h2 := Mix64(2)
	p.Access(2, h2, at(0))
	if p.ShouldAdmit(h2, at(0)) {
		t.Fatal("tie admitted")
	}
	// A key referenced 3 times (not resident) beats it.
	h3 := Mix64(3)
	for range 3 {
		p.Access(3, h3, at(0))
	}
	if !p.ShouldAdmit(h3, at(0)) {
		t.Fatal("frequent candidate rejected")
	}
	// Once the victim has decayed below 1, any referenced key beats it.
	if !p.ShouldAdmit(h2, at(90)) {
		t.Fatal("candidate rejected against a decayed victim")
	}
	// TinyLFU admission for the other orders.
	q := newPolicy[int](t, PolicyConfig{Capacity: 1024, Order: OrderLRU2})
	ref(q, 1, at(0))
	q.Access(2, h2, at(1))
	if q.ShouldAdmit(h2, at(1)) {
		t.Fatal("lru2: tie admitted")
	}
	for range 3 {
		q.Access(3, h3, at(1))
	}
	if !q.ShouldAdmit(h3, at(1)) {
		t.Fatal("lru2: frequent candidate rejected")
	}
	na := newPolicy[int](t, PolicyConfig{Capacity: 1024, NoAdmission: true})
	ref(na, 1, at(0))
	ref(na, 1, at(0))
	if !na.ShouldAdmit(Mix64(7), at(0)) {
		t.Fatal("NoAdmission rejected")
	}
}

func TestPolicyPredictReuse(t *testing.T) {
	p := newPolicy[int](t, PolicyConfig{Capacity: 1024, ReuseMinCount: 3})
	h := Mix64(5)
	for i := 1; i <= 3; i++ {
		if p.PredictReuse(h) {
			t.Fatalf("predicted reuse after %d references", i-1)
		}
		p.Access(5, h, at(i))
		if p.Estimate(h) != i {
			t.Fatalf("Estimate = %d, want %d", p.Estimate(h), i)
		}
	}
	if !p.PredictReuse(h) {
		t.Fatal("no reuse predicted after 3 references")
	}
}

func TestPolicyConcurrent(t *testing.T) {
	const capacity = 200
	p := newPolicy[int](t, PolicyConfig{Capacity: capacity})
	var mu sync.Mutex // the core's own budget lock
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for i := range 3000 {
				k := rng.IntN(1000)
				h, now := Mix64(uint64(k)), at(i)
				if p.Access(k, h, now) {
					continue
				}
				mu.Lock()
				if p.Len() >= capacity && p.ShouldAdmit(h, now) {
					if v, ok := p.Victim(); ok {
						p.Remove(v)
					}
				}
				if p.Len() < capacity {
					p.Insert(k, h, now)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if n := p.Len(); n > capacity || n < capacity/2 {
		t.Fatalf("Len = %d", n)
	}
}
