package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
)

// SyntheticShapes returns the reuse shapes Synthetic generates:
//
//	recency  conversations whose working set drifts: each request extends
//	         a recent conversation's prefix chain (new conversations keep
//	         arriving, old ones go quiet): LRU-friendly
//	scan     a small hot set of shared prompts interleaved with one-shot
//	         long prompts (scans) that are never seen again
//	zipf     requests for Zipf-distributed shared prefixes (system prompts,
//	         documents) of varied lengths: frequency-skewed
//	loop     a fixed cycle of prompts repeated in order, slightly larger
//	         than a mid-sized cache (LRU's worst case)
//	mix      phases of recency, zipf, scan and loop in turn (the workload
//	         changes under the policy)
func SyntheticShapes() []string { return []string{"recency", "scan", "zipf", "loop", "mix"} }

// synthRequests is the number of requests Synthetic generates.
const synthRequests = 20000

// Synthetic generates a deterministic request trace of the given shape (see
// SyntheticShapes) from seed, structured like the Mooncake trace: requests
// 100 ms apart, each a prefix chain of block ids (a block id names its
// whole prefix, so two requests share a block only if they share every
// block before it). The spec "SHAPE[,SEED]" is parsed by ParseSynthetic.
func Synthetic(shape string, seed uint64) (*Trace, error) {
	g := &synth{rng: rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15^seed)), t: &Trace{}}
	switch shape {
	case "recency":
		g.recency(synthRequests)
	case "scan":
		g.scan(synthRequests)
	case "zipf":
		g.zipf(synthRequests)
	case "loop":
		g.loop(synthRequests)
	case "mix":
		for range 2 {
			g.recency(synthRequests / 8)
			g.zipf(synthRequests / 8)
			g.scan(synthRequests / 8)
			g.loop(synthRequests / 8)
		}
	default:
		return nil, fmt.Errorf("%w: unknown synthetic shape %q (want %s)", ErrTrace, shape, strings.Join(SyntheticShapes(), ", "))
	}
	return g.t, nil
}

// ParseSynthetic parses "SHAPE[,SEED]" (seed default 1) and generates the
// trace.
func ParseSynthetic(spec string) (*Trace, error) {
	shape, s, ok := strings.Cut(spec, ",")
	seed := uint64(1)
	if ok {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: synthetic seed %q is not an unsigned integer", ErrTrace, s)
		}
		seed = n
	}
	return Synthetic(shape, seed)
}

type synth struct {
	rng    *rand.Rand
	t      *Trace
	next   uint64 // next fresh block id
	millis int64
	// chains are reusable prefix chains, per generator phase.
	convs  [][]uint64
	shared [][]uint64
	cycle  [][]uint64
}

// fresh returns n new block ids.
func (g *synth) fresh(n int) []uint64 {
	b := make([]uint64, n)
	for i := range b {
		g.next++
		b[i] = g.next
	}
	return b
}

func (g *synth) emit(chain []uint64) {
	g.millis += 100
	g.t.Requests++
	for j, b := range chain {
		g.t.Blocks = append(g.t.Blocks, b)
		g.t.Millis = append(g.t.Millis, g.millis)
		g.t.Depth = append(g.t.Depth, int32(j))
	}
}

// recency: a drifting set of conversations; each request continues one
// picked with a strong bias to the most recently active, appending a few
// blocks (the new turn) to its chain.
func (g *synth) recency(n int) {
	for range n {
		if len(g.convs) == 0 || g.rng.IntN(8) == 0 {
			g.convs = append(g.convs, g.fresh(2+g.rng.IntN(6)))
		}
		// Pick by recency rank: geometric from the most recent.
		i := len(g.convs) - 1
		for i > 0 && g.rng.IntN(4) != 0 {
			i--
		}
		c := append(g.convs[i], g.fresh(1+g.rng.IntN(3))...)
		if len(c) > 40 {
			c = c[:40:40]
		}
		g.convs = append(slices.Delete(g.convs, i, i+1), c)
		if len(g.convs) > 400 {
			g.convs = g.convs[1:]
		}
		g.emit(c)
	}
}

// scan: 60 hot shared prompts (8–24 blocks) referenced uniformly, each
// followed with probability 1/2 by a one-shot prompt of 50–150 new blocks.
func (g *synth) scan(n int) {
	hot := make([][]uint64, 60)
	for i := range hot {
		hot[i] = g.fresh(8 + g.rng.IntN(17))
	}
	for range n {
		if g.rng.IntN(2) == 0 {
			g.emit(g.fresh(50 + g.rng.IntN(101)))
			continue
		}
		h := hot[g.rng.IntN(len(hot))]
		g.emit(append(slices.Clip(h), g.fresh(g.rng.IntN(3))...))
	}
}

// zipf: 5,000 shared prefixes (4–32 blocks) picked Zipf(1.1); a request
// uses a prefix of the picked chain (a random cut) plus a few new blocks.
func (g *synth) zipf(n int) {
	if g.shared == nil {
		g.shared = make([][]uint64, 5000)
		for i := range g.shared {
			g.shared[i] = g.fresh(4 + g.rng.IntN(29))
		}
	}
	z := rand.NewZipf(g.rng, 1.1, 1, uint64(len(g.shared)-1))
	for range n {
		s := g.shared[z.Uint64()]
		cut := max(1, len(s)-g.rng.IntN(len(s)/2+1))
		g.emit(append(slices.Clip(s[:cut]), g.fresh(1+g.rng.IntN(4))...))
	}
}

// loop: 400 prompts of 10–30 blocks (about 8,000 distinct blocks)
// requested in the same cyclic order, with 1 request in 10 a one-shot.
func (g *synth) loop(n int) {
	if g.cycle == nil {
		g.cycle = make([][]uint64, 400)
		for i := range g.cycle {
			g.cycle[i] = g.fresh(10 + g.rng.IntN(21))
		}
	}
	for i := range n {
		if g.rng.IntN(10) == 0 {
			g.emit(g.fresh(5 + g.rng.IntN(20)))
			continue
		}
		g.emit(g.cycle[i%len(g.cycle)])
	}
}
