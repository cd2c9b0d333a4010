// Package replay replays a KV-cache request trace against a directory (a
// ctxmemd mount, or any directory for comparison): for every block of every
// request it reads the block's file when it exists (a hit, verified byte by
// byte against a pattern derived from the block id) and writes it when it
// does not (a miss: the prefill the engine would have to recompute). It is
// the library behind `ctxmemd replay`.
//
// The trace format is the Mooncake FAST '25 release's JSON lines
// (kvcache-ai/Mooncake, FAST25-release/traces, Apache-2.0): one object per
// request with timestamp (ms), input_length, output_length (tokens) and
// hash_ids (prefix-chained block ids).
package replay

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"

	"github.com/ctxmem/ctxmemd/traces"
)

// Request is one trace line.
type Request struct {
	// Timestamp is the arrival time in milliseconds from the trace start.
	Timestamp int64 `json:"timestamp"`
	// InputLength and OutputLength are token counts.
	InputLength  int `json:"input_length"`
	OutputLength int `json:"output_length"`
	// HashIDs are the request's KV block ids in prefix order.
	HashIDs []int64 `json:"hash_ids"`
}

// ReadTrace parses JSON lines from r (gzip-compressed or not: see
// traces.Decompress), skipping blank lines, and returns at most limit
// requests (limit <= 0: all) sorted by timestamp (stable, so equal
// timestamps keep file order). Errors name the line number.
func ReadTrace(r io.Reader, limit int) ([]Request, error) {
	r, err := traces.Decompress(r)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	var out []Request
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(trimSpace(b)) == 0 {
			continue
		}
		var q Request
		if err := json.Unmarshal(b, &q); err != nil {
			return nil, fmt.Errorf("replay: trace line %d: %w", line, err)
		}
		if q.Timestamp < 0 {
			return nil, fmt.Errorf("replay: trace line %d: negative timestamp %d", line, q.Timestamp)
		}
		out = append(out, q)
		if limit > 0 && len(out) >= limit {
			break
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("replay: trace line %d: %w", line+1, err)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Timestamp < out[j].Timestamp })
	return out, nil
}

// LoadTrace reads the trace file at path, plain or gzip-compressed; path ""
// reads the bundled Mooncake trace (package traces). See ReadTrace.
func LoadTrace(path string, limit int) ([]Request, error) {
	f, err := traces.Open(path)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	defer f.Close()
	return ReadTrace(f, limit)
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\r') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}
