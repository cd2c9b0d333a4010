package workloads

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Params sizes a workload run and tells it what the file system under test
// promises. The zero value is valid: every zero field takes the default
// given in its comment (see Params.withDefaults).
type Params struct {
	// ObjectSize is the size in bytes of one KV object (one page file, one
	// _k or _v file, one slot). It must be a multiple of 4096. Default 1 MiB.
	ObjectSize int64
	// Objects is the number of distinct objects each workload creates per
	// rank (W1: pages of the key universe; W2/W3: keys per rank; W4: pages,
	// each a _k and a _v file; W5: slots per file). Default 24.
	Objects int
	// Ranks is the number of simulated rank processes (goroutine groups).
	// Default 2.
	Ranks int
	// Workers is the number of I/O goroutines per rank. Default 3.
	Workers int
	// Requests is the number of requests each rank replays (W1, W3).
	// Default 3*Objects.
	Requests int
	// Seed makes key choice and request order reproducible. Default 1.
	Seed int64
	// CapBytes is the logical capacity in bytes that the engines' evictors
	// and cleaners enforce on the bytes they hold. Default: half of the bytes
	// the workload would hold without eviction, so eviction always runs.
	CapBytes int64
	// SparseSize is the size in bytes of the HF3FS-style sparse slot file of
	// W5 (its slots are spread over it). Default 4 × Objects × ObjectSize.
	SparseSize int64

	// RequireODirect makes an O_DIRECT open or F_SETFL O_DIRECT that fails a
	// check failure. When false, the workload falls back to buffered I/O (as
	// LMCache and NIXL do) and notes it.
	RequireODirect bool
	// StrictDIO says the file system rejects misaligned O_DIRECT buffers,
	// offsets and lengths with EINVAL (ext4 on a block device). When false,
	// a misaligned O_DIRECT call may also succeed, but its data must then
	// read back exactly.
	StrictDIO bool
	// ExpectBsize4096 requires statvfs f_bsize == 4096 (the value that gates
	// LMCache's O_DIRECT path).
	ExpectBsize4096 bool
	// StatfsTracksUsage requires statvfs free space to fall by at least half
	// of the bytes written and rise by at least half of the bytes unlinked.
	// Leave it false where other processes share the file system or where
	// free space follows tier usage rather than the namespace (FUSE); the
	// consistency checks (f_bavail <= f_bfree <= f_blocks, f_bsize > 0) run
	// always.
	StatfsTracksUsage bool
	// AllowLoss accepts objects that vanish without being unlinked (ctxmemd
	// may drop a whole KV object): such an object is counted in Report.Lost,
	// not as a failure. Wrong or short bytes are failures regardless.
	AllowLoss bool
	// MaxMessages caps the failure messages kept in the error. Default 20.
	MaxMessages int
}

// withDefaults returns p with every zero field replaced by its default.
func (p Params) withDefaults() Params {
	if p.ObjectSize == 0 {
		p.ObjectSize = 1 << 20
	}
	if p.Objects == 0 {
		p.Objects = 24
	}
	if p.Ranks == 0 {
		p.Ranks = 2
	}
	if p.Workers == 0 {
		p.Workers = 3
	}
	if p.Requests == 0 {
		p.Requests = 3 * p.Objects
	}
	if p.Seed == 0 {
		p.Seed = 1
	}
	if p.SparseSize == 0 {
		p.SparseSize = 4 * int64(p.Objects) * p.ObjectSize
	}
	if p.MaxMessages == 0 {
		p.MaxMessages = 20
	}
	return p
}

// validate reports parameter errors that would make a run meaningless.
func (p Params) validate() error {
	switch {
	case p.ObjectSize <= 0 || p.ObjectSize%4096 != 0:
		return fmt.Errorf("workloads: ObjectSize %d is not a positive multiple of 4096", p.ObjectSize)
	case p.Objects < 4 || p.Ranks < 1 || p.Workers < 1 || p.Requests < 1:
		return fmt.Errorf("workloads: need Objects>=4, Ranks>=1, Workers>=1, Requests>=1 (got %d,%d,%d,%d)",
			p.Objects, p.Ranks, p.Workers, p.Requests)
	case p.SparseSize < int64(p.Objects)*p.ObjectSize:
		return fmt.Errorf("workloads: SparseSize %d smaller than Objects×ObjectSize", p.SparseSize)
	}
	return nil
}

// Report is what one workload run did and found. Counts are totals over all
// ranks and goroutines.
type Report struct {
	Workload      string            // "W1" … "W5"
	Ops           int64             // file-system calls issued (open, read, write, stat, rename, unlink, io_submit …)
	BytesWritten  int64             // payload bytes written (pattern bytes)
	BytesRead     int64             // payload bytes read and verified
	Hits          int64             // lookups that found a complete object
	Misses        int64             // lookups that found none
	Evicted       int64             // objects unlinked by an evictor or cleaner
	Lost          int64             // objects that vanished without an unlink (only with Params.AllowLoss)
	Checks        int64             // invariant checks evaluated
	CheckFailures int64             // invariant checks that failed
	Notes         map[string]string // observed facts: statvfs values, return codes of optional calls, fallbacks
	Elapsed       time.Duration     // wall time of the run
}

// String renders the report on one line, notes sorted by name.
func (r Report) String() string {
	keys := make([]string, 0, len(r.Notes))
	for k := range r.Notes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "%s: ops=%d written=%dB read=%dB hits=%d misses=%d evicted=%d lost=%d checks=%d failures=%d elapsed=%v",
		r.Workload, r.Ops, r.BytesWritten, r.BytesRead, r.Hits, r.Misses, r.Evicted, r.Lost, r.Checks, r.CheckFailures,
		r.Elapsed.Round(time.Millisecond))
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%s", k, r.Notes[k])
	}
	return b.String()
}
