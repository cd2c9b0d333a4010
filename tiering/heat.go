package tiering

import (
	"math"
	"time"
)

// heatTable keeps a heat score per block (placeholder until heat.Tracker).
type heatTable struct {
	halfLife time.Duration
	m        map[bref]heatEntry
}

type heatEntry struct {
	score float64
	at    time.Time
}

func newHeatTable(halfLife time.Duration) *heatTable {
	return &heatTable{halfLife: halfLife, m: make(map[bref]heatEntry)}
}

func (h *heatTable) decayed(e heatEntry, now time.Time) float64 {
	dt := now.Sub(e.at)
	if dt <= 0 {
		return e.score
	}
	return e.score * math.Exp2(-float64(dt)/float64(h.halfLife))
}

func (h *heatTable) touch(r bref, now time.Time) float64 {
	e := h.m[r]
	s := h.decayed(e, now)
	s += (100 - s) * 0.2
	h.m[r] = heatEntry{score: s, at: now}
	return s
}

func (h *heatTable) score(r bref, now time.Time) float64 {
	e, ok := h.m[r]
	if !ok {
		return 0
	}
	return h.decayed(e, now)
}

func (h *heatTable) forget(r bref) { delete(h.m, r) }

// admitter predicts reuse for G3 admission (placeholder until heat.Sketch).
type admitter struct {
	m map[uint64]uint8
}

func newAdmitter() *admitter { return &admitter{m: make(map[uint64]uint8)} }

func (a *admitter) record(h uint64) {
	if a.m[h] < 15 {
		a.m[h]++
	}
}

func (a *admitter) estimate(h uint64) int { return int(a.m[h]) }

func newG2Policy() g2Policy { return newLRUPolicy() }
