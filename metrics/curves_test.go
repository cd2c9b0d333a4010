package metrics

import (
	"context"
	"math"
	"net"
	"testing"

	"github.com/ctxmem/ctxmemd/mrc"
)

func testCurves() []Curve {
	pts := []mrc.Point{{Blocks: 1, HitRatio: 0}, {Blocks: 2, HitRatio: 0.1}, {Blocks: 4, HitRatio: 0.5}, {Blocks: 8, HitRatio: 0.6}}
	return []Curve{
		{Refs: 1000, MaxHitRatio: 0.6, MeanDistance: 3, Points: pts},
		{Namespace: "llama", Refs: 100, MaxHitRatio: 0.6, MeanDistance: 3, Points: pts},
	}
}

func TestReuseDistanceHistogram(t *testing.T) {
	s := snapshot(1)
	s.Curves = testCurves()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go ServeListener(ctx, ln, func() Snapshot { return s }, "v")
	fams := scrape(t, ln.Addr().String())
	h := fams["ctxmem_reuse_distance_blocks"].GetMetric()[0].GetHistogram()
	if h.GetSampleCount() != 1000 || math.Abs(h.GetSampleSum()-1800) > 1e-6 {
		t.Errorf("count %d sum %v", h.GetSampleCount(), h.GetSampleSum())
	}
	want := map[float64]uint64{1: 0, 2: 100, 4: 500, 8: 600, 1024: 600}
	for _, b := range h.GetBucket() {
		if w, ok := want[b.GetUpperBound()]; ok && b.GetCumulativeCount() != w {
			t.Errorf("le=%v: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), w)
		}
	}
	m := fams["ctxmem_namespace_reuse_distance_blocks"].GetMetric()
	if len(m) != 1 || m[0].GetLabel()[0].GetValue() != "llama" || m[0].GetHistogram().GetSampleCount() != 100 {
		t.Errorf("namespace histogram %v", m)
	}
}
