package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ctxmem/ctxmemd/admin"
	"github.com/ctxmem/ctxmemd/hitratio"
	"github.com/ctxmem/ctxmemd/tiering"
)

// growingProvider's counters grow by a fixed step on every Status call.
type growingProvider struct{ calls atomic.Int64 }

func (g *growingProvider) Status(context.Context) (admin.Status, error) {
	n := g.calls.Add(1)
	return admin.Status{Mount: "/mnt/x",
		Tiers: []tiering.TierUsage{{Name: "G2", UsedBytes: 1 << 20, CapacityBytes: 1 << 30, Blocks: 4}, {Name: "G3", Blocks: 9}},
		Stats: tiering.Stats{BlockHits: map[string]int64{"G2": 10 * n, "G3": 2 * n}, Promotions: n,
			Demotions: map[string]int64{"G3": 3 * n}, Evictions: map[string]int64{"G2": n}},
		Lookups: hitratio.Counts{Hits: map[string]int64{"G2": 6 * n, "G3": 2 * n}, Misses: 2 * n},
	}, nil
}

// TestTop: `ctxmemd top` prints the rates between samples, per tier, and
// the interval's hit ratio; --count ends it; bad flags exit 2.
func TestTop(t *testing.T) {
	dir, err := os.MkdirTemp("", "top") // short path for the socket
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "admin.sock")
	if code, _, errs := ctxmemd(t, "top", "--admin", sock, "--count", "1"); code != exitNotRunning {
		t.Errorf("no daemon: exit %d %s", code, errs)
	}
	serveAdmin(t, sock, &growingProvider{}, "v9")
	code, out, errs := ctxmemd(t, "top", "--admin", sock, "--interval", "200ms", "--count", "2", "--json")
	if code != 0 {
		t.Fatalf("top --json: exit %d %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 lines, got %q", out)
	}
	var r topRates
	if err := json.Unmarshal([]byte(lines[1]), &r); err != nil {
		t.Fatal(err)
	}
	// One Status call per interval: every counter grew by one step.
	if r.G2Ratio != 0.6 || r.AnyRatio != 0.8 || r.LookupHits["G2"] <= 0 || r.BlockReads["G3"] <= 0 || r.Demotions["G3"] <= 0 {
		t.Errorf("rates %+v", r)
	}
	code, out, errs = ctxmemd(t, "top", "--admin", sock, "--interval", "100ms", "--count", "1")
	if code != 0 {
		t.Fatalf("top: exit %d %s", code, errs)
	}
	for _, w := range []string{"ctxmemd v9", "lookups/s", "served from G2 60.0%, found in any tier 80.0%", "BLOCK READS/s", "G3", "promotions/s"} {
		if !strings.Contains(out, w) {
			t.Errorf("top output lacks %q:\n%s", w, out)
		}
	}
	for _, args := range [][]string{{"--interval", "1ms"}, {"--count", "-1"}} {
		if code, _, _ := ctxmemd(t, append([]string{"top", "--admin", sock}, args...)...); code != exitUsage {
			t.Errorf("top %v: exit %d, want %d", args, code, exitUsage)
		}
	}
}
