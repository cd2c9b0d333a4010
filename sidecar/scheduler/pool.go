package scheduler

import (
	"sort"
	"time"

	"github.com/ctxmem/ctxmemd/sidecar/msg"
)

// poolUseLocked returns the extents leased by live hosts and the pool's
// extent count, from the hosts' latest reports. s.mu held.
func (s *Scheduler) poolUseLocked() (held, extents int) {
	for _, hv := range s.hosts {
		if !poolLive(hv) {
			continue
		}
		held += len(hv.last.Pool.Held)
		extents = max(extents, int(hv.last.Pool.Extents))
	}
	return held, extents
}

// poolLocked keeps the shared pool under its high watermark: when more
// than PoolHigh of its extents are leased, the least recently used held
// extents (last use = the latest read or write of the extent on any host)
// are reclaimed by their holders until PoolLow would be reached. The
// holder withdraws the extent's index entries before it reuses the
// extent. s.mu held.
func (s *Scheduler) poolLocked(now time.Time) []*msg.Command {
	held, extents := s.poolUseLocked()
	if extents == 0 || float64(held) <= s.cfg.PoolHigh*float64(extents) {
		return nil
	}
	type cand struct {
		host    string
		boot    int64
		extent  uint32
		lastUse int64
	}
	lastUse := map[uint32]int64{}
	for _, hv := range s.hosts {
		if hv.last == nil || hv.last.Pool == nil {
			continue
		}
		for e, at := range hv.last.Pool.LastUse {
			lastUse[e] = max(lastUse[e], at)
		}
	}
	var cands []cand
	recent := now.Add(-reclaimMinAge).UnixNano()
	for h, hv := range s.hosts {
		if !poolLive(hv) {
			continue // a silent host's leases lapse by themselves
		}
		for _, e := range hv.last.Pool.Held {
			if hv.last.Pool.LastWrite[e] > recent {
				continue // still being filled: reclaiming it would thrash
			}
			cands = append(cands, cand{h, hv.boot, e, lastUse[e]})
		}
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].lastUse < cands[j].lastUse })
	want := held - int(s.cfg.PoolLow*float64(extents))
	epoch := now.Unix() / 30 // a reclaim that did not happen may be asked again later
	var out []*msg.Command
	for _, c := range cands {
		if len(out) >= want {
			break
		}
		id := msg.CommandID(msg.OpReclaim, c.host, c.boot, c.extent, epoch)
		if _, pending := s.sent[id]; pending {
			continue
		}
		out = append(out, &msg.Command{ID: id, Host: c.host, Op: msg.OpReclaim, Extent: c.extent,
			Reason: "pool above its high watermark"})
	}
	return out
}

// reclaimMinAge: extents written more recently than this are not
// reclaimed.
const reclaimMinAge = 2 * time.Second

// poolLive reports whether hv has a pool and reported within three of its
// intervals (a host that stopped reporting cannot reclaim; its leases
// expire on their own and other hosts take the extents).
func poolLive(hv *hostView) bool {
	if hv.last == nil || hv.last.Pool == nil {
		return false
	}
	iv := time.Duration(hv.last.Interval) * time.Millisecond
	if iv <= 0 {
		iv = time.Second
	}
	return time.Since(hv.seen) <= 3*iv+time.Second
}
