package tiering

import (
	"context"
	"testing"
)

// TestPrestageAccounting: blocks prestage brings up count as prestaged;
// those read afterwards as useful, those that leave G2 unread as wasted
// (with their bytes); a block already in G2 is not counted.
func TestPrestageAccounting(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir(), newMemTier("G3", 0), newMemTier("G4", 0), 64<<20)
	defer s.Close()
	const bs = 4096
	mk := func(seed uint64) ObjectID {
		id, err := s.Create("ns", bs, "file")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.WriteAt(ctx, id, pattern(seed, 4*bs), 0); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Demote(ctx, id); err != nil { // written back, out of G2
			t.Fatal(err)
		}
		return id
	}
	read, unread := mk(1), mk(2)
	for _, id := range []ObjectID{read, unread} {
		if err := s.PrestageWait(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PrestageWait(ctx, read); err != nil { // all in G2 already: nothing new
		t.Fatal(err)
	}
	st := s.Stats()
	if st.Prestaged != 8 || st.PrestagedBytes != 8*bs || st.PrestageUseful != 0 || st.PrestageWasted != 0 {
		t.Fatalf("after prestage: %+v", st)
	}
	buf := make([]byte, 4*bs)
	for range 2 { // a second read is not counted twice
		if _, err := s.ReadAt(ctx, read, buf, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Demote(ctx, unread); err != nil {
		t.Fatal(err)
	}
	st = s.Stats()
	if st.PrestageUseful != 4 || st.PrestageWasted != 4 || st.PrestageWastedBytes != 4*bs {
		t.Fatalf("useful %d wasted %d (%d bytes), want 4, 4 (%d)", st.PrestageUseful, st.PrestageWasted, st.PrestageWastedBytes, 4*bs)
	}
}
