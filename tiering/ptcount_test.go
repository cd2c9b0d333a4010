package tiering

import (
	"context"
	"math/rand/v2"
	"testing"
)

// walkMemFiles counts, by visiting every object under its lock, what
// Stats reports from its counters: objects holding a memory file, and
// those of them open through it.
func walkMemFiles(s *Store) (objs, open int64) {
	s.mu.RLock()
	all := make([]*object, 0, len(s.objects))
	for _, o := range s.objects {
		all = append(all, o)
	}
	s.mu.RUnlock()
	for _, o := range all {
		o.mu.RLock()
		if o.mf != nil {
			objs++
			if o.mf.opens > 0 {
				open++
			}
		}
		o.mu.RUnlock()
	}
	return objs, open
}

// TestPassthroughCountsMatchAWalk: Stats' PassthroughObjects and
// PassthroughOpen, kept as counters where memory files are attached,
// opened, closed and dropped, equal a walk of every object after each of
// a few hundred random opens, closes, rewrites, deletes (also while open),
// demotions and memory-file trims (a cap of 3 memory files for 8 objects).
func TestPassthroughCountsMatchAWalk(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, Config{DataDir: t.TempDir(), G2Bytes: 64 << 20, G3: newMemTier("G3", 0), FlushWorkers: 2, PassthroughMaxFiles: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rng := rand.New(rand.NewPCG(7, 7))
	type file struct {
		id    ObjectID
		opens []bool // write flag of each open
	}
	var files []*file
	newFile := func() *file {
		id, err := s.Create("ns", 64<<10, "file")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.WriteAt(ctx, id, make([]byte, 100<<10), 0); err != nil {
			t.Fatal(err)
		}
		return &file{id: id}
	}
	for range 8 {
		files = append(files, newFile())
	}
	var fds []func()
	defer func() {
		for _, c := range fds {
			c()
		}
	}()
	opened, deletedOpen := 0, 0
	var most int64
	for step := range 400 {
		f := files[rng.IntN(len(files))]
		switch op := rng.IntN(6); {
		case op <= 1:
			write := rng.IntN(2) == 0
			pt, err := s.OpenPassthrough(ctx, f.id, write)
			if err != nil {
				break // refused (every memory file open, or removed): served by the daemon
			}
			fds = append(fds, func() { pt.File.Close() })
			f.opens = append(f.opens, write)
			opened++
		case op == 2 && len(f.opens) > 0:
			w := f.opens[len(f.opens)-1]
			f.opens = f.opens[:len(f.opens)-1]
			if err := s.ClosePassthrough(f.id, w); err != nil {
				t.Fatal(err)
			}
		case op == 3:
			if _, err := s.WriteAt(ctx, f.id, make([]byte, 4096), int64(rng.IntN(100<<10))); err != nil {
				t.Fatal(err)
			}
		case op == 4:
			_, _ = s.Demote(ctx, f.id) // ErrPinned while open
		case op == 5 && rng.IntN(4) == 0:
			if len(f.opens) > 0 {
				deletedOpen++
			}
			if err := s.Delete(ctx, f.id); err != nil {
				t.Fatal(err)
			}
			*f = *newFile()
		}
		st := s.Stats()
		most = max(most, st.PassthroughObjects)
		objs, open := walkMemFiles(s)
		if st.PassthroughObjects != objs || st.PassthroughOpen != open {
			t.Fatalf("step %d: Stats says %d memory files, %d open; a walk finds %d, %d",
				step, st.PassthroughObjects, st.PassthroughOpen, objs, open)
		}
	}
	if opened < 50 || most < 2 || deletedOpen == 0 {
		t.Fatalf("the walk saw too little: %d passthrough opens, at most %d memory files, %d deletes while open", opened, most, deletedOpen)
	}
	for _, f := range files {
		for i := len(f.opens) - 1; i >= 0; i-- {
			if err := s.ClosePassthrough(f.id, f.opens[i]); err != nil {
				t.Fatal(err)
			}
		}
		f.opens = nil
	}
	if st := s.Stats(); st.PassthroughOpen != 0 {
		t.Fatalf("after every close, %d objects count as open through passthrough", st.PassthroughOpen)
	}
	for _, f := range files {
		if err := s.Delete(ctx, f.id); err != nil {
			t.Fatal(err)
		}
	}
	if st := s.Stats(); st.PassthroughObjects != 0 || st.PassthroughOpen != 0 {
		t.Fatalf("after deleting every object: %d memory files, %d open", st.PassthroughObjects, st.PassthroughOpen)
	}
}
