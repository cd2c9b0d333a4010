// Package heat holds ctxmemd's block-level placement policy: the heat score
// (0–100, exponentially decayed) reported to the scheduler, the LRU-2
// ordering helper, the TinyLFU frequency sketch used for admission, the
// eviction+admission Policy that the tiering core's G2 runs, and the hit
// counters.
//
// The pieces, and what each is for:
//
//   - Tracker[K]: heat score per block for status, heat summaries and the
//     hot/warm/cold classes (DESIGN "Policy"). Safe for concurrent use.
//   - LRU2[K]: eviction order by second-most-recent access (O'Neil, O'Neil,
//     Weikum, SIGMOD 1993). Not synchronized.
//   - Sketch: 4-bit count-min sketch with a doorkeeper and periodic halving
//     (Einziger, Friedman, Manes, ACM ToS 2017). Not synchronized.
//   - Policy[K]: the eviction order + admission decision the core asks.
//     Safe for concurrent use. AdaptivePolicy[K] (decay or LRU, whichever
//     hits more on shadow caches), DensityPolicy[K] (learned hit
//     density per class, LHD-style) and ArbiterPolicy[K] (decay or
//     density, whichever hits more on shadow caches) are alternatives
//     behind the same Placer[K] protocol (the daemon's g2_policy).
//   - Hits: atomic request/block/byte/per-level hit counters.
//
// The policy simulator that measures these on the Mooncake trace lives in
// heat/sim; it drives the same Policy code the core uses.
//
// # Policy protocol (read by the tiering core)
//
// The core owns byte budgets and watermarks; the Policy only ranks keys.
// One Policy instance per tier that needs ranking (G2; G3 may have its own).
// For every block reference (a read, or the write of a new block):
//
//	hit := p.Access(k, h, now)            // counts the reference; true if k is resident
//	if !hit {
//	    // k was fetched from below or recomputed; keep it in this tier?
//	    if fits(k) || p.ShouldAdmit(h, now) {
//	        for !fits(k) {                 // the core's own byte accounting
//	            v, _ := p.Victim()         // next to evict; still resident
//	            demoteOrDrop(v)            // see below
//	            p.Remove(v)
//	        }
//	        p.Insert(k, h, now)
//	    }
//	}
//
// Background demotion at the high watermark uses the same two calls
// (Victim, then Remove once the block is demoted or dropped) until the low
// watermark. Each call locks the Policy on its own, so the core must
// serialize its eviction loops (two loops would see the same Victim).
//
// A block leaving G2 is written to G3 only when it is predicted to be
// reused: p.PredictReuse(hv) (estimated recent references >=
// ReuseMinCount), and, when G3 itself is full, g3Policy.ShouldAdmit(hv,
// now). Blocks removed for other reasons (deleted object, new generation)
// are just Remove'd.
//
// h is a 64-bit hash of the key (for example hash/maphash.Comparable with
// a per-process seed, or Mix64 of an integer id); the same key must always
// give the same h within one process.
package heat
