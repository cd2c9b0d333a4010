package sim

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/ctxmem/ctxmemd/traces"
)

// ErrTrace is returned (wrapped) for a malformed trace.
var ErrTrace = errors.New("sim: malformed trace")

// Trace is a request trace flattened into block references.
type Trace struct {
	// Requests is the number of requests (lines) read.
	Requests int
	// Blocks holds every block reference in order: request by request,
	// each request's hash_ids in order.
	Blocks []uint64
	// Millis holds, per reference, its request's timestamp in
	// milliseconds from the start of the trace.
	Millis []int64
	// Depth holds, per reference, the block's position in its request's
	// hash_ids (0 = the first block of the prefix chain). It may be nil
	// (every depth 0).
	Depth []int32
}

// traceLine is one JSON line of a Mooncake-format trace; other fields
// (input_length, output_length) are ignored.
type traceLine struct {
	Timestamp *int64   `json:"timestamp"`
	HashIDs   []uint64 `json:"hash_ids"`
}

// Load reads a JSON-lines trace, plain or gzip-compressed (detected by the
// magic bytes: traces.Decompress), in the Mooncake format (FAST '25 release:
// one object per line with "timestamp" in ms and "hash_ids", the request's
// prefix-chained block ids). Blank lines are skipped. A line that is not
// valid JSON or lacks hash_ids is an error wrapping ErrTrace with its line
// number; a missing timestamp counts as the previous line's.
func Load(r io.Reader) (*Trace, error) {
	r, err := traces.Decompress(r)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTrace, err)
	}
	br := bufio.NewReaderSize(r, 1<<20)
	t := &Trace{}
	var ts int64
	for lineNo := 1; ; lineNo++ {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 && !blank(line) {
			var l traceLine
			if jerr := json.Unmarshal(line, &l); jerr != nil {
				return nil, fmt.Errorf("%w: line %d: %v", ErrTrace, lineNo, jerr)
			}
			if l.HashIDs == nil {
				return nil, fmt.Errorf("%w: line %d: no hash_ids", ErrTrace, lineNo)
			}
			if l.Timestamp != nil {
				ts = *l.Timestamp
			}
			t.Requests++
			for j, id := range l.HashIDs {
				t.Blocks = append(t.Blocks, id)
				t.Millis = append(t.Millis, ts)
				t.Depth = append(t.Depth, int32(min(j, math.MaxInt32)))
			}
		}
		if err == io.EOF {
			return t, nil
		}
		if err != nil {
			return nil, fmt.Errorf("sim: reading trace: %w", err)
		}
	}
}

func blank(b []byte) bool {
	for _, c := range b {
		if c != ' ' && c != '\t' && c != '\r' && c != '\n' {
			return false
		}
	}
	return true
}

// Distinct returns the number of distinct blocks in the trace.
func (t *Trace) Distinct() int {
	seen := make(map[uint64]struct{}, len(t.Blocks)/2)
	for _, b := range t.Blocks {
		seen[b] = struct{}{}
	}
	return len(seen)
}
