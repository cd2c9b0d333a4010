package workloads

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// run is the shared state of one workload run: counters, notes and failed
// checks. All methods are safe for concurrent use.
type run struct {
	name  string
	p     Params
	start time.Time
	// statfsWait bounds how long expectFreeMove re-samples a lazily
	// accounting file system before failing.
	statfsWait time.Duration

	ops, written, read, hits, misses, evicted, lost, checks, failures atomic.Int64

	mu    sync.Mutex
	msgs  []string
	notes map[string]string
}

func newRun(name string, p Params) *run {
	return &run{name: name, p: p, start: time.Now(), statfsWait: 5 * time.Second, notes: map[string]string{}}
}

// op counts n file-system calls.
func (r *run) op(n int) { r.ops.Add(int64(n)) }

// check counts one evaluated check; when ok is false it records a failure
// described by format/args and returns false.
func (r *run) check(ok bool, format string, args ...any) bool {
	r.checks.Add(1)
	if ok {
		return true
	}
	r.failf(format, args...)
	return false
}

// failf records one failed check.
func (r *run) failf(format string, args ...any) {
	r.failures.Add(1)
	msg := r.name + ": " + fmt.Sprintf(format, args...)
	r.mu.Lock()
	if len(r.msgs) < r.p.MaxMessages {
		r.msgs = append(r.msgs, msg)
	}
	r.mu.Unlock()
}

// note records an observed fact (last value wins).
func (r *run) note(key, format string, args ...any) {
	v := fmt.Sprintf(format, args...)
	r.mu.Lock()
	r.notes[key] = v
	r.mu.Unlock()
}

// noteOnce records an observed fact unless one is already recorded.
func (r *run) noteOnce(key, format string, args ...any) {
	r.mu.Lock()
	if _, ok := r.notes[key]; !ok {
		r.notes[key] = fmt.Sprintf(format, args...)
	}
	r.mu.Unlock()
}

// finish builds the report and the error: nil when no check failed and
// runErr is nil, otherwise an error listing the failure count and the
// recorded messages (and runErr, an error that stopped the run).
func (r *run) finish(runErr error) (Report, error) {
	r.mu.Lock()
	notes := make(map[string]string, len(r.notes))
	for k, v := range r.notes {
		notes[k] = v
	}
	msgs := append([]string(nil), r.msgs...)
	r.mu.Unlock()
	rep := Report{
		Workload: r.name, Ops: r.ops.Load(), BytesWritten: r.written.Load(), BytesRead: r.read.Load(),
		Hits: r.hits.Load(), Misses: r.misses.Load(), Evicted: r.evicted.Load(), Lost: r.lost.Load(),
		Checks: r.checks.Load(), CheckFailures: r.failures.Load(), Notes: notes, Elapsed: time.Since(r.start),
	}
	var errs []error
	if runErr != nil {
		errs = append(errs, fmt.Errorf("%s: run stopped: %w", r.name, runErr))
	}
	if rep.CheckFailures > 0 {
		errs = append(errs, fmt.Errorf("%s: %d of %d checks failed:\n  %s", r.name, rep.CheckFailures, rep.Checks,
			strings.Join(msgs, "\n  ")))
	}
	return rep, errors.Join(errs...)
}

// base is what every workload run holds: its checks and counters, the
// registry of object versions written, and its own directory.
type base struct {
	r    *run
	g    *registry
	root string
}

// runWorkload applies Params defaults, creates dir/sub and runs body with a
// fresh base; the Report is the run's whatever body returns.
func runWorkload(name, dir, sub string, p Params, body func(base) error) (Report, error) {
	p = p.withDefaults()
	if err := p.validate(); err != nil {
		return Report{Workload: name}, err
	}
	b := base{r: newRun(name, p), g: newRegistry(), root: filepath.Join(dir, sub)}
	if err := os.MkdirAll(b.root, 0o755); err != nil {
		return b.r.finish(err)
	}
	return b.r.finish(body(b))
}
