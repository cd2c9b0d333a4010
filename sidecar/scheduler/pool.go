package scheduler

import (
	"fmt"
	"sort"
	"time"

	"github.com/ctxmem/ctxmemd/sidecar/msg"
)

// poolUseLocked returns the extents leased by live hosts and the pool's
// extent count, from the hosts' latest reports. s.mu held.
func (s *Scheduler) poolUseLocked() (held, extents, live int) {
	for _, hv := range s.hosts {
		if !poolLive(hv) {
			continue
		}
		live++
		held += len(hv.last.Pool.Held)
		extents = max(extents, int(hv.last.Pool.Extents))
	}
	return held, extents, live
}

// poolCand is a held extent the scheduler may reclaim.
type poolCand struct {
	host    string
	boot    int64
	extent  uint32
	lastUse int64
}

// poolLocked returns the reclaim_extent commands that keep the shared
// pool usable. The holder of a reclaimed extent withdraws the extent's
// index entries before it releases it. Two rules, in this order:
//
//  1. Fair share. A live host that reported a pool write that found every
//     extent leased (msg.Pool.StarvedAt, newer than the last time it was
//     answered) while it holds fewer than its fair share (the pool's
//     extents divided by the live hosts with a pool) gets up to
//     fairGrant extents, reclaimed from hosts holding more than their
//     fair share, least recently used first, never taking a host below
//     its share. Without it one host sharing fast (every file eagerly,
//     or the scheduler's own shares of its files) could hold every
//     extent the watermark left, and a host that restarted could never
//     share again (TestE2EPoolFaults' restart step).
//  2. Watermark. When more than PoolHigh of the pool's extents are
//     leased, the least recently used held extents (last use = the
//     latest read or write of the extent on any host) are reclaimed by
//     their holders until PoolLow would be reached.
//
// Extents written within reclaimMinAge are still being filled and are
// never reclaimed. s.mu held.
func (s *Scheduler) poolLocked(now time.Time) []*msg.Command {
	held, extents, live := s.poolUseLocked()
	if extents == 0 {
		return nil
	}
	over := float64(held) > s.cfg.PoolHigh*float64(extents)
	fair := extents / max(live, 1)
	var starved []string
	for h, hv := range s.hosts {
		if poolLive(hv) && hv.last.Pool.StarvedAt > hv.fairAnswered && len(hv.last.Pool.Held) < fair {
			starved = append(starved, h)
		}
	}
	if !over && len(starved) == 0 {
		return nil
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
	var cands []poolCand
	recent := now.Add(-reclaimMinAge).UnixNano()
	for h, hv := range s.hosts {
		if !poolLive(hv) {
			continue // a silent host's leases lapse by themselves
		}
		for _, e := range hv.last.Pool.Held {
			if hv.last.Pool.LastWrite[e] > recent {
				continue // still being filled: reclaiming it would thrash
			}
			cands = append(cands, poolCand{h, hv.boot, e, lastUse[e]})
		}
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].lastUse < cands[j].lastUse })
	epoch := now.Unix() / 30 // a reclaim that did not happen may be asked again later
	var out []*msg.Command
	taken := map[uint32]bool{}
	add := func(c poolCand, why string) bool {
		id := msg.CommandID(msg.OpReclaim, c.host, c.boot, c.extent, epoch)
		if _, pending := s.sent[id]; pending || taken[c.extent] {
			return false
		}
		taken[c.extent] = true
		out = append(out, &msg.Command{ID: id, Host: c.host, Op: msg.OpReclaim, Extent: c.extent, Reason: why})
		return true
	}
	// excess is what each host holds above its fair share, shared by all
	// the starved hosts of this round: together they never take a host
	// below its share.
	excess := map[string]int{}
	for _, c := range cands {
		excess[c.host] = len(s.hosts[c.host].last.Pool.Held) - fair
	}
	sort.Strings(starved)
	for _, h := range starved {
		hv := s.hosts[h]
		hv.fairAnswered = hv.last.Pool.StarvedAt
		grant := min(fairGrant, fair-len(hv.last.Pool.Held))
		for _, c := range cands {
			if grant == 0 {
				break
			}
			if c.host == h || excess[c.host] <= 0 {
				continue
			}
			if add(c, fmt.Sprintf("host %s found the pool full holding %d of %d extents (fair share %d)", h, len(hv.last.Pool.Held), extents, fair)) {
				excess[c.host]--
				grant--
			}
		}
	}
	if over {
		want := held - int(s.cfg.PoolLow*float64(extents)) // the fair-share reclaims count too
		for _, c := range cands {
			if len(out) >= want {
				break
			}
			add(c, "pool above its high watermark")
		}
	}
	return out
}

// fairGrant is how many extents one starvation report of a host below
// its fair share gets it at most (one is being filled while the next is
// reclaimed).
const fairGrant = 2

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
