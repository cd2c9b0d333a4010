package tiering

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/ctxmem/ctxmemd/internal/testenv"
)

// TestBlockStateBytesAtRest bounds what a file's block states cost at rest
// (issue 17): 100,000 objects of one block each, clean below G2, as
// recovery or write-back leaves them. The map layout with the write-back
// fields inline cost ~270 B per one-block file (a 112 B blockState and a
// one-entry map).
func TestBlockStateBytesAtRest(t *testing.T) {
	const n = 100_000
	objs := make([]blockMap, n)
	testenv.HeapPer(t, n, fmt.Sprintf("one-block file's block state at rest (plus the %d B blockMap in the object)",
		unsafe.Sizeof(blockMap{})), 80, func() any {
		for i := range objs {
			objs[i].set(0, &blockState{in: tiersOf(tiG3), version: uint64(i), cleanVer: uint64(i)})
		}
		return objs
	})
}

// TestBlockMapMatchesMap drives a blockMap and a Go map with the same
// random sets and deletes (dense runs, then sparse indexes that switch it
// to its map) and checks get, len and all, including deletes and sets made
// during a walk.
func TestBlockMapMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for round := 0; round < 200; round++ {
		var bm blockMap
		model := map[uint32]*blockState{}
		span := uint32(4 + rng.IntN(40))
		if round%5 == 0 {
			span = 1 << 20 // sparse: goes to the map
		}
		for step := 0; step < 300; step++ {
			idx := uint32(rng.IntN(int(span)))
			if rng.IntN(3) > 0 {
				b := &blockState{version: uint64(step)}
				bm.set(idx, b)
				model[idx] = b
			} else {
				bm.del(idx)
				delete(model, idx)
			}
			if bm.len() != len(model) {
				t.Fatalf("round %d step %d: len %d, model %d", round, step, bm.len(), len(model))
			}
			if got := bm.get(idx); got != model[idx] {
				t.Fatalf("round %d step %d: get(%d) %p, model %p", round, step, idx, got, model[idx])
			}
		}
		seen := map[uint32]bool{}
		for idx, b := range bm.all() {
			if seen[idx] || model[idx] != b {
				t.Fatalf("round %d: walk yields %d twice or a wrong state", round, idx)
			}
			seen[idx] = true
		}
		if len(seen) != len(model) {
			t.Fatalf("round %d: walk yields %d states, model %d", round, len(seen), len(model))
		}
		// Deleting what is yielded, and setting a far index mid-walk
		// (the map takes over): every state present throughout is
		// yielded once.
		present := map[uint32]bool{}
		for idx := range model {
			present[idx] = true
		}
		seen = map[uint32]bool{}
		far := uint32(1 << 30)
		for idx := range bm.all() {
			if seen[idx] {
				t.Fatalf("round %d: %d yielded twice", round, idx)
			}
			seen[idx] = true
			if len(seen) == 2 {
				bm.set(far, &blockState{})
			}
			if idx != far {
				bm.del(idx)
			}
		}
		for idx := range present {
			if !seen[idx] {
				t.Fatalf("round %d: %d not yielded after a set during the walk", round, idx)
			}
		}
	}
}
