package tiering

import (
	"errors"
	"testing"
	"time"
)

// TestPlacementPolicies: every Config.Policy name gives a placement that
// keeps and evicts blocks; an unknown name is ErrInvalid.
func TestPlacementPolicies(t *testing.T) {
	for _, name := range []string{"", "decay", "adaptive", "density", "arbiter"} {
		pl, err := newPlacement(Config{G2Bytes: 64 << 20, Policy: name})
		if err != nil {
			t.Fatalf("%q: %v", name, err)
		}
		now := time.Now()
		for i := range uint32(3) {
			pl.access(bref{id: 1, idx: i}, true, now)
		}
		if !pl.policy.Contains(bref{id: 1, idx: 2}) {
			t.Errorf("%q: accessed evictable block not resident", name)
		}
		n := 0
		for _, ok := pl.victim(); ok; _, ok = pl.victim() {
			n++
		}
		if n != 3 {
			t.Errorf("%q: %d victims, want 3", name, n)
		}
	}
	if _, err := newPlacement(Config{G2Bytes: 64 << 20, Policy: "lfu"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("unknown policy: %v", err)
	}
}
