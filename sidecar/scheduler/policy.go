package scheduler

import (
	"context"
	"time"

	"github.com/ctxmem/ctxmemd/sidecar/bus"
	"github.com/ctxmem/ctxmemd/sidecar/msg"
)

// onReport records a host's report and applies the placement policies to
// it: cold private objects are sunk to G4 after the grace period, and a
// host whose G2 or G3 is close to its high watermark has its coldest
// objects demoted (G2) or sunk (G3) before its local evictor must act.
func (s *Scheduler) onReport(ctx context.Context, res *bus.Resources, r *msg.Report) {
	s.mu.Lock()
	s.stats.Reports++
	hv := s.hostLocked(r.Host, r.Boot)
	hv.last = r
	for _, list := range [][]msg.Object{r.Hot, r.Cold} {
		for _, o := range list {
			s.holdLocked(hv, o.Namespace, o.Path, o.ID)
		}
	}
	var cmds []*msg.Command
	// A report that waited in the stream (no leader for a while) still
	// updates the view, but is too old to decide on.
	if age := time.Since(time.Unix(0, r.Time)); age < staleReport+2*time.Duration(r.Interval)*time.Millisecond {
		cmds = s.decideLocked(r)
		if r.Pool != nil {
			cmds = append(cmds, s.poolLocked(time.Now())...)
		}
	}
	s.mu.Unlock()
	for _, c := range cmds {
		s.send(ctx, res, c)
	}
}

// staleReport: reports older than this (plus two intervals) are not acted on.
const staleReport = 5 * time.Second

// tierOf returns the named tier of a report.
func tierOf(r *msg.Report, name string) (msg.Tier, bool) {
	for _, t := range r.Tiers {
		if t.Name == name {
			return t, true
		}
	}
	return msg.Tier{}, false
}

// decideLocked returns the commands report r calls for. s.mu held.
func (s *Scheduler) decideLocked(r *msg.Report) []*msg.Command {
	var out []*msg.Command
	budget := s.cfg.MaxCommandsPerReport
	g4, hasG4 := tierOf(r, "G4")
	hasG4 = hasG4 && !g4.Degraded
	chosen := map[uint64]bool{}
	add := func(op string, o msg.Object, why string, epoch int64) {
		if budget == 0 || chosen[o.ID] {
			return
		}
		id := msg.CommandID(op, r.Host, r.Boot, o.ID, epoch)
		if _, pending := s.sent[id]; pending {
			return
		}
		chosen[o.ID] = true
		budget--
		out = append(out, &msg.Command{ID: id, Host: r.Host, Op: op, Namespace: o.Namespace, Path: o.Path,
			Object: o.ID, Boot: r.Boot, Reason: why})
	}
	// Capacity pressure first: it is the urgent one. The epoch (the
	// report's minute) lets the same object be demoted again later.
	epoch := r.Time / int64(time.Minute)
	if g2, ok := tierOf(r, "G2"); ok && g2.Capacity > 0 && g2.High > 0 {
		limit := (g2.High - s.cfg.PressureMargin) * float64(g2.Capacity)
		over := float64(g2.Used) - g2.Low*float64(g2.Capacity)
		if float64(g2.Used) > limit {
			for _, o := range r.Cold {
				if over <= 0 {
					break
				}
				if o.Where&msg.InG2 != 0 && !o.Pinned {
					add(msg.OpDemote, o, "G2 near its high watermark", epoch)
					over -= float64(o.Size)
				}
			}
		}
	}
	if g3, ok := tierOf(r, "G3"); ok && hasG4 && g3.Capacity > 0 {
		high := g3.High
		if high == 0 {
			high = 0.9
		}
		low := g3.Low
		if low == 0 {
			low = 0.75
		}
		if float64(g3.Used) > (high-s.cfg.PressureMargin)*float64(g3.Capacity) {
			over := float64(g3.Used) - low*float64(g3.Capacity)
			for _, o := range r.Cold {
				if over <= 0 {
					break
				}
				if o.Where&msg.InG3 != 0 && !o.Pinned && s.privateLocked(o) {
					add(msg.OpSink, o, "G3 near its high watermark", epoch)
					over -= float64(o.Size)
				}
			}
		}
	}
	// Cold private objects go to G4 after the grace period.
	if hasG4 {
		grace := s.cfg.Grace.Milliseconds()
		for _, o := range r.Cold {
			if float64(o.Score) < s.cfg.ColdThreshold && o.IdleMs >= grace && o.Where.AboveG4() &&
				!o.Pinned && s.privateLocked(o) {
				// The epoch is the object's last access (ms): an object that
				// was read back and went cold again is a new decision.
				add(msg.OpSink, o, "cold past the grace period", o.LastAccess)
			}
		}
	}
	return out
}

// privateLocked reports whether only one host holds the object: shared
// objects are placed by the sharing policy (G3.5), not sunk.
func (s *Scheduler) privateLocked(o msg.Object) bool {
	slot, ok := s.names.lookup(o.Namespace, o.Path)
	return !ok || s.names.count(slot) <= 1
}
