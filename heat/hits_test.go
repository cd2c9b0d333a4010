package heat

import (
	"sync"
	"testing"
)

func TestHits(t *testing.T) {
	var h Hits
	h.Hit(LevelG2, 100)
	h.Hit(LevelG3, 50)
	h.Hit(LevelG3, 50)
	h.Miss(300)
	h.Request(4, 3)
	h.Request(2, 2)
	h.Request(1, 0)
	s := h.Snapshot()
	want := Snapshot{
		Requests: 3, FullHitRequests: 1, PartialRequests: 1,
		BlockHits: 3, BlockMisses: 1, ByteHits: 200, ByteMisses: 300,
	}
	want.LevelBlocks[LevelG2], want.LevelBytes[LevelG2] = 1, 100
	want.LevelBlocks[LevelG3], want.LevelBytes[LevelG3] = 2, 100
	if s != want {
		t.Fatalf("snapshot\n got %+v\nwant %+v", s, want)
	}
	if r := s.BlockHitRatio(); r != 0.75 {
		t.Errorf("BlockHitRatio = %v", r)
	}
	if r := s.ByteHitRatio(); r != 0.4 {
		t.Errorf("ByteHitRatio = %v", r)
	}
	if r := s.RequestHitRatio(); r != 1.0/3 {
		t.Errorf("RequestHitRatio = %v", r)
	}
	h.Hit(LevelG4, 10)
	d := h.Snapshot().Sub(s)
	if d.BlockHits != 1 || d.ByteHits != 10 || d.LevelBlocks[LevelG4] != 1 || d.Requests != 0 || d.LevelBlocks[LevelG3] != 0 {
		t.Fatalf("Sub = %+v", d)
	}
	if (Snapshot{}).BlockHitRatio() != 0 {
		t.Error("empty ratio")
	}
	if LevelG35.String() != "G3.5" || LevelG2.String() != "G2" {
		t.Error("level names")
	}
}

func TestHitsConcurrent(t *testing.T) {
	var h Hits
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				h.Hit(LevelG2, 4096)
				h.Miss(1)
				h.Request(2, 1)
				_ = h.Snapshot()
			}
		}()
	}
	wg.Wait()
	s := h.Snapshot()
	if s.BlockHits != 4000 || s.ByteHits != 4000*4096 || s.LevelBlocks[LevelG2] != 4000 || s.PartialRequests != 4000 || s.ByteMisses != 4000 {
		t.Fatalf("lost updates: %+v", s)
	}
}
