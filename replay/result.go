package replay

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/ctxmem/ctxmemd/hitratio"
)

// Tier names counted in Result.HitsByTier (the ctxmemd tiers plus
// TierUnknown).
func countedTiers() []string { return []string{"G2", "G3", "G3.5", "G4", TierUnknown} }

// Result is a replay's outcome. Ratios are 0–1; a hit is a block whose file
// existed (at once, or within Options.RetryMissing) and read back complete
// and correct; a miss is a block that had to be written. Blocks =
// BlockHits + BlockMisses + VerifyFailures (+ blocks skipped by
// cancellation). The totals are the sums of the Hosts rows.
type Result struct {
	Requests int64 `json:"requests"`
	// RequestHits counts requests all of whose blocks hit.
	RequestHits     int64   `json:"request_hits"`
	RequestHitRatio float64 `json:"request_hit_ratio"`
	Blocks          int64   `json:"blocks"`
	BlockHits       int64   `json:"block_hits"`
	BlockMisses     int64   `json:"block_misses"`
	BlockHitRatio   float64 `json:"block_hit_ratio"`
	// RetryHits counts the hits (included in BlockHits) whose file was
	// absent at first and appeared while the miss waited up to
	// RetryMissingS; 0 when waiting is off.
	RetryHits int64 `json:"retry_hits"`
	// RetryWaitS is the total time misses spent waiting, in seconds.
	RetryWaitS float64 `json:"retry_wait_s"`
	// RetryMissingS is Options.RetryMissing in seconds (0: off).
	RetryMissingS float64 `json:"retry_missing_s"`
	// G2HitRatio ("served from G2") and AnyTierHitRatio ("found in any
	// tier", equal to BlockHitRatio) are the hit ratios of package
	// hitratio over the Blocks lookups: HitsByTier["G2"] / Blocks and
	// BlockHits / Blocks. A fresh daemon that only this replay uses
	// reports the same two numbers in ctxmemd status and ctxmem_hit_ratio.
	G2HitRatio      float64 `json:"g2_hit_ratio"`
	AnyTierHitRatio float64 `json:"any_tier_hit_ratio"`
	// PrefixHits counts the hits that lead their request: every block
	// before the request's first miss. An engine's prefix cache can use
	// only those (a block after a miss is recomputed anyway, as its
	// attention depends on the missing one); PrefixHitRatio is PrefixHits
	// / Blocks.
	PrefixHits     int64   `json:"prefix_hits"`
	PrefixHitRatio float64 `json:"prefix_hit_ratio"`
	// TokensPerBlock (Options.TokensPerBlock) and TokensHit = PrefixHits
	// × TokensPerBlock: the prompt tokens whose KV was not recomputed.
	TokensPerBlock int   `json:"tokens_per_block"`
	TokensHit      int64 `json:"tokens_hit"`
	// PrefillUsPerToken (Options.PrefillUsPerToken) and RecomputeAvoidedS
	// = TokensHit × PrefillUsPerToken, in seconds of prefill (0 when the
	// cost is unknown).
	PrefillUsPerToken float64 `json:"prefill_us_per_token"`
	RecomputeAvoidedS float64 `json:"recompute_avoided_s"`
	// ByteHitRatio is verified bytes read over bytes requested
	// (Blocks × BlockBytes); with fixed-size block files it equals
	// BlockHitRatio.
	ByteHitRatio float64 `json:"byte_hit_ratio"`
	// HitsByTier counts hits by the tier named first in the file's
	// user.ctxmem.tier xattr before the read: keys "G2", "G3", "G3.5",
	// "G4", "unknown" (always present) and any other name the daemon
	// reports.
	HitsByTier     map[string]int64 `json:"hits_by_tier"`
	BytesWritten   int64            `json:"bytes_written"`
	BytesRead      int64            `json:"bytes_read"`
	VerifyFailures int64            `json:"verify_failures"`
	// WriteErrors counts misses whose write or rename failed.
	WriteErrors int64 `json:"write_errors"`
	// ReadErrors counts hits whose open or read failed with an error (an
	// I/O error, or the mount gone after the daemon died): no bytes were
	// served, so they are not verification failures (wrong, short or long
	// bytes).
	ReadErrors int64 `json:"read_errors"`
	// ReadLatency percentiles of open+read+close per hit block, µs.
	ReadLatencyP50us float64 `json:"read_latency_p50_us"`
	ReadLatencyP99us float64 `json:"read_latency_p99_us"`
	// MiBPerSec is (BytesRead + BytesWritten) / Elapsed in MiB/s.
	MiBPerSec  float64 `json:"mib_per_s"`
	ElapsedS   float64 `json:"elapsed_s"`
	BlockBytes int     `json:"block_bytes"`
	Layout     string  `json:"layout"`
	// Mount is the mount directory; with several hosts, their mounts
	// joined by commas (Hosts[i].Mount has each one exactly).
	Mount string `json:"mount"`
	// Spread is the routing rule of requests to hosts ("rr" or "hash").
	Spread string `json:"spread"`
	// HashBlocks is how many leading block ids the hash spread hashes.
	HashBlocks int `json:"hash_blocks"`
	// Hosts has one row per mount, in the order given (one row for a
	// single-mount replay).
	Hosts []HostResult `json:"hosts"`
}

// HostResult is one host's (one mount's) share of a replay. Counts mean
// the same as Result's; BlockHitRatio is BlockHits / Blocks (0 for none).
type HostResult struct {
	// Host is the index of the mount in Options.Mounts, from 0.
	Host           int     `json:"host"`
	Mount          string  `json:"mount"`
	Requests       int64   `json:"requests"`
	RequestHits    int64   `json:"request_hits"`
	Blocks         int64   `json:"blocks"`
	BlockHits      int64   `json:"block_hits"`
	BlockMisses    int64   `json:"block_misses"`
	BlockHitRatio  float64 `json:"block_hit_ratio"`
	RetryHits      int64   `json:"retry_hits"`
	RetryWaitS     float64 `json:"retry_wait_s"`
	VerifyFailures int64   `json:"verify_failures"`
	WriteErrors    int64   `json:"write_errors"`
	ReadErrors     int64   `json:"read_errors"`
	BytesRead      int64   `json:"bytes_read"`
	BytesWritten   int64   `json:"bytes_written"`
}

// counts are one host's counters while a replay runs (times in ns).
type counts struct {
	requests, requestHits, blocks, hits, misses, retryHits int64
	prefixHits                                             int64
	verifyFailures, writeErrors, bytesRead, bytesWritten   int64
	readErrors, retryWaitNs                                int64
}

func (c *counts) add(o counts) {
	c.requests += o.requests
	c.requestHits += o.requestHits
	c.blocks += o.blocks
	c.hits += o.hits
	c.misses += o.misses
	c.retryHits += o.retryHits
	c.prefixHits += o.prefixHits
	c.verifyFailures += o.verifyFailures
	c.writeErrors += o.writeErrors
	c.readErrors += o.readErrors
	c.bytesRead += o.bytesRead
	c.bytesWritten += o.bytesWritten
	c.retryWaitNs += o.retryWaitNs
}

func (c counts) host(i int, mount string) HostResult {
	h := HostResult{Host: i, Mount: mount, Requests: c.requests, RequestHits: c.requestHits, Blocks: c.blocks,
		BlockHits: c.hits, BlockMisses: c.misses, RetryHits: c.retryHits, RetryWaitS: float64(c.retryWaitNs) / 1e9,
		VerifyFailures: c.verifyFailures, WriteErrors: c.writeErrors, ReadErrors: c.readErrors,
		BytesRead: c.bytesRead, BytesWritten: c.bytesWritten}
	if h.Blocks > 0 {
		h.BlockHitRatio = float64(h.BlockHits) / float64(h.Blocks)
	}
	return h
}

// setTotals copies the summed counters c into r's totals.
func (r *Result) setTotals(c counts) {
	r.Requests, r.RequestHits, r.Blocks = c.requests, c.requestHits, c.blocks
	r.BlockHits, r.BlockMisses, r.RetryHits = c.hits, c.misses, c.retryHits
	r.PrefixHits = c.prefixHits
	r.VerifyFailures, r.WriteErrors, r.ReadErrors = c.verifyFailures, c.writeErrors, c.readErrors
	r.BytesRead, r.BytesWritten = c.bytesRead, c.bytesWritten
	r.RetryWaitS = float64(c.retryWaitNs) / 1e9
}

// percentileUs returns the q-quantile (0–1, nearest rank) of sorted
// durations in ns, in µs; 0 for none.
func percentileUs(sorted []int64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	i = min(max(i, 0), len(sorted)-1)
	return float64(sorted[i]) / 1e3
}

func (r *Result) finish(lat []int64, elapsed time.Duration) {
	slices.Sort(lat)
	r.ReadLatencyP50us = percentileUs(lat, 0.50)
	r.ReadLatencyP99us = percentileUs(lat, 0.99)
	r.ElapsedS = elapsed.Seconds()
	if r.Requests > 0 {
		r.RequestHitRatio = float64(r.RequestHits) / float64(r.Requests)
	}
	if r.Blocks > 0 {
		r.BlockHitRatio = float64(r.BlockHits) / float64(r.Blocks)
		r.AnyTierHitRatio = r.BlockHitRatio
		r.G2HitRatio = float64(r.HitsByTier[hitratio.G2]) / float64(r.Blocks)
		r.ByteHitRatio = float64(r.BlockHits*int64(r.BlockBytes)) / float64(r.Blocks*int64(r.BlockBytes))
		r.PrefixHitRatio = float64(r.PrefixHits) / float64(r.Blocks)
	}
	r.TokensHit = r.PrefixHits * int64(r.TokensPerBlock)
	r.RecomputeAvoidedS = float64(r.TokensHit) * r.PrefillUsPerToken / 1e6
	if r.ElapsedS > 0 {
		r.MiBPerSec = float64(r.BytesRead+r.BytesWritten) / (1 << 20) / r.ElapsedS
	}
}

// WriteTable prints the result as a two-column human table.
func (r Result) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	gib := func(n int64) string { return fmt.Sprintf("%.3f GiB", float64(n)/(1<<30)) }
	rows := [][2]string{
		{"requests", fmt.Sprintf("%d (%d all-hit, %.2f%%)", r.Requests, r.RequestHits, 100*r.RequestHitRatio)},
		{"blocks", fmt.Sprintf("%d (%d hits, %d misses, %d B each, layout %s)", r.Blocks, r.BlockHits, r.BlockMisses, r.BlockBytes, r.Layout)},
		{"hit ratio", fmt.Sprintf("%s %.4f, %s %.4f (of %d lookups)", hitratio.LabelG2, r.G2HitRatio,
			hitratio.LabelAny, r.AnyTierHitRatio, r.Blocks)},
		{"prefix hits", fmt.Sprintf("%d blocks, ratio %.4f (hits before their request's first miss: what a prefix cache uses)",
			r.PrefixHits, r.PrefixHitRatio)},
		{"tokens not recomputed", fmt.Sprintf("%d (%d per block)", r.TokensHit, r.TokensPerBlock)},
	}
	if r.PrefillUsPerToken > 0 {
		rows = append(rows, [2]string{"prefill avoided", fmt.Sprintf("%.1f s at %g µs/token", r.RecomputeAvoidedS, r.PrefillUsPerToken)})
	}
	for _, t := range countedTiers() {
		rows = append(rows, [2]string{"hits " + t, fmt.Sprint(r.HitsByTier[t])})
	}
	var extra []string
	for t := range r.HitsByTier {
		if !slices.Contains(countedTiers(), t) {
			extra = append(extra, t)
		}
	}
	slices.Sort(extra)
	for _, t := range extra {
		rows = append(rows, [2]string{"hits " + t, fmt.Sprint(r.HitsByTier[t])})
	}
	rows = append(rows,
		[2]string{"written", gib(r.BytesWritten)},
		[2]string{"read", gib(r.BytesRead)},
		[2]string{"throughput", fmt.Sprintf("%.1f MiB/s over %.2f s", r.MiBPerSec, r.ElapsedS)},
		[2]string{"read latency p50", fmt.Sprintf("%.1f µs", r.ReadLatencyP50us)},
		[2]string{"read latency p99", fmt.Sprintf("%.1f µs", r.ReadLatencyP99us)},
		[2]string{"write errors", fmt.Sprint(r.WriteErrors)},
		[2]string{"read errors", fmt.Sprint(r.ReadErrors)},
		[2]string{"verification failures", fmt.Sprint(r.VerifyFailures)},
	)
	if r.RetryMissingS > 0 {
		rows = append(rows, [2]string{"retry-missing hits", fmt.Sprintf("%d (waited up to %gs each, %.2f s in all)",
			r.RetryHits, r.RetryMissingS, r.RetryWaitS)})
	}
	for _, row := range rows {
		fmt.Fprintf(tw, "%s\t%s\n", row[0], row[1])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Hosts) < 2 {
		return nil
	}
	spread := r.Spread
	if spread == string(SpreadHash) {
		spread = fmt.Sprintf("%s of the first %d block ids", spread, r.HashBlocks)
	}
	fmt.Fprintf(w, "\nper host (spread %s):\n", spread)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "host\trequests\tblock reads\thits\tmisses\thit ratio\tretry hits\tverify failures\twrite errors\t\tmount\n")
	for _, h := range r.Hosts {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%.4f\t%d\t%d\t%d\t\t%s\n", h.Host, h.Requests, h.Blocks, h.BlockHits,
			h.BlockMisses, h.BlockHitRatio, h.RetryHits, h.VerifyFailures, h.WriteErrors, h.Mount)
	}
	return tw.Flush()
}
