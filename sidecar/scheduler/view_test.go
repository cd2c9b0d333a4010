package scheduler

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/ctxmem/ctxmemd/internal/testenv"
	"github.com/ctxmem/ctxmemd/sidecar/msg"
)

// TestViewMatchesModel drives the compact view and a plain nested-map
// model (the layout it replaced) with the same random holds and unholds
// and checks that lookups, holders, counts and directory listings agree.
func TestViewMatchesModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	v := newView()
	model := map[objKey]map[string]uint64{}
	hosts := []string{"a", "b", "c"}
	paths := func() string {
		return fmt.Sprintf("s%d/d%d/f%d", rng.IntN(3), rng.IntN(3), rng.IntN(8))
	}
	refs := map[objKey]nameRef{}
	for step := 0; step < 20000; step++ {
		k := objKey{[]string{"ns", "other"}[rng.IntN(2)], paths()}
		if rng.IntN(5) == 0 {
			k.path = fmt.Sprintf("top%d", rng.IntN(4))
		}
		h := hosts[rng.IntN(len(hosts))]
		if rng.IntN(2) == 0 {
			id := rng.Uint64()
			refs[k] = v.hold(v.hostIndex(h), k.ns, k.path, id)
			if model[k] == nil {
				model[k] = map[string]uint64{}
			}
			model[k][h] = id
		} else if slot, ok := v.lookup(k.ns, k.path); ok {
			v.unhold(v.hostIndex(h), slot)
			delete(model[k], h)
			if len(model[k]) == 0 {
				delete(model, k)
				if _, live := v.resolve(refs[k]); live {
					t.Fatalf("step %d: a removed name's reference still resolves", step)
				}
			}
		}
		if v.n != len(model) {
			t.Fatalf("step %d: %d names, model %d", step, v.n, len(model))
		}
		if step%97 != 0 {
			continue
		}
		dirs := map[objKey]map[objKey]bool{}
		for mk, hs := range model {
			slot, ok := v.lookup(mk.ns, mk.path)
			if !ok || v.name(slot) != mk || v.count(slot) != len(hs) {
				t.Fatalf("step %d: %v: lookup %v, count %d, model %v", step, mk, ok, v.count(slot), hs)
			}
			got := map[string]uint64{}
			for h, id := range v.holders(slot) {
				got[h] = id
			}
			if fmt.Sprint(got) != fmt.Sprint(hs) {
				t.Fatalf("step %d: %v holders %v, model %v", step, mk, got, hs)
			}
			for d := parentDir(mk.path); d != ""; d = parentDir(d) {
				dk := objKey{mk.ns, d}
				if dirs[dk] == nil {
					dirs[dk] = map[objKey]bool{}
				}
				dirs[dk][mk] = true
			}
		}
		for dk, want := range dirs {
			got := map[objKey]bool{}
			for k := range v.under(dk.ns, dk.path) {
				got[k] = true
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("step %d: under %v: %v, model %v", step, dk, got, want)
			}
		}
		if len(v.dirs) != len(dirs) {
			t.Fatalf("step %d: %d directories indexed, model %d (empty ones kept?)", step, len(v.dirs), len(dirs))
		}
	}
	for range v.under("ns", "") {
		t.Fatal("the namespace root lists names")
	}
}

// TestViewBytesPerName bounds the heap the view costs per name held by one
// host (issue 17): 100,000 names of 100 directories, as a host's stored
// events build them (the decoded path string is kept, the namespace
// interned), with the host's byID entry. The layout it replaced (nested
// maps keyed by (namespace, path), a set per ancestor directory) cost
// about 680 B per name in the daemon's heap profile.
func TestViewBytesPerName(t *testing.T) {
	const n = 100_000
	paths := make([]string, n)
	for i := range paths {
		paths[i] = fmt.Sprintf("sess%03d/layer/f%06d.kv", i%100, i)
	}
	v := newView()
	hv := &hostView{idx: v.hostIndex("host-a"), byID: map[uint64]nameRef{}}
	// Path strings are excluded: they are the caller's (decoded events).
	testenv.HeapPer(t, n, "scheduler view per name", 200, func() any {
		for i, p := range paths {
			hv.byID[uint64(i)] = v.hold(hv.idx, "default", p, uint64(i))
		}
		return []any{v, hv, paths}
	})
}

// TestFollowerHasNoViewYet: a replica that never led (no view) answers
// Stats and Holders, as it did with nil maps.
func TestFollowerHasNoViewYet(t *testing.T) {
	s, err := New(Config{Names: msg.For("unit")})
	if err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.ViewObjects != 0 || st.Leader {
		t.Fatalf("stats of a follower: %+v", st)
	}
	if h := s.Holders("ns", "f"); len(h) != 0 {
		t.Fatalf("holders from a follower: %v", h)
	}
}
