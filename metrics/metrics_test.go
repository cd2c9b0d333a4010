package metrics

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/ctxmem/ctxmemd/hitratio"
	"github.com/ctxmem/ctxmemd/tiering"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

func snapshot(objects int64) Snapshot {
	return Snapshot{
		Tiers: []tiering.TierUsage{
			{Name: "G2", UsedBytes: 3 << 20, CapacityBytes: 1 << 30, Blocks: 12, HighWatermark: 0.9, LowWatermark: 0.75},
			{Name: "G3", UsedBytes: 5 << 20, CapacityBytes: 10 << 30, Blocks: 20, Full: true, Health: "down", HealthReason: "5 failed calls",
				HealthChanges: map[string]int64{"degraded": 1, "down": 1}, Refused: 4},
			{Name: "G4", UsedBytes: 7, CapacityBytes: 0, Blocks: 1, Requests: &tier.Requests{Put: 3, Get: 5, List: 1}},
		},
		Stats: tiering.Stats{
			ReadRequests: 10, ReadRequestHits: 7,
			BlockReads: 40, BlockHits: map[string]int64{"G2": 25, "G3": 5, "G4": 2}, BlockMisses: 8,
			ByteReads: 4000, ByteHits: map[string]int64{"G2": 2500, "G3": 500},
			DirtyBytes: 1 << 20, DirtyLimitBytes: 256 << 20, WriterWaits: 2,
			Evictions: map[string]int64{"G2": 3, "G3": 1}, Demotions: map[string]int64{"G3": 4}, Promotions: 6,
			AdmissionsDenied: 9, Dropped: map[string]int64{"admission": 9}, CRCErrors: 1, ObjectsLost: 2, Objects: objects,
			Degraded: "data directory deleted", Prestaged: 10, PrestageUseful: 7, PrestageWasted: 2, PrestageWastedBytes: 8192,
		},
		Lookups:   hitratio.Counts{Hits: map[string]int64{"G2": 6, "G3": 2}, Misses: 12},
		NBD:       &NBD{Connections: 3, ActiveConnections: 1, Requests: 100, Errors: 2, BytesRead: 4096, BytesWritten: 8192},
		Control:   &Control{Connected: true, Published: 7, Applied: 5, Failed: 1, DroppedEvents: 2, QueuedByte: 300, SchedulerLeader: 1},
		G4Evicted: 11, G4Expired: 4,
		ReadCost: []TierReadCost{{Tier: "G4", Seconds: 0.05}},
		Namespaces: []Namespace{
			{Name: "default", Objects: objects, Bytes: 4096, Lookups: hitratio.Counts{Hits: map[string]int64{"G2": 6, "G3": 2}, Misses: 12},
				TokensFound: 4096, PrefillAvoidedS: 0.25, RestoreSkipped: 3},
			{Name: "q", QuotaBytes: 1 << 30},
		},
	}
}

// scrape serves on a loopback listener and returns the parsed families
// of one GET /metrics.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("scrape: %s %s", resp.Status, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// value returns the value of the series name{labels} (labels as k=v pairs).
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	f, ok := fams[name]
	if !ok {
		t.Errorf("no family %s", name)
		return -1
	}
next:
	for _, m := range f.Metric {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		for _, kv := range labels {
			k, v, _ := strings.Cut(kv, "=")
			if got[k] != v {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Untyped != nil:
			return m.Untyped.GetValue()
		}
	}
	t.Errorf("no series %s%v", name, labels)
	return -1
}

func TestScrape(t *testing.T) {
	var objects atomic.Int64
	objects.Store(4)
	calls := atomic.Int64{}
	snap := func() Snapshot { calls.Add(1); return snapshot(objects.Load()) }
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- ServeListener(ctx, ln, snap, "v9") }()
	addr := ln.Addr().String()

	fams := scrape(t, addr)
	checks := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"ctxmem_tier_used_bytes", []string{"tier=G2"}, 3 << 20},
		{"ctxmem_tier_used_bytes", []string{"tier=G3"}, 5 << 20},
		{"ctxmem_tier_capacity_bytes", []string{"tier=G3"}, 10 << 30},
		{"ctxmem_tier_capacity_bytes", []string{"tier=G4"}, 0},
		{"ctxmem_tier_blocks", []string{"tier=G2"}, 12},
		{"ctxmem_tier_high_watermark_ratio", []string{"tier=G2"}, 0.9},
		{"ctxmem_read_requests_total", nil, 10},
		{"ctxmem_read_request_hits_total", nil, 7},
		{"ctxmem_block_hits_total", []string{"tier=G4"}, 2},
		{"ctxmem_block_misses_total", nil, 8},
		{"ctxmem_byte_hits_total", []string{"tier=G3"}, 500},
		{"ctxmem_hit_ratio", []string{"kind=served_from_g2"}, 6.0 / 20},
		{"ctxmem_hit_ratio", []string{"kind=found_in_any_tier"}, 8.0 / 20},
		{"ctxmem_lookup_hits_total", []string{"namespace=default", "tier=G3"}, 2},
		{"ctxmem_lookup_hits_total", []string{"namespace=q", "tier=G4"}, 0},
		{"ctxmem_lookup_misses_total", []string{"namespace=default"}, 12},
		{"ctxmem_namespace_bytes", []string{"namespace=default"}, 4096},
		{"ctxmem_namespace_quota_bytes", []string{"namespace=q"}, 1 << 30},
		{"ctxmem_namespace_tokens_found_total", []string{"namespace=default"}, 4096},
		{"ctxmem_namespace_prefill_avoided_seconds_total", []string{"namespace=default"}, 0.25},
		{"ctxmem_prestage_blocks_total", []string{"result=useful"}, 7},
		{"ctxmem_prestage_wasted_bytes_total", nil, 8192},
		{"ctxmem_restore_skipped_total", []string{"namespace=default"}, 3},
		{"ctxmem_tier_block_read_seconds", []string{"tier=G4"}, 0.05},
		{"ctxmem_nbd_requests_total", nil, 100},
		{"ctxmem_nbd_active_connections", nil, 1},
		{"ctxmem_nbd_bytes_total", []string{"direction=write"}, 8192},
		{"ctxmem_control_connected", nil, 1},
		{"ctxmem_control_commands_total", []string{"result=failed"}, 1},
		{"ctxmem_control_dropped_total", []string{"kind=events"}, 2},
		{"ctxmem_control_scheduler_leader", nil, 1},
		{"ctxmem_g4_removed_blocks_total", []string{"reason=size"}, 11},
		{"ctxmem_g4_removed_blocks_total", []string{"reason=expired"}, 4},
		{"ctxmem_dirty_bytes", nil, 1 << 20},
		{"ctxmem_dirty_limit_bytes", nil, 256 << 20},
		{"ctxmem_evictions_total", []string{"tier=G2"}, 3},
		{"ctxmem_demotions_total", []string{"tier=G3"}, 4},
		{"ctxmem_promotions_total", nil, 6},
		{"ctxmem_admissions_refused_total", nil, 9},
		{"ctxmem_dropped_blocks_total", []string{"reason=admission"}, 9},
		{"ctxmem_crc_errors_total", nil, 1},
		{"ctxmem_objects_lost_total", nil, 2},
		{"ctxmem_tier_full", []string{"tier=G3"}, 1},
		{"ctxmem_tier_full", []string{"tier=G2"}, 0},
		{"ctxmem_store_degraded", nil, 1},
		{"ctxmem_objects", nil, 4},
		{"ctxmem_writer_waits_total", nil, 2},
		{"ctxmem_build_info", []string{"version=v9"}, 1},
	}
	for _, c := range checks {
		if got := value(t, fams, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %g, want %g", c.name, c.labels, got, c.want)
		}
	}
	if fams["ctxmem_read_requests_total"].GetType() != dto.MetricType_COUNTER || fams["ctxmem_objects"].GetType() != dto.MetricType_GAUGE {
		t.Error("wrong metric types")
	}
	if _, ok := fams["ctxmem_tier_high_watermark_ratio"]; ok && len(fams["ctxmem_tier_high_watermark_ratio"].Metric) != 1 {
		t.Error("watermark series for tiers without watermarks")
	}
	if _, ok := fams["go_goroutines"]; !ok {
		t.Error("no Go runtime metrics")
	}
	// Every scrape reads a fresh snapshot.
	objects.Store(11)
	if got := value(t, scrape(t, addr), "ctxmem_objects"); got != 11 {
		t.Errorf("second scrape objects = %g", got)
	}
	if calls.Load() != 2 {
		t.Errorf("snapshot called %d times for 2 scrapes", calls.Load())
	}
	cancel()
	if err := <-errc; err != nil {
		t.Errorf("ServeListener after cancel: %v", err)
	}
	if _, err := http.Get("http://" + addr + "/metrics"); err == nil {
		t.Error("still serving after ctx ended")
	}
}

func TestServeErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	err = Serve(context.Background(), ln.Addr().String(), func() Snapshot { return Snapshot{} }, "")
	if err == nil || !strings.Contains(err.Error(), "listen") {
		t.Errorf("Serve on a busy port: %v", err)
	}
	// Serve on a free port stops with its context; an empty snapshot scrapes.
	ctx, cancel := context.WithCancel(context.Background())
	probe, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := probe.Addr().String()
	probe.Close()
	errc := make(chan error, 1)
	go func() { errc <- Serve(ctx, addr, func() Snapshot { return Snapshot{} }, "") }()
	var fams map[string]*dto.MetricFamily
	for range 200 {
		if resp, err := http.Get("http://" + addr + "/metrics"); err == nil {
			resp.Body.Close()
			fams = scrape(t, addr)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if fams == nil {
		t.Fatal("Serve never answered")
	}
	if v := value(t, fams, "ctxmem_hit_ratio", "kind=found_in_any_tier"); v != 0 {
		t.Errorf("empty hit ratio = %g", v)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Error(err)
	}
}

// TestHealthAndReadiness: /healthz answers while the loop runs, /readyz is
// 503 with the reason while the store is degraded (issue 16 item 5).
func TestHealthAndReadiness(t *testing.T) {
	var degraded atomic.Bool
	snap := func() Snapshot {
		s := snapshot(1)
		s.Stats.Degraded = ""
		if degraded.Load() {
			s.Stats.Degraded = "data directory deleted"
		}
		return s
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go ServeListener(ctx, ln, snap, "v")
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + ln.Addr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Errorf("/healthz: %d", code)
	}
	if code, _ := get("/readyz"); code != 200 {
		t.Errorf("/readyz healthy: %d", code)
	}
	degraded.Store(true)
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "data directory deleted") {
		t.Errorf("/readyz degraded: %d %q", code, body)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Errorf("/healthz degraded: %d", code)
	}
}

// TestReadmeMetricsServed: every ctxmem_* name the README or a page of
// docs/ mentions is served, and every family served is in
// docs/metrics.md (issue 16 item 5).
func TestReadmeMetricsServed(t *testing.T) {
	pages, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append([]string{"../README.md"}, pages...)
	s := snapshot(1)
	s.Passthrough = &Passthrough{On: true}
	s.Tiers[2].Recovering = true
	s.Tiers[1].Degraded = true
	s.Curves = testCurves()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lat := NewLatencies()
	lat.ObserveFUSE("read", time.Millisecond)
	lat.ObserveNBD("write", time.Millisecond)
	go ServeListener(ctx, ln, func() Snapshot { return s }, "v", lat)
	fams := scrape(t, ln.Addr().String())
	re := regexp.MustCompile(`ctxmem_[a-z0-9_]*[a-z0-9]`)
	// Every ctxmem_ family served is documented in docs/metrics.md.
	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	for n := range fams {
		if strings.HasPrefix(n, "ctxmem_") && !strings.Contains(string(doc), "`"+n) {
			t.Errorf("docs/metrics.md does not document %s", n)
		}
	}
	named := 0
	for _, p := range pages {
		text, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range re.FindAllString(string(text), -1) {
			named++
			for _, suf := range []string{"_bucket", "_sum", "_count"} { // a histogram's series
				if b, ok := strings.CutSuffix(n, suf); ok && fams[b] != nil && fams[b].GetType() == dto.MetricType_HISTOGRAM {
					n = b
				}
			}
			if _, ok := fams[n]; !ok {
				t.Errorf("%s mentions %s, which is not served", p, n)
			}
		}
	}
	if named == 0 {
		t.Fatal("README.md and docs/*.md name no metric")
	}
}
