package tiering

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/g3"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

func TestSetHeatKnobs(t *testing.T) {
	s := openTest(t, t.TempDir(), nil, newMemTier("G4", 0), 4<<20)
	defer s.Close()
	if k := s.HeatKnobs(); k.Cold != 30 || k.HalfLife != 60*time.Second {
		t.Fatalf("defaults: %+v", k)
	}
	want := HeatKnobs{Cold: 20, Warm: 70, HalfLife: 5 * time.Minute}
	if err := s.SetHeatKnobs(want); err != nil {
		t.Fatal(err)
	}
	if got := s.HeatKnobs(); got != want {
		t.Fatalf("HeatKnobs() = %+v, want %+v", got, want)
	}
	// The tracker behind Heat (xattrs, status) uses them.
	c := s.place.heat.Config()
	if c.Cold != 20 || c.Hot != 70 || c.HalfLife != 5*time.Minute {
		t.Fatalf("tracker config %+v", c)
	}
	for _, bad := range []HeatKnobs{
		{Cold: 0, Warm: 60, HalfLife: time.Minute},
		{Cold: 60, Warm: 60, HalfLife: time.Minute},
		{Cold: 30, Warm: 101, HalfLife: time.Minute},
		{Cold: 30, Warm: 60},
		{Cold: -1, Warm: 60, HalfLife: time.Minute},
	} {
		if err := s.SetHeatKnobs(bad); !errors.Is(err, ErrInvalid) {
			t.Fatalf("SetHeatKnobs(%+v) = %v, want ErrInvalid", bad, err)
		}
	}
	if got := s.HeatKnobs(); got != want {
		t.Fatalf("a refused change took effect: %+v", got)
	}
}

// A new half-life changes how fast the heat Store.Heat reports decays.
func TestSetHeatKnobsHalfLifeReachesHeat(t *testing.T) {
	s := openTest(t, t.TempDir(), nil, newMemTier("G4", 0), 4<<20)
	defer s.Close()
	ctx := context.Background()
	id, err := s.Create("ns", 64<<10, "file")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.WriteAt(ctx, id, pattern(1, 64<<10), 0); err != nil {
		t.Fatal(err)
	}
	h0, _ := s.Heat(id)
	if h0 <= 0 {
		t.Fatalf("heat after a write = %v", h0)
	}
	// With a 1 ms half-life, the score is gone within a moment.
	if err := s.SetHeatKnobs(HeatKnobs{Cold: 30, Warm: 60, HalfLife: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // 100 half-lives
	if h, _ := s.Heat(id); h > h0/1000 {
		t.Fatalf("heat %v after 100 ms at a 1 ms half-life (was %v)", h, h0)
	}
}

// liveMemTier is a memTier with live watermarks, like g3.Store.
type liveMemTier struct {
	*memTier
	mu        sync.Mutex
	high, low float64
}

func (t *liveMemTier) Watermarks() (float64, float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.high, t.low
}

func (t *liveMemTier) SetWatermarks(ctx context.Context, high, low float64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.high, t.low = high, low
	return nil
}

func TestSetG3WatermarksDrivesAdmission(t *testing.T) {
	lt := &liveMemTier{memTier: newMemTier("G3", 1<<20), high: 0.9, low: 0.75}
	s := openTest(t, t.TempDir(), lt, newMemTier("G4", 0), 4<<20)
	defer s.Close()
	// G3 60% full: under 0.9, a never-referenced block is admitted.
	if err := lt.Put(context.Background(), tier.Key{Namespace: "x", Object: 99}, make([]byte, 600<<10)); err != nil {
		t.Fatal(err)
	}
	cold := bref{id: 12345, idx: 7}
	if !s.admitG3(cold) {
		t.Fatal("refused under the high watermark")
	}
	if err := s.SetG3Watermarks(0.5, 0.25); err != nil {
		t.Fatal(err)
	}
	if h, l := lt.Watermarks(); h != 0.5 || l != 0.25 {
		t.Fatalf("tier watermarks %v %v", h, l)
	}
	if h, l := s.G3Watermarks(); h != 0.5 || l != 0.25 {
		t.Fatalf("G3Watermarks() = %v %v", h, l)
	}
	if s.admitG3(cold) {
		t.Fatal("a one-hit block admitted above the lowered high watermark")
	}
	for _, bad := range [][2]float64{{0.5, 0.5}, {1.2, 0.5}, {0.5, 0}, {0.3, 0.6}} {
		if err := s.SetG3Watermarks(bad[0], bad[1]); !errors.Is(err, ErrInvalid) {
			t.Fatalf("SetG3Watermarks(%v) = %v, want ErrInvalid", bad, err)
		}
	}
	if h, _ := s.G3Watermarks(); h != 0.5 {
		t.Fatalf("a refused change took effect: high %v", h)
	}
}

func TestSetG3WatermarksWithoutLiveTier(t *testing.T) {
	s := openTest(t, t.TempDir(), newMemTier("G3", 1<<20), newMemTier("G4", 0), 4<<20)
	defer s.Close()
	if err := s.SetG3Watermarks(0.8, 0.5); !errors.Is(err, ErrInvalid) {
		t.Fatalf("SetG3Watermarks on a tier without live watermarks = %v, want ErrInvalid", err)
	}
	if h, _ := s.G3Watermarks(); h != 0.90 {
		t.Fatalf("G3Watermarks() high = %v, want Config.G3High 0.90", h)
	}
	s2 := openTest(t, t.TempDir(), nil, newMemTier("G4", 0), 4<<20)
	defer s2.Close()
	if err := s2.SetG3Watermarks(0.8, 0.5); !errors.Is(err, ErrInvalid) {
		t.Fatalf("SetG3Watermarks without G3 = %v, want ErrInvalid", err)
	}
}

// Shrinking the real G3 live reclaims its oldest segments through
// the core's Demoter port: their blocks move to G4 and every object reads back.
func TestG3ShrinkLiveDemotesToG4(t *testing.T) {
	dir := t.TempDir()
	t3, err := g3.Open(g3.Options{Dir: t.TempDir(), SegmentBytes: 1 << 20, CapacityBytes: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer t3.Close()
	t4 := newMemTier("G4", 0)
	s := openTest(t, dir, t3, t4, 8<<20)
	defer s.Close()
	ctx := context.Background()
	var ids []ObjectID
	for i := range 10 { // 10 MiB through an 8 MiB G2 into G3
		id, err := s.Create("ns", 256<<10, "file")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.WriteAt(ctx, id, pattern(uint64(i), 1<<20), 0); err != nil {
			t.Fatal(err)
		}
		if err := s.Flush(ctx, id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if t3.Stats().Segments < 8 || t4.puts != 0 {
		t.Fatalf("before shrinking: %d G3 segments, %d G4 puts", t3.Stats().Segments, t4.puts)
	}
	if err := t3.SetLimits(ctx, g3.Limits{CapacityBytes: 4 << 20, LowWatermark: 0.5}); err != nil {
		t.Fatal(err)
	}
	if st := t3.Stats(); st.SegmentBytes > 4<<20 {
		t.Fatalf("G3 holds %d bytes of segments after shrinking to 4 MiB", st.SegmentBytes)
	}
	if st := s.Stats(); st.Demotions[TierG4] == 0 || st.ObjectsLost != 0 {
		t.Fatalf("after shrinking: demotions %v, objects lost %d", st.Demotions, st.ObjectsLost)
	}
	p := make([]byte, 1<<20)
	for i, id := range ids {
		n, err := s.ReadAt(ctx, id, p, 0)
		if err != nil || n != len(p) || !bytes.Equal(p, pattern(uint64(i), 1<<20)) {
			t.Fatalf("object %d after shrinking G3: %d bytes, %v", i, n, err)
		}
	}
}
