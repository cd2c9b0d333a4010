package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
)

// ReplayResult is the part of `ctxmemd replay --json` the tests read (the
// JSON keys of the replay package's Result).
type ReplayResult struct {
	Requests       int64            `json:"requests"`
	Blocks         int64            `json:"blocks"`
	BlockHits      int64            `json:"block_hits"`
	BlockMisses    int64            `json:"block_misses"`
	VerifyFailures int64            `json:"verify_failures"`
	WriteErrors    int64            `json:"write_errors"`
	ReadErrors     int64            `json:"read_errors"`
	BytesWritten   int64            `json:"bytes_written"`
	BytesRead      int64            `json:"bytes_read"`
	HitsByTier     map[string]int64 `json:"hits_by_tier"`
	BlockHitRatio  float64          `json:"block_hit_ratio"`
	G2HitRatio     float64          `json:"g2_hit_ratio"`
	AnyTierRatio   float64          `json:"any_tier_hit_ratio"`
	RetryHits      int64            `json:"retry_hits"`
	MiBPerSec      float64          `json:"mib_per_s"`
	ElapsedS       float64          `json:"elapsed_s"`
}

// Replay exit codes of ctxmemd (cmd/ctxmemd documentation).
const (
	ExitOK          = 0
	ExitVerify      = 4 // verification failures
	ExitWriteErrors = 5 // some misses could not be written, or some hits read
	ExitInterrupted = 130
)

// Replay runs `bin replay --json args...` and decodes its result. It
// returns the result, the exit code and stderr. The error is non-nil when
// the command could not run or printed no decodable result (a run that
// ended with exit code 4 or 5 still decodes: judge the counters).
func Replay(ctx context.Context, bin string, args ...string) (ReplayResult, int, string, error) {
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, append([]string{"replay", "--json"}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		return ReplayResult{}, -1, errb.String(), fmt.Errorf("ctxmemd replay: %w", err)
	}
	var res ReplayResult
	if jerr := json.Unmarshal(bytes.TrimSpace(out.Bytes()), &res); jerr != nil {
		return res, code, errb.String(), fmt.Errorf("ctxmemd replay exited %d with no JSON result (%v): stdout %q", code, jerr, out.String())
	}
	return res, code, errb.String(), nil
}
