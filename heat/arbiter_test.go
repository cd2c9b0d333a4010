package heat

import (
	"testing"
	"time"
)

func TestArbiterProtocol(t *testing.T) {
	p, err := NewArbiterPolicy[uint64](PolicyConfig{Capacity: 4}, func(k uint64) int { return int(k) })
	if err != nil {
		t.Fatal(err)
	}
	checkProtocol(t, p)
	if _, err := NewArbiterPolicy[uint64](PolicyConfig{}, nil); err == nil {
		t.Error("capacity 0 accepted")
	}
}

// TestArbiterFollowsBetter: on a cyclic scan of 2·C blocks (where the
// density expert learns the loop and decay gets next to nothing) the
// arbiter follows density.
func TestArbiterFollowsBetter(t *testing.T) {
	const c = 4096
	p, err := NewArbiterPolicy[uint64](PolicyConfig{Capacity: c}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r := loopHitRatio(p, c); r < 0.1 || p.Leader() != "density" {
		t.Errorf("loop hit ratio %.3f in the second half (want >= 0.1), leader %s", r, p.Leader())
	}
}

// TestShiftRank: a lowered OrderDecay rank makes a key the victim, a
// raised one saves it.
func TestShiftRank(t *testing.T) {
	p, err := NewPolicy[uint64](PolicyConfig{Capacity: 4})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(0, 0)
	for k := range uint64(2) {
		p.Access(k, Mix64(k), now)
		p.Insert(k, Mix64(k), now)
	}
	p.shiftRank(1, -1)
	if v, _ := p.Victim(); v != 1 {
		t.Fatalf("victim %d after lowering 1", v)
	}
	p.shiftRank(1, 2)
	if v, _ := p.Victim(); v != 0 {
		t.Fatalf("victim %d after raising 1", v)
	}
	p.shiftRank(7, 1) // not resident: no-op
}
