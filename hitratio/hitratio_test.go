package hitratio

import "testing"

func TestRatios(t *testing.T) {
	c := Counts{Hits: map[string]int64{G2: 6, G3: 2, G4: 1, Unknown: 1}, Misses: 10}
	if c.Lookups() != 20 || c.HitTotal() != 10 {
		t.Fatalf("lookups %d hits %d", c.Lookups(), c.HitTotal())
	}
	if g, a := c.ServedFromG2(), c.FoundInAnyTier(); g != 0.3 || a != 0.5 {
		t.Fatalf("ratios %v %v", g, a)
	}
	if (Counts{}).ServedFromG2() != 0 || (Counts{}).FoundInAnyTier() != 0 {
		t.Fatal("no lookups must be 0")
	}
	s := c.Add(Counts{Hits: map[string]int64{G2: 1}, Misses: 1})
	if s.Hits[G2] != 7 || s.Misses != 11 || c.Hits[G2] != 6 {
		t.Fatalf("Add %+v (c %+v)", s, c)
	}
}

func TestSlowestTier(t *testing.T) {
	for in, want := range map[string]string{
		"": Unknown, "  ": Unknown, "G2": G2, "G2*3": G2, "G2*3 G4": G4, "G4 G2": G4,
		"G3 G3.5*2 G2": G35, "hole*4": G2, "hole G3": G3, "G2 hole": G2, "G9 G4": "G9",
	} {
		if got := SlowestTier(in); got != want {
			t.Errorf("SlowestTier(%q) = %q, want %q", in, got, want)
		}
	}
}
