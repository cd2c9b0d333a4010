// Package hitratio is ctxmemd's one definition of a KV cache's hit ratio,
// shared by the daemon (ctxmemd status, the ctxmem_hit_ratio metric) and
// the trace replay, so that all of them report the same numbers for the
// same run (issue 16, item 4).
//
// A lookup is one request for a KV file by name:
//
//   - a hit when the file exists and is opened for reading; it is counted
//     by the tier that serves it, the slowest tier any of its blocks is
//     read from (G2 when every block is in memory);
//   - a miss when the name is not there (ENOENT), the real miss of a KV
//     cache, which no read counter sees.
//
// Two ratios follow, each over all lookups (hits + misses):
//
//   - "served from G2" = hits served from G2 / lookups: the share of
//     lookups answered at memory speed;
//   - "found in any tier" = hits / lookups: the share the engine did not
//     have to recompute.
package hitratio

import "strings"

// Labels of the two ratios, as printed by status and the replay.
const (
	LabelG2  = "served from G2"
	LabelAny = "found in any tier"
)

// Tier names as the daemon reports them, fastest first; Unknown is the
// replay's name for a hit whose tier it could not read.
const (
	G2      = "G2"
	G3      = "G3"
	G35     = "G3.5"
	G4      = "G4"
	Unknown = "unknown"
)

// Tiers lists the tier names of Counts.Hits in order of speed, fastest
// first.
func Tiers() []string { return []string{G2, G3, G35, G4} }

// Counts are lookup counts since some start. Hits is keyed by serving tier
// name (Tiers, or Unknown); a nil map is no hits.
type Counts struct {
	Hits   map[string]int64 `json:"hits"`
	Misses int64            `json:"misses"`
}

// HitTotal is the number of hits in every tier.
func (c Counts) HitTotal() int64 {
	var n int64
	for _, v := range c.Hits {
		n += v
	}
	return n
}

// Lookups is hits + misses.
func (c Counts) Lookups() int64 { return c.HitTotal() + c.Misses }

// ServedFromG2 is G2 hits / lookups, 0–1 (0 with no lookups).
func (c Counts) ServedFromG2() float64 { return ratio(c.Hits[G2], c.Lookups()) }

// FoundInAnyTier is hits / lookups, 0–1 (0 with no lookups).
func (c Counts) FoundInAnyTier() float64 { return ratio(c.HitTotal(), c.Lookups()) }

// Add returns c + o (a new map).
func (c Counts) Add(o Counts) Counts {
	out := Counts{Hits: make(map[string]int64, len(c.Hits)+len(o.Hits)), Misses: c.Misses + o.Misses}
	for k, v := range c.Hits {
		out.Hits[k] += v
	}
	for k, v := range o.Hits {
		out.Hits[k] += v
	}
	return out
}

// Rank orders tier names by speed: 0 for G2 up to 3 for G4; any other
// name (Unknown, a future tier) ranks after G4.
func Rank(tier string) int {
	switch tier {
	case G2:
		return 0
	case G3:
		return 1
	case G35:
		return 2
	case G4:
		return 3
	}
	return 4
}

// SlowestTier returns the serving tier of a user.ctxmem.tier value, runs
// "TIER*N" joined by spaces ("G2*3 G4" → "G4"): the slowest tier named,
// holes ignored; G2 for a value of holes only, Unknown for an empty
// value.
func SlowestTier(runs string) string {
	worst := ""
	for _, f := range strings.Fields(runs) {
		name, _, _ := strings.Cut(f, "*")
		if name == "hole" || name == "" {
			if worst == "" {
				worst = G2
			}
			continue
		}
		if worst == "" || Rank(name) > Rank(worst) {
			worst = name
		}
	}
	if worst == "" {
		return Unknown
	}
	return worst
}

func ratio(a, b int64) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}
