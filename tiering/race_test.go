package tiering_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/tiering"
	"github.com/ctxmem/ctxmemd/tiering/faulttier"
	"github.com/ctxmem/ctxmemd/tiering/g3"
	"github.com/ctxmem/ctxmemd/tiering/g4"
)

// faultStack is a store over real G3 (and optionally G4 on a directory),
// each wrapped in a fault-injecting tier.
type faultStack struct {
	dir      string
	store    *tiering.Store
	g3, g4   *faulttier.Tier
	g3s      *g3.Store
	g4t      *g4.Tier
	g2Bytes  int64
	g3Bytes  int64
	extraCfg func(*tiering.Config)
}

func openFaultStack(t *testing.T, dir string, g2, g3cap int64, withG4 bool, extra func(*tiering.Config)) *faultStack {
	t.Helper()
	fs := &faultStack{dir: dir, g2Bytes: g2, g3Bytes: g3cap, extraCfg: extra}
	fs.open(t, withG4)
	return fs
}

func (fs *faultStack) open(t *testing.T, withG4 bool) {
	t.Helper()
	var err error
	fs.g3s, err = g3.Open(g3.Options{Dir: filepath.Join(fs.dir, "g3"), SegmentBytes: 1 << 20, CapacityBytes: fs.g3Bytes, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	fs.g3 = faulttier.Wrap(fs.g3s)
	cfg := tiering.Config{DataDir: fs.dir, G2Bytes: fs.g2Bytes, G3: fs.g3, Logger: quiet}
	if withG4 {
		local, err := g4.NewLocal(filepath.Join(fs.dir, "g4"))
		if err != nil {
			t.Fatal(err)
		}
		if fs.g4t, err = g4.NewTier(context.Background(), local, g4.TierOptions{}); err != nil {
			t.Fatal(err)
		}
		fs.g4 = faulttier.Wrap(fs.g4t)
		cfg.G4 = fs.g4
	}
	if fs.extraCfg != nil {
		fs.extraCfg(&cfg)
	}
	if fs.store, err = tiering.Open(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
}

func (fs *faultStack) close(t *testing.T) {
	t.Helper()
	if err := fs.store.Close(); err != nil {
		t.Error(err)
	}
	fs.g3s.Close()
	if fs.g4t != nil {
		fs.g4t.Close()
	}
}

// flushWithin fails the test when Flush does not return within d (the
// write-back race made fsync wait forever).
func flushWithin(t *testing.T, s *tiering.Store, id tiering.ObjectID, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := s.Flush(ctx, id); err != nil {
		t.Fatalf("flush object %d: %v", id, err)
	}
}

func readAll(t *testing.T, s *tiering.Store, id tiering.ObjectID, n int) []byte {
	t.Helper()
	got := make([]byte, n)
	m, err := s.ReadAt(context.Background(), id, got, 0)
	if err != nil {
		t.Fatalf("read object %d: %v", id, err)
	}
	return got[:m]
}

// TestWriteBackRaceTruncateRewrite is issue 11 item 1, made deterministic:
// the write-back of block 4 is held inside its G3 put while a shrinking
// truncate drops the block and a new write creates it again. Before the
// fix the old put marked the new block clean with the old bytes' tier flag
// (the version of a fresh block state restarts at 0), the second put
// decremented the dirty count below zero and Flush waited forever; after
// eviction the block read the old bytes.
func TestWriteBackRaceTruncateRewrite(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	fs := openFaultStack(t, dir, 4<<20, 0, false, nil)
	const bs = 64 << 10
	id, err := fs.store.Create("ns", bs, "file")
	if err != nil {
		t.Fatal(err)
	}
	oldB, newB := data(1, 4096), data(2, 4096)
	gate := faulttier.NewGate()
	remove := fs.g3.Inject(faulttier.Fault{Op: faulttier.Put, Match: faulttier.Block(4), Gate: gate})
	if _, err := fs.store.WriteAt(ctx, id, oldB, 256<<10); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gate.Arrived():
	case <-time.After(5 * time.Second):
		t.Fatal("write-back of block 4 never reached G3")
	}
	if err := fs.store.Truncate(ctx, id, 4096); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.store.WriteAt(ctx, id, newB, 256<<10); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // let a second worker try the new block
	remove()
	gate.Release()
	flushWithin(t, fs.store, id, 10*time.Second)
	if info, _ := fs.store.Stat(id); info.Dirty {
		t.Fatal("object still dirty after Flush")
	}
	want := make([]byte, 256<<10+4096)
	copy(want[256<<10:], newB)
	check := func(when string) {
		if got := readAll(t, fs.store, id, len(want)); !bytes.Equal(got, want) {
			i := 0
			for i < len(got) && i < len(want) && got[i] == want[i] {
				i++
			}
			t.Fatalf("%s: bytes differ at offset %d (len %d, want %d)", when, i, len(got), len(want))
		}
	}
	check("in G2")
	if _, err := fs.store.Demote(ctx, id); err != nil {
		t.Fatal(err)
	}
	check("after demote")
	fs.close(t)
	fs.open(t, false)
	defer fs.close(t)
	check("after restart")
}

// TestWriteBackRaceLoop is the black-box reproduction of issue 11 item 1
// (pwrite 4 KiB at 256 KiB, ftruncate to 4 KiB, pwrite 4 KiB at 256 KiB
// again, fsync every 25 rounds) on many objects at once, over a G3 whose
// puts stall a little so write-back is always in flight. Every Flush must
// return, and every object must read its last bytes in G2, after a demote
// and after a restart.
func TestWriteBackRaceLoop(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	fs := openFaultStack(t, dir, 32<<20, 0, true, nil)
	fs.g3.Inject(faulttier.Fault{Op: faulttier.Put, Delay: 300 * time.Microsecond})
	fs.g4.Inject(faulttier.Fault{Op: faulttier.Put, Delay: 500 * time.Microsecond})
	const objects, rounds = 16, 150
	ids := make([]tiering.ObjectID, objects)
	last := make([][]byte, objects)
	var wg sync.WaitGroup
	errs := make(chan error, objects)
	for i := range ids {
		id, err := fs.store.Create("ns", 64<<10, "file")
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 9))
			for r := 0; r < rounds; r++ {
				a, b := data(rng.Uint64(), 4096), data(rng.Uint64(), 4096)
				if _, err := fs.store.WriteAt(ctx, ids[i], a, 256<<10); err != nil {
					errs <- err
					return
				}
				if err := fs.store.Truncate(ctx, ids[i], 4096); err != nil {
					errs <- err
					return
				}
				if _, err := fs.store.WriteAt(ctx, ids[i], b, 256<<10); err != nil {
					errs <- err
					return
				}
				last[i] = b
				if r%25 == 24 {
					fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
					err := fs.store.Flush(fctx, ids[i])
					cancel()
					if err != nil {
						errs <- fmt.Errorf("object %d round %d: flush: %w", i, r, err)
						return
					}
				}
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		bad := 0
		for i, id := range ids {
			got := readAll(t, fs.store, id, 256<<10+4096)
			if len(got) != 256<<10+4096 || !bytes.Equal(got[256<<10:], last[i]) || !bytes.Equal(got[4096:256<<10], make([]byte, 252<<10)) {
				bad++
			}
		}
		if bad > 0 {
			t.Fatalf("%s: %d of %d objects read wrong bytes", when, bad, len(ids))
		}
	}
	for _, id := range ids {
		flushWithin(t, fs.store, id, 20*time.Second)
	}
	check("in G2")
	for _, id := range ids {
		if _, err := fs.store.Demote(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	check("after demote")
	for _, id := range ids {
		if _, err := fs.store.Sink(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	check("after sink")
	fs.close(t)
	fs.open(t, true)
	defer fs.close(t)
	check("after restart")
}
