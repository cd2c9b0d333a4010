package heat

import "math/bits"

// DefaultSampleFactor is W/C, the TinyLFU sample size W (increments
// between halvings) in multiples of the cache capacity C, used when
// NewSketch is given no sample size: 10, as in Caffeine's TinyLFU.
const DefaultSampleFactor = 10

// maxCount is the ceiling of a 4-bit counter.
const maxCount = 15

// Mix64 scrambles a 64-bit value into a well-distributed 64-bit hash (the
// SplitMix64 finalizer: G. Steele, D. Lea, C. Flood, "Fast splittable
// pseudorandom number generators", OOPSLA 2014). Use it to turn integer
// block ids into the hashes the Sketch and Policy take.
func Mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Sketch is TinyLFU's approximate frequency histogram (G. Einziger,
// R. Friedman, B. Manes, "TinyLFU: A Highly Efficient Cache Admission
// Policy", ACM Transactions on Storage 13(4), 2017):
//
//   - a count-min sketch of depth 4 with 4-bit counters (at most 15), 16
//     counters packed per 64-bit word, updated conservatively (only the
//     minimal counters of an item are incremented);
//   - a doorkeeper Bloom filter (3 bits in one 64-bit word) in front of it: an
//     item's first reference in a period only sets its doorkeeper bits, so
//     one-time items never reach the counters;
//   - aging by periodic halving ("reset"): after W increments every counter
//     is halved, the doorkeeper is cleared and the increment count halved.
//
// Estimate is therefore in [0, 16]: recent references, with older periods
// weighted 1/2, 1/4, .... Keys are given as 64-bit hashes (see Mix64).
// A Sketch is not safe for concurrent use.
type Sketch struct {
	table     []uint64 // 16 4-bit counters per word
	cmask     uint64   // counters-1 (a power of two minus one)
	door      []uint64 // doorkeeper bits
	dmask     uint64   // doorkeeper bits-1
	sample    int      // W
	additions int
	resets    int
}

// NewSketch returns a sketch sized for a cache of capacity items (values
// below 1 count as 1): 16·2^⌈log2 capacity⌉ counters (at least 128; 8
// bytes per 16 counters, about 8 bytes per cached item) and a doorkeeper
// of at least 4·W bits. sample is W, the number of increments between
// halvings; sample <= 0 means DefaultSampleFactor·capacity.
func NewSketch(capacity, sample int) *Sketch {
	capacity = max(capacity, 1)
	if sample <= 0 {
		sample = DefaultSampleFactor * capacity
	}
	words := max(nextPow2(capacity), 8)
	dbits := max(nextPow2(4*sample), 64)
	return &Sketch{
		table:  make([]uint64, words),
		cmask:  uint64(words*16 - 1),
		door:   make([]uint64, dbits/64),
		dmask:  uint64(dbits - 1),
		sample: sample,
	}
}

func nextPow2(n int) int {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len(uint(n-1))
}

// Sample returns W, the number of increments between halvings.
func (s *Sketch) Sample() int { return s.sample }

// Resets returns how many halvings have happened.
func (s *Sketch) Resets() int { return s.resets }

// Increment records one reference of the item with hash h.
func (s *Sketch) Increment(h uint64) {
	s.additions++
	if s.doorSet(h) {
		s.incrementCounters(h)
	}
	if s.additions >= s.sample {
		s.reset()
	}
}

// Estimate returns the item's estimated recent reference count, in
// [0, 16]: the count-min estimate plus one if the doorkeeper holds it.
func (s *Sketch) Estimate(h uint64) int {
	n := s.counterMin(h)
	if s.doorHas(h) {
		n++
	}
	return n
}

// Admit is TinyLFU's admission test: it reports whether the candidate
// (hash) is estimated to be referenced more often than the victim that
// admitting it would evict. Ties reject the candidate, as in the paper.
func (s *Sketch) Admit(candidate, victim uint64) bool {
	return s.Estimate(candidate) > s.Estimate(victim)
}

// counters returns the 4 counter indexes of hash h. In the style of
// Caffeine's FrequencySketch, all 4 lie in one aligned group of 8 words
// (64 bytes, one cache line), one counter in each of 4 distinct words of
// that group; the group, the words and the nibbles come from disjoint bits
// of one mixed hash.
func (s *Sketch) counters(h uint64) (c [4]uint64) {
	x := Mix64(h)
	base := (x << 4) & s.cmask &^ (8*16 - 1) // first counter of the group
	for i := range c {
		word := uint64(2*i) + (x>>(32+i))&1
		nib := (x >> (40 + 4*i)) & 15
		c[i] = base + word*16 + nib
	}
	return c
}

func (s *Sketch) get(c uint64) int {
	return int(s.table[c>>4] >> ((c & 15) * 4) & 15)
}

func (s *Sketch) counterMin(h uint64) int {
	m := maxCount
	for _, c := range s.counters(h) {
		m = min(m, s.get(c))
	}
	return m
}

func (s *Sketch) incrementCounters(h uint64) {
	cs := s.counters(h)
	m := maxCount
	for _, c := range cs {
		m = min(m, s.get(c))
	}
	if m == maxCount {
		return
	}
	for _, c := range cs {
		if s.get(c) == m { // conservative update
			s.table[c>>4] += 1 << ((c & 15) * 4)
		}
	}
}

// doorBits returns the doorkeeper bit positions of h: a blocked Bloom
// filter, all 3 bits in one 64-bit word (one cache miss per lookup).
func (s *Sketch) doorBits(h uint64) (b [3]uint64) {
	x := Mix64(h ^ 0x9e3779b97f4a7c15)
	word := (x << 6) & s.dmask &^ 63
	for i := range b {
		b[i] = word + (x>>(40+6*i))&63
	}
	return b
}

func (s *Sketch) doorHas(h uint64) bool {
	for _, b := range s.doorBits(h) {
		if s.door[b>>6]&(1<<(b&63)) == 0 {
			return false
		}
	}
	return true
}

// doorSet adds h to the doorkeeper and reports whether it was already there.
func (s *Sketch) doorSet(h uint64) bool {
	had := true
	for _, b := range s.doorBits(h) {
		w, bit := b>>6, uint64(1)<<(b&63)
		if s.door[w]&bit == 0 {
			had = false
			s.door[w] |= bit
		}
	}
	return had
}

// reset halves every counter and the increment count and clears the
// doorkeeper (TinyLFU's "reset" operation).
func (s *Sketch) reset() {
	for i, w := range s.table {
		s.table[i] = (w >> 1) & 0x7777777777777777
	}
	clear(s.door)
	s.additions /= 2
	s.resets++
}
