package tiering

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// walkUsage is what Usage counts, found by walking Objects.
func walkUsage(s *Store) []Usage {
	m := map[usageKey]*Usage{}
	for _, o := range s.Objects() {
		k := usageKey{o.Namespace, o.Kind}
		u := m[k]
		if u == nil {
			u = &Usage{Namespace: o.Namespace, Kind: o.Kind}
			m[k] = u
		}
		u.Objects++
		u.Bytes += o.Size
	}
	var out []Usage
	for _, u := range m {
		out = append(out, *u)
	}
	slices.SortFunc(out, func(a, b Usage) int {
		if a.Namespace != b.Namespace {
			if a.Namespace < b.Namespace {
				return -1
			}
			return 1
		}
		if a.Kind < b.Kind {
			return -1
		} else if a.Kind > b.Kind {
			return 1
		}
		return 0
	})
	return out
}

// TestUsageMatchesAWalk: Usage, kept as counters where objects come, go
// and change size, equals a walk of Objects after each of 500 random
// creates, writes past the end, truncates (up, down, to 0), passthrough
// writes taken in, and deletes over two namespaces and two kinds, and
// again after a restart (recovery) and the deletion of everything.
func TestUsageMatchesAWalk(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	g3 := newMemTier("G3", 0)
	open := func() *Store {
		s, err := Open(ctx, Config{DataDir: dir, G2Bytes: 64 << 20, G3: g3, FlushWorkers: 2})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	rng := rand.New(rand.NewPCG(3, 3))
	var ids []ObjectID
	check := func(what string) {
		t.Helper()
		if got, want := s.Usage(), walkUsage(s); !slices.Equal(got, want) {
			t.Fatalf("%s: Usage = %+v; a walk of Objects gives %+v", what, got, want)
		}
	}
	for step := range 500 {
		switch op := rng.IntN(10); {
		case op < 2 || len(ids) == 0:
			id, err := s.Create([]string{"a", "b"}[rng.IntN(2)], 4096, []string{"file", "other"}[rng.IntN(2)])
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		case op < 5:
			id := ids[rng.IntN(len(ids))]
			if _, err := s.WriteAt(ctx, id, make([]byte, 1+rng.IntN(9000)), int64(rng.IntN(20000))); err != nil {
				t.Fatal(err)
			}
		case op < 7:
			if err := s.Truncate(ctx, ids[rng.IntN(len(ids))], int64(rng.IntN(3)*rng.IntN(30000))); err != nil {
				t.Fatal(err)
			}
		case op == 7:
			id := ids[rng.IntN(len(ids))]
			pt, err := s.OpenPassthrough(ctx, id, true)
			if err != nil {
				break
			}
			if _, err := pt.File.WriteAt(make([]byte, 100), int64(rng.IntN(40000))); err != nil {
				t.Fatal(err)
			}
			if err := s.ClosePassthrough(id, true); err != nil {
				t.Fatal(err)
			}
			pt.File.Close()
		default:
			i := rng.IntN(len(ids))
			if err := s.Delete(ctx, ids[i]); err != nil {
				t.Fatal(err)
			}
			ids = slices.Delete(ids, i, i+1)
		}
		check(fmt.Sprintf("step %d", step))
	}
	if len(s.Usage()) == 0 {
		t.Fatal("no object left to count: the walk proved nothing")
	}
	for _, id := range ids {
		if err := s.Flush(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open()
	defer s.Close()
	check("after a restart")
	for _, id := range ids {
		if err := s.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if u := s.Usage(); len(u) != 0 {
		t.Fatalf("after deleting every object, Usage = %+v", u)
	}
}
