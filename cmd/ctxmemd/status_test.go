package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/ctxmem/ctxmemd/admin"
	"github.com/ctxmem/ctxmemd/tiering"
)

// TestStatusTextShowsHealth: the text status's STATE column says what
// `status --json` says of each tier's health (up, degraded, down,
// bypassed, with the reason). Before, a G3 whose health was degraded (its
// reads failing on a hung device, fewer than five yet) showed `ok`.
func TestStatusTextShowsHealth(t *testing.T) {
	st := admin.Status{Tiers: []tiering.TierUsage{
		{Name: "G2", CapacityBytes: 1 << 30},
		{Name: "G3", Health: "degraded", HealthReason: "failed call: G3 read ns/1/0@1: no answer within 10s (a hung device?): tier unavailable"},
		{Name: "G3.5", Health: "down", HealthReason: "5 failed calls in a row", Degraded: true},
		{Name: "G4", Health: "up"},
	}}
	var out bytes.Buffer
	if err := writeStatus(&out, st); err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, l := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			rows[f[0]] = l
		}
	}
	for tierName, want := range map[string]string{
		"G2":   " ok",
		"G3":   "DEGRADED (failed call: G3 read ns/1/0@1: no answer within 10s (a hung device?): tier unavailable)",
		"G3.5": "DOWN (5 failed calls in a row; not used until a probe succeeds)",
		"G4":   " up",
	} {
		if !strings.HasSuffix(strings.TrimRight(rows[tierName], " "), want) {
			t.Errorf("status row of %s = %q; want it to end in %q\n%s", tierName, rows[tierName], want, out.String())
		}
	}
}
