package heat

import (
	"math/rand/v2"
	"testing"
	"time"
)

func at(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }

func victim[K comparable](t *testing.T, l *LRU2[K]) K {
	t.Helper()
	k, ok := l.Victim()
	if !ok {
		t.Fatal("no victim")
	}
	return k
}

func TestLRU2Order(t *testing.T) {
	l := NewLRU2[string]()
	if _, ok := l.Victim(); ok {
		t.Fatal("empty LRU2 has a victim")
	}
	l.Touch("a", at(1))
	l.Touch("b", at(2))
	l.Touch("c", at(3))
	if v := victim(t, l); v != "a" {
		t.Fatalf("victim %q, want a (oldest single access)", v)
	}
	l.Touch("a", at(4)) // a now has two accesses: after every single one
	if v := victim(t, l); v != "b" {
		t.Fatalf("victim %q, want b", v)
	}
	l.Remove("b")
	if v := victim(t, l); v != "c" {
		t.Fatalf("victim %q, want c (single before double)", v)
	}
	l.Remove("c")
	// Penultimate order: x at 5; y at 6 and 7; x at 8 -> pen(x)=5 < pen(y)=6.
	l.Touch("x", at(5))
	l.Touch("y", at(6))
	l.Touch("y", at(7))
	l.Touch("x", at(8))
	l.Remove("a")
	if v := victim(t, l); v != "x" {
		t.Fatalf("victim %q, want x (older penultimate access)", v)
	}
	if l.Len() != 2 || !l.Contains("y") || l.Contains("a") {
		t.Fatalf("Len/Contains wrong")
	}
	if l.Remove("nope") {
		t.Fatal("Remove of absent key reported true")
	}
}

// TestLRU2MatchesModel checks the victim after every step of a random
// sequence against a brute-force LRU-2 over full access histories.
func TestLRU2MatchesModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	l := NewLRU2[int]()
	hist := map[int][]int{} // key -> access times (seconds), resident keys only
	for step := 1; step <= 5000; step++ {
		k := rng.IntN(200)
		if rng.IntN(10) == 0 {
			l.Remove(k)
			delete(hist, k)
		} else {
			l.Touch(k, at(step))
			hist[k] = append(hist[k], step)
		}
		if l.Len() != len(hist) {
			t.Fatalf("step %d: Len %d, model %d", step, l.Len(), len(hist))
		}
		if len(hist) == 0 {
			continue
		}
		// Model victim: once-accessed keys first by last access, then by
		// penultimate access. Times are distinct, so there are no ties.
		best, bestTwo, bestT := -1, true, 0
		for key, h := range hist {
			two := len(h) >= 2
			tm := h[len(h)-1]
			if two {
				tm = h[len(h)-2]
			}
			if best < 0 || (!two && bestTwo) || (two == bestTwo && tm < bestT) {
				best, bestTwo, bestT = key, two, tm
			}
		}
		if v := victim(t, l); v != best {
			t.Fatalf("step %d: victim %d, model %d", step, v, best)
		}
	}
}
