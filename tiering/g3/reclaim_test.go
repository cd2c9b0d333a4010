package g3

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/ctxmem/ctxmemd/tiering/tier"
	"github.com/ctxmem/ctxmemd/tiering/tiertest"
)

// evictRecorder is an OnEvict callback that reads every evicted block back
// through the store (it must still be there) and records the keys.
type evictRecorder struct {
	t     testing.TB
	store func() *Store
	want  func(tier.Key) []byte

	mu    sync.Mutex
	calls int
	keys  []tier.Key
}

func (r *evictRecorder) onEvict(keys []tier.Key) {
	s := r.store()
	for _, key := range keys {
		want := r.want(key)
		got, err := get(s, key, len(want)+1)
		if err != nil || !bytes.Equal(got, want) {
			r.t.Errorf("OnEvict: Get(%v) = %d bytes, %v; want the block still readable", key, len(got), err)
		}
	}
	r.mu.Lock()
	r.calls++
	r.keys = append(r.keys, keys...)
	r.mu.Unlock()
}

func TestReclaimFIFOWithOnEvict(t *testing.T) {
	dir := t.TempDir()
	var s *Store
	const bsz = 100 * kib
	overwritten := k(2, 0) // stored first, then rewritten twice
	var owBytes []byte     // its current bytes
	owEvicted := 0
	rec := &evictRecorder{t: t, store: func() *Store { return s },
		want: func(key tier.Key) []byte {
			if key == overwritten {
				owEvicted++
				return owBytes
			}
			return tiertest.Pattern(key, bsz, 0)
		}}
	s = openT(t, Options{Dir: dir, CapacityBytes: 8 * mib, OnEvict: rec.onEvict})
	owBytes = put(t, s, overwritten, bsz)
	deleted := k(2, 1)
	put(t, s, deleted, bsz)
	if err := s.Delete(context.Background(), deleted); err != nil {
		t.Fatal(err)
	}
	var written []tier.Key
	for i := range 300 { // 30 MiB through an 8 MiB store
		key := k(1, uint32(i))
		put(t, s, key, bsz)
		written = append(written, key)
		if i == 5 {
			owBytes = put(t, s, overwritten, 50) // newer copy, in the first segment still
		}
		if i == 20 || i == 290 { // newer copies in later segments
			d := tiertest.Pattern(overwritten, 777, uint64(i))
			if err := s.Put(context.Background(), overwritten, d); err != nil {
				t.Fatal(err)
			}
			owBytes = d
			// Reclaiming the first segment (two stale copies) must not
			// list it; reclaiming the one with the i=20 copy lists it once.
			if i == 290 && owEvicted != 1 {
				t.Fatalf("%v listed by OnEvict %d times before i=290; want 1", overwritten, owEvicted)
			}
		}
		st := s.Stats()
		if st.SegmentBytes > 8*mib {
			t.Fatalf("after put %d: %d bytes of segments > capacity", i, st.SegmentBytes)
		}
	}
	if rec.calls == 0 || s.Stats().Reclaims == 0 {
		t.Fatalf("no reclaim: %+v", s.Stats())
	}
	// FIFO: the evicted keys are exactly a prefix of the written order.
	evicted := map[tier.Key]bool{}
	for _, key := range rec.keys {
		if evicted[key] {
			t.Fatalf("%v evicted twice", key)
		}
		evicted[key] = true
	}
	if evicted[deleted] {
		t.Fatal("a deleted block was reported evicted")
	}
	present := 0
	for i, key := range written {
		got, err := get(s, key, bsz)
		switch {
		case evicted[key]:
			if !errors.Is(err, tier.ErrNotFound) {
				t.Fatalf("evicted %v: Get = %v", key, err)
			}
			if i > 0 && !evicted[written[i-1]] {
				t.Fatalf("evicted %v but not the older %v: not FIFO", key, written[i-1])
			}
		case err != nil:
			t.Fatalf("%v neither evicted nor readable: %v", key, err)
		default:
			present++
			if !bytes.Equal(got, tiertest.Pattern(key, bsz, 0)) {
				t.Fatalf("%v: wrong bytes", key)
			}
		}
	}
	if int64(len(rec.keys)) != s.Stats().Evicted {
		t.Fatalf("OnEvict got %d keys, Stats.Evicted = %d", len(rec.keys), s.Stats().Evicted)
	}
	mustRead(t, s, overwritten, tiertest.Pattern(overwritten, 777, 290))
	mustNotFound(t, s, deleted)
	if u := s.Usage(); u.Blocks != int64(present+1) {
		t.Fatalf("Usage.Blocks = %d, want %d", u.Blocks, present+1)
	}
	// Low watermark: after a reclaim the store holds at most 6 segments
	// (0.75 × 8), and it never held more than 8.
	if st := s.Stats(); st.Segments > 8 || st.Segments < 2 {
		t.Fatalf("Segments = %d", st.Segments)
	}
	// After restart the same blocks are present.
	s.Close()
	s = openT(t, Options{Dir: dir, CapacityBytes: 8 * mib, OnEvict: rec.onEvict})
	if u := s.Usage(); u.Blocks != int64(present+1) {
		t.Fatalf("after reopen Usage.Blocks = %d, want %d", u.Blocks, present+1)
	}
	mustRead(t, s, overwritten, tiertest.Pattern(overwritten, 777, 290))
	mustNotFound(t, s, deleted)
	// Reclaimed files are reused: their old records (old salt) never come
	// back, even when a crash leaves a spare renamed to the next segment id
	// before its new header was written.
	delete(evicted, overwritten) // rewritten after its eviction
	spares, _ := filepath.Glob(filepath.Join(dir, "*.spare"))
	if len(spares) == 0 {
		t.Fatal("no spare segment files kept")
	}
	s.Close()
	segs := segFiles(t, dir)
	last, _ := parseSegName(filepath.Base(segs[len(segs)-1]))
	if err := os.Rename(spares[0], filepath.Join(dir, segName(last+1))); err != nil {
		t.Fatal(err)
	}
	s = openT(t, Options{Dir: dir, CapacityBytes: 8 * mib, OnEvict: rec.onEvict})
	for key := range evicted {
		mustNotFound(t, s, key)
	}
	if u := s.Usage(); u.Blocks != int64(present+1) {
		t.Fatalf("after a crash mid-reuse Usage.Blocks = %d, want %d", u.Blocks, present+1)
	}
	if _, err := os.Stat(filepath.Join(dir, segName(last+1))); !os.IsNotExist(err) {
		t.Fatalf("half-reused segment not removed: %v", err)
	}
	// Keep writing through reused files; everything reads back.
	for i := 300; i < 400; i++ {
		put(t, s, k(1, uint32(i)), bsz)
	}
	for i := 390; i < 400; i++ {
		mustRead(t, s, k(1, uint32(i)), tiertest.Pattern(k(1, uint32(i)), bsz, 0))
	}
	s.Close()
	s = openT(t, Options{Dir: dir, CapacityBytes: 8 * mib, OnEvict: rec.onEvict})
	for key := range evicted {
		mustNotFound(t, s, key)
	}
	for i := 390; i < 400; i++ {
		mustRead(t, s, k(1, uint32(i)), tiertest.Pattern(k(1, uint32(i)), bsz, 0))
	}
}

// TestReclaimRacesReaders: readers hammer blocks while writers push the
// store through many reclaims; every read is the right bytes or a miss.
func TestReclaimRacesReaders(t *testing.T) {
	s := openT(t, Options{Dir: t.TempDir(), CapacityBytes: 4 * mib, HighWatermark: 0.8, LowWatermark: 0.5})
	ctx := context.Background()
	const n, bsz = 200, 40 * kib
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errc := make(chan error, 8)
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 2 {
				key := k(3, uint32(i))
				if err := s.Put(ctx, key, tiertest.Pattern(key, bsz, 0)); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	var rg sync.WaitGroup
	for r := range 3 {
		rg.Add(1)
		go func() {
			defer rg.Done()
			p := make([]byte, bsz)
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				key := k(3, uint32((j*7+r)%n))
				got, err := s.Get(ctx, key, p, 0)
				if errors.Is(err, tier.ErrNotFound) {
					continue
				}
				if err != nil || !bytes.Equal(p[:got], tiertest.Pattern(key, bsz, 0)) {
					errc <- errors.New("reader saw wrong bytes or an error: " + key.String())
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	rg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if s.Stats().Reclaims == 0 {
		t.Fatal("no reclaim happened")
	}
}

// TestENOSPC fills a small tmpfs for real.
func TestENOSPC(t *testing.T) {
	mnt := mountTmpfs(t, "4m")
	ctx := context.Background()

	// A full filesystem with nothing to reclaim: ErrNoSpace, no leftovers.
	dir := filepath.Join(mnt, "g3")
	filler := filepath.Join(mnt, "filler")
	fill(t, filler)
	s, err := Open(Options{Dir: dir, SegmentBytes: mib, Logger: quietLogger()})
	if err != nil {
		t.Fatalf("Open on a full filesystem: %v", err)
	}
	key := k(1, 0)
	if err := s.Put(ctx, key, []byte("hello")); !errors.Is(err, tier.ErrNoSpace) {
		t.Fatalf("Put on a full filesystem = %v; want ErrNoSpace", err)
	}
	if u := s.Usage(); u.Blocks != 0 {
		t.Fatalf("Usage after ErrNoSpace = %+v", u)
	}
	if n := len(segFiles(t, dir)); n != 0 {
		t.Fatalf("%d segment files left after ENOSPC", n)
	}
	mustNotFound(t, s, key)
	if s.Stats().NoSpace == 0 {
		t.Fatal("Stats.NoSpace not counted")
	}
	// Space comes back: the store works.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	d := put(t, s, key, 5000)
	mustRead(t, s, key, d)
	s.Close()

	// Unbounded capacity on a 4 MiB filesystem: ENOSPC while rolling
	// reclaims the oldest segment (OnEvict first) and the Put succeeds.
	var s2 *Store
	rec := &evictRecorder{t: t, store: func() *Store { return s2 },
		want: func(key tier.Key) []byte { return tiertest.Pattern(key, 64*kib, 0) }}
	s2, err = Open(Options{Dir: filepath.Join(mnt, "g3b"), SegmentBytes: mib, OnEvict: rec.onEvict, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	var last tier.Key
	for i := range 200 { // 12.5 MiB
		last = k(2, uint32(i))
		put(t, s2, last, 64*kib)
	}
	st := s2.Stats()
	if st.NoSpace == 0 || st.Reclaims == 0 || rec.calls == 0 {
		t.Fatalf("expected ENOSPC-driven reclaim: %+v, OnEvict calls %d", st, rec.calls)
	}
	mustRead(t, s2, last, tiertest.Pattern(last, 64*kib, 0))
	listed := 0
	if err := s2.Range(ctx, func(key tier.Key, n int64) bool {
		listed++
		mustRead(t, s2, key, tiertest.Pattern(key, int(n), 0))
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if int64(listed) != s2.Usage().Blocks || listed == 0 {
		t.Fatalf("Range listed %d, Usage %+v", listed, s2.Usage())
	}
	// The first store's block is still intact on the same filesystem.
	s2.Close()
	s, err = Open(Options{Dir: dir, SegmentBytes: mib, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mustRead(t, s, key, d)
}

// fill writes zeros to path until the filesystem is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64*kib)
	for {
		if _, err := f.Write(buf); err != nil {
			break
		}
	}
	for {
		if _, err := f.Write(buf[:512]); err != nil {
			return
		}
	}
}

// TestDeleteDuringReclaimSurvivesCrash: a Delete that runs after OnEvict
// returned, while the reclaimed segment is still in the log on disk, must
// leave a tombstone. Taking the key for missing there (its index entry
// already dropped) let a kill -9 before the segment left the log bring the
// deleted block back at the next Open: an NBD TRIM acknowledged by FLUSH
// read the old bytes again after a restart (found by the crash soak).
func TestDeleteDuringReclaimSurvivesCrash(t *testing.T) {
	dir := t.TempDir()
	snap := t.TempDir()
	const bsz = 100 * kib
	victim := k(1, 0)
	var s *Store
	var once sync.Once
	snapped := make(chan struct{})
	hook := func(point string) {
		if point != "reclaim-evicted" {
			return
		}
		once.Do(func() {
			// Another goroutine deletes the victim now (as the core's GC
			// does), then the directory is copied as a kill -9 would
			// leave it.
			done := make(chan error, 1)
			go func() { done <- s.Delete(context.Background(), victim) }()
			if err := <-done; err != nil {
				t.Errorf("Delete during reclaim: %v", err)
			}
			copySegments(t, dir, snap)
			close(snapped)
		})
	}
	s = openT(t, Options{Dir: dir, CapacityBytes: 8 * mib, HighWatermark: 0.5, LowWatermark: 0.25,
		OnEvict: func([]tier.Key) {}})
	s.testHook = hook
	put(t, s, victim, bsz)
	for i := uint32(1); ; i++ {
		put(t, s, k(2, i), bsz)
		select {
		case <-snapped:
		default:
			if i > 200 {
				t.Fatal("no reclaim after 200 puts")
			}
			continue
		}
		break
	}
	c, err := Open(Options{Dir: snap, SegmentBytes: mib, Logger: quietLogger()})
	if err != nil {
		t.Fatalf("Open of the crash copy: %v", err)
	}
	defer c.Close()
	if got, err := get(c, victim, bsz); !errors.Is(err, tier.ErrNotFound) {
		t.Fatalf("after a crash, the deleted block reads %d bytes, err %v; want tier.ErrNotFound", len(got), err)
	}
}

// copySegments copies the segment files of dir (not spares, not the lock)
// into dst: the log as a crash at that moment would leave it.
func copySegments(t *testing.T, dir, dst string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if _, ok := parseSegName(e.Name()); !ok {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRelocateKeepsBlockThroughReclaim: OnEvict relocates one of the keys
// it is given; that block survives the reclaim and a reopen, while the
// other blocks of the segment are gone; a later Put of the key wins over
// the relocated record, also after a reopen.
func TestRelocateKeepsBlockThroughReclaim(t *testing.T) {
	dir := t.TempDir()
	const bsz = 100 * kib
	keep, other := k(1, 0), k(1, 1)
	var s *Store
	relocated := 0
	var relocErr error
	opts := Options{Dir: dir, SegmentBytes: mib, CapacityBytes: 8 * mib, HighWatermark: 0.5, LowWatermark: 0.25,
		OnEvict: func(keys []tier.Key) {
			for _, key := range keys {
				if key == keep {
					relocErr = s.Relocate(context.Background(), key)
					relocated++
				}
			}
		}}
	s = openT(t, opts)
	want := put(t, s, keep, bsz)
	put(t, s, other, bsz)
	for i := uint32(0); relocated == 0; i++ {
		if i > 200 {
			t.Fatal("no reclaim after 200 puts")
		}
		put(t, s, k(2, i), bsz)
	}
	if relocErr != nil {
		t.Fatalf("Relocate: %v", relocErr)
	}
	mustRead(t, s, keep, want)
	if _, err := get(s, other, bsz); !errors.Is(err, tier.ErrNotFound) {
		t.Fatalf("unrelocated block after reclaim: %v; want ErrNotFound", err)
	}
	if st := s.Stats(); st.Relocated != 1 {
		t.Fatalf("Stats.Relocated = %d; want 1", st.Relocated)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	opts.OnEvict = nil
	s = openT(t, opts)
	mustRead(t, s, keep, want)
	newer := tiertest.Pattern(keep, bsz, 7)
	if err := s.Put(context.Background(), keep, newer); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openT(t, opts)
	mustRead(t, s, keep, newer)
}

// TestPostponeReclaim: an OnEvict that calls PostponeReclaim keeps the
// segment and every block in it (also across a reopen); the next reclaim
// without it goes ahead.
func TestPostponeReclaim(t *testing.T) {
	dir := t.TempDir()
	const bsz = 100 * kib
	first := k(1, 0)
	var s *Store
	postpone, calls := true, 0
	opts := Options{Dir: dir, SegmentBytes: mib, CapacityBytes: 8 * mib, HighWatermark: 0.5, LowWatermark: 0.25,
		OnEvict: func(keys []tier.Key) {
			calls++
			if postpone {
				s.PostponeReclaim()
			}
		}}
	s = openT(t, opts)
	want := put(t, s, first, bsz)
	for i := uint32(0); calls == 0; i++ {
		if i > 200 {
			t.Fatal("no reclaim after 200 puts")
		}
		put(t, s, k(2, i), bsz)
	}
	mustRead(t, s, first, want)
	if st := s.Stats(); st.Postponed == 0 || st.Reclaims != 0 {
		t.Fatalf("Postponed %d, Reclaims %d; want the reclaim postponed", st.Postponed, st.Reclaims)
	}
	postpone = false
	for i := uint32(1000); s.Stats().Reclaims == 0; i++ {
		if i > 1200 {
			t.Fatal("no reclaim after postponing stopped")
		}
		put(t, s, k(2, i), bsz)
	}
	if _, err := get(s, first, bsz); !errors.Is(err, tier.ErrNotFound) {
		t.Fatalf("first block after the reclaim went ahead: %v; want ErrNotFound", err)
	}
}
