package heat

import (
	"math/rand/v2"
	"testing"
)

func TestSketchCounts(t *testing.T) {
	s := NewSketch(1024, 1<<20)
	a, b := Mix64(1), Mix64(2)
	if s.Estimate(a) != 0 {
		t.Fatal("fresh sketch estimates non-zero")
	}
	s.Increment(a) // doorkeeper only
	if got := s.Estimate(a); got != 1 {
		t.Fatalf("after 1 increment: %d, want 1", got)
	}
	for i := 2; i <= 10; i++ {
		s.Increment(a)
		if got := s.Estimate(a); got != i {
			t.Fatalf("after %d increments: %d", i, got)
		}
	}
	for range 30 {
		s.Increment(a)
	}
	if got := s.Estimate(a); got != 16 {
		t.Fatalf("saturated estimate %d, want 16 (15 + doorkeeper)", got)
	}
	s.Increment(b)
	if !s.Admit(a, b) || s.Admit(b, a) || s.Admit(a, a) {
		t.Fatal("Admit: want more-frequent candidate admitted, ties rejected")
	}
}

func TestSketchReset(t *testing.T) {
	const w = 100
	s := NewSketch(64, w)
	if s.Sample() != w {
		t.Fatalf("Sample = %d", s.Sample())
	}
	a := Mix64(42)
	for range 10 { // doorkeeper + 9 counts
		s.Increment(a)
	}
	for i := uint64(0); s.Resets() == 0; i++ {
		s.Increment(Mix64(1000 + i))
	}
	if s.Resets() != 1 {
		t.Fatalf("Resets = %d", s.Resets())
	}
	// 9 halves to 4; the doorkeeper is cleared.
	if got := s.Estimate(a); got != 4 {
		t.Fatalf("after reset: %d, want 4", got)
	}
	// The increment count was halved: the next reset comes W/2 later.
	for i := range w/2 - 1 {
		s.Increment(Mix64(5000 + uint64(i)))
	}
	if s.Resets() != 1 {
		t.Fatal("reset came early")
	}
	s.Increment(Mix64(9999))
	if s.Resets() != 2 {
		t.Fatal("second reset did not come after W/2 increments")
	}
}

// TestSketchNeverUnderestimates: without resets, a count-min sketch with
// conservative update never underestimates (up to saturation), and on a
// skewed stream its average overestimate stays small.
func TestSketchNeverUnderestimates(t *testing.T) {
	const keys = 4000
	s := NewSketch(1000, 1<<30)
	rng := rand.New(rand.NewPCG(1, 2))
	z := rand.NewZipf(rng, 1.1, 1, keys-1)
	truth := make([]int, keys)
	for range 20000 {
		k := z.Uint64()
		truth[k]++
		s.Increment(Mix64(k))
	}
	over, n := 0, 0
	for k, c := range truth {
		e := s.Estimate(Mix64(uint64(k)))
		if want := min(c, 16); e < want {
			t.Fatalf("key %d: estimate %d < true %d", k, e, c)
		}
		if c > 0 && c < 16 {
			over += e - c
			n++
		}
	}
	if avg := float64(over) / float64(n); avg > 0.5 {
		t.Fatalf("average overestimate %.2f, want <= 0.5", avg)
	}
}

func TestMix64Spreads(t *testing.T) {
	// Consecutive ids must not share low bits (the sketch masks them).
	seen := map[uint64]bool{}
	for i := range uint64(1024) {
		seen[Mix64(i)&1023] = true
	}
	if len(seen) < 600 {
		t.Fatalf("Mix64 low 10 bits take only %d of 1024 values over 1024 ids", len(seen))
	}
}
