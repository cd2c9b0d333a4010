package fusefs

import (
	"syscall"
	"time"
)

// Restores that respect a deadline (issue 14 item 2). An engine waiting on
// a slow restore is worse off than one that recomputes: with a namespace
// restore budget (Options.RestoreBudget), an open for reading (O_RDONLY,
// no O_TRUNC) of a file whose predicted restore time
// (Backend.RestoreEstimate: the per-tier moving average of block reads,
// summed over its blocks not in G2) exceeds the budget is answered ENOENT
// at once: the engine sees a miss and recomputes. The file is prestaged
// in the background, so the next open finds it in G2 and hits. The skip is
// counted as a KV lookup miss (lookups.go) and in RestoreSkips. stat(2)
// and directory listings still show the file; opens for writing are never
// skipped (an engine rewriting the file it missed gets it as usual).

// skipRestore reports whether the open of n with flags is answered as a
// miss, and if so starts its prestage and counts it.
func (f *fsys) skipRestore(n *node, flags uint32) bool {
	if f.opts.RestoreBudget == nil || n.ns == nil || flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0 {
		return false
	}
	budget := f.opts.RestoreBudget(n.ns.cfg.Name)
	if budget <= 0 {
		return false
	}
	est, _, err := f.be.RestoreEstimate(n.obj)
	if err != nil || est <= budget {
		return false
	}
	if err := f.be.Prestage(f.ctx, n.obj); err != nil {
		f.log.Debug("fusefs: prestage after a skipped restore", "object", n.obj, "err", err)
	}
	for _, c := range []*lookupCounts{&n.ns.lk, &f.lk} {
		c.skipped.Add(1)
		c.predictedNs.Add(int64(est))
		c.enoent.Add(1) // a miss, as the engine sees it
	}
	return true
}

// RestoreSkips are the opens a namespace answered as misses because their
// restore would have exceeded its budget (Options.RestoreBudget).
type RestoreSkips struct {
	// Skipped is how many; Predicted is the sum of their predicted
	// restore times.
	Skipped   int64         `json:"restore_skipped"`
	Predicted time.Duration `json:"restore_skipped_predicted_ns"`
}

// RestoreSkips returns the mount's total and, by namespace name, the
// namespaces' skipped restores since mount.
func (s *Server) RestoreSkips() (RestoreSkips, map[string]RestoreSkips) {
	f := s.fsys
	f.t.mu.RLock()
	nss := append([]*namespace(nil), f.nss...)
	f.t.mu.RUnlock()
	per := make(map[string]RestoreSkips, len(nss))
	for _, ns := range nss {
		per[ns.cfg.Name] = RestoreSkips{Skipped: ns.lk.skipped.Load(), Predicted: time.Duration(ns.lk.predictedNs.Load())}
	}
	return RestoreSkips{Skipped: f.lk.skipped.Load(), Predicted: time.Duration(f.lk.predictedNs.Load())}, per
}
