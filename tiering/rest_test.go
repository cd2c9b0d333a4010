package tiering

import (
	"context"
	"testing"
)

// TestObjectAtRestCarriesNoSpans checks that an object written, flushed and
// idle keeps no busy map, no flush channel and no per-block write-back
// state (issue 17: each cost ~60-200 B per file at rest), and that Flush
// still waits for and sees write-back.
func TestObjectAtRestCarriesNoSpans(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir(), newMemTier("G3", 0), newMemTier("G4", 0), 64<<20)
	defer s.Close()
	ids := make([]ObjectID, 20)
	for i := range ids {
		id, err := s.Create("ns", 4096, "file")
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
		if _, err := s.WriteAt(ctx, id, pattern(uint64(i), 3*4096+17), 0); err != nil {
			t.Fatal(err)
		}
		if err := s.Flush(ctx, id); err != nil { // waits on a channel made for it
			t.Fatal(err)
		}
	}
	for i, id := range ids {
		o := s.get(id)
		o.mu.Lock()
		busy, flushed, stale, dirty := o.busy, o.flushed, o.stale, o.dirty
		var wb int
		for _, b := range o.blocks.all() {
			if b.wb != nil {
				wb++
			}
		}
		o.mu.Unlock()
		if wb != 0 {
			t.Errorf("object %d at rest: %d blocks keep their write-back state", i, wb)
		}
		if dirty != 0 {
			t.Fatalf("object %d: %d dirty blocks after Flush", i, dirty)
		}
		if busy != nil || flushed != nil || stale != nil {
			t.Errorf("object %d at rest: busy %v, flushed %v, stale %v; want all nil", i, busy, flushed, stale)
		}
		got := make([]byte, 3*4096+17)
		if n, err := s.ReadAt(ctx, id, got, 0); err != nil || n != len(got) {
			t.Fatalf("read back %d: n=%d err=%v", i, n, err)
		}
	}
}
