package workloads

import (
	"context"
	"fmt"
	"math/rand"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// RunW2 replays LMCache's LocalDisk backend (ENGINES.md W2) in
// dir/w2-lmcache: Params.Ranks ranks with Params.Workers threads each put
// Params.Objects keys in place at their final names — buffered
// O_WRONLY|O_CREAT|O_TRUNC, or, when the size is a multiple of statvfs
// f_bsize, O_WRONLY|O_CREAT|O_DIRECT without O_TRUNC and one write from an
// aligned buffer — while gets (O_RDONLY[|O_DIRECT], one read of the whole
// object) take priority. Puts evict least recently used keys synchronously
// while the bytes held exceed Params.CapBytes. A "restarted" process then
// overwrites every key with a new generation of the same size (no O_TRUNC
// on the O_DIRECT path), and finally readers race unlinks.
//
// Checks: O_DIRECT accepted (Params.RequireODirect); aligned O_DIRECT
// writes and reads complete in one syscall; keys whose size is not a
// multiple of f_bsize take the buffered path and read back intact; f_bsize
// as expected; an overwrite without O_TRUNC reads back the new generation
// only; a read racing an unlink returns the full object or ENOENT; ENOENT
// after every unlink; bytes read equal bytes written.
func RunW2(ctx context.Context, dir string, p Params) (Report, error) {
	return runWorkload("W2", dir, "w2-lmcache", p, func(b base) error {
		return (&w2{base: b}).run(ctx)
	})
}

type w2 struct {
	base
	bsize int64
	cap   int64
	keys  [][]*object // rank → keys
	evict sync.Mutex  // one synchronous eviction at a time
}

// w2task is one unit of work for a rank's worker pool.
type w2task struct {
	o    *object
	put  bool
	done *sync.WaitGroup // the producer's batch
}

func (w *w2) run(ctx context.Context) error {
	r := w.r
	p := r.p
	start, ok := r.statvfs(w.root, "W2 start")
	if !ok || start.bsize <= 0 {
		return fmt.Errorf("statvfs %s unusable", w.root)
	}
	w.bsize = start.bsize
	var total int64
	for rank := 0; rank < p.Ranks; rank++ {
		var ks []*object
		for i := 0; i < p.Objects; i++ {
			size := p.ObjectSize
			if i%4 == 3 {
				size -= 1000 // not a multiple of f_bsize: LMCache's buffered fallback
			}
			name := fmt.Sprintf("Llama-3.1-8B@%d@%d@%016x@bfloat16.pt", p.Ranks, rank, KeyHash(fmt.Sprint(p.Seed, rank, i)))
			ks = append(ks, w.g.get(filepath.Join(w.root, name), name, size))
			total += size
		}
		w.keys = append(w.keys, ks)
	}
	w.cap = p.CapBytes
	if w.cap == 0 {
		w.cap = total / 2
	}

	// Phase 1: puts and prioritised gets on every rank.
	var wg sync.WaitGroup
	for rank := 0; rank < p.Ranks; rank++ {
		wg.Add(1)
		go func() { defer wg.Done(); w.rank(ctx, rank) }()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}

	// Phase 2: a new process re-puts every key it finds by name, same size.
	buf, free, err := alignedBuf(int(p.ObjectSize))
	if err != nil {
		return err
	}
	defer free()
	for i, o := range w.g.present(w.root, false) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		gen := w.put(o, buf, i%2 == 0, "restart re-put")
		if gen == 0 {
			continue
		}
		direct := o.size%w.bsize == 0
		fd, _, err := r.open(o.path, unix.O_RDONLY, 0, direct)
		if !r.check(err == nil, "restart re-put: open %s: %v", o.path, err) {
			continue
		}
		n, err := r.readAt(fd, buf[:o.size], -1)
		r.closeFD(fd, "restart re-put read")
		if r.check(err == nil && int64(n) == o.size, "restart re-put: read %s: %d of %d bytes, err %v", o.path, n, o.size, err) {
			r.read.Add(int64(n))
			at := Verify(buf[:o.size], o.key, gen, 0)
			r.check(at < 0, "overwrite of %s without O_TRUNC: byte %d is not from the new generation %d (%s)",
				o.path, at, gen, w.describeAt(o, buf[:o.size], at))
		}
	}

	held := r.finalAudit(w.g, w.root, buf, false)
	after, _ := r.statvfs(w.root, "W2 after puts")
	r.expectFreeMove(w.root, start, -held, "W2 statvfs after puts")

	// Phase 3: readers race unlinks; the rest is unlinked at shutdown.
	w.raceUnlinks(ctx)
	for _, o := range w.g.present(w.root, false) {
		r.unlinkObject(w.g, o, "W2 shutdown unlink")
	}
	r.expectFreeMove(w.root, after, held, "W2 statvfs after unlinks")
	return nil
}

func (w *w2) describeAt(o *object, b []byte, at int) string {
	if at < 0 {
		return ""
	}
	_, why := matchGen(b, o.key, 0, w.g.gensOf(o))
	return why
}

// rank runs one rank: a producer of puts and gets and Params.Workers
// workers that always take a pending get before a put.
func (w *w2) rank(ctx context.Context, rank int) {
	r := w.r
	gets := make(chan w2task, 16)
	puts := make(chan w2task, 16)
	var wg sync.WaitGroup
	for i := 0; i < r.p.Workers; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); w.worker(ctx, gets, puts) }()
	}
	// Batches of Workers puts; each batch also prefetches keys of the
	// batches before it (recent ones mostly), as a serving engine does.
	rng := rand.New(rand.NewSource(r.p.Seed*31 + int64(rank)))
	keys := w.keys[rank]
	for b := 0; b < len(keys) && ctx.Err() == nil; b += r.p.Workers {
		var batch sync.WaitGroup
		for _, o := range keys[b:min(b+r.p.Workers, len(keys))] {
			batch.Add(1)
			puts <- w2task{o: o, put: true, done: &batch}
		}
		for j := 0; j < r.p.Workers && b > 0; j++ {
			batch.Add(1)
			gets <- w2task{o: keys[b-1-rng.Intn(min(b, 2*r.p.Workers))], done: &batch}
		}
		batch.Wait()
	}
	close(gets)
	close(puts)
	wg.Wait()
}

func (w *w2) worker(ctx context.Context, gets, puts <-chan w2task) {
	r := w.r
	buf, free, err := alignedBuf(int(r.p.ObjectSize))
	if err != nil {
		r.failf("worker buffer: %v", err)
		return
	}
	defer free()
	for n := 0; gets != nil || puts != nil; n++ {
		var t w2task
		var ok bool
		select { // prefetch (get) has priority over put
		case t, ok = <-gets:
			if !ok {
				gets = nil
				continue
			}
		default:
			select {
			case t, ok = <-gets:
				if !ok {
					gets = nil
					continue
				}
			case t, ok = <-puts:
				if !ok {
					puts = nil
					continue
				}
			}
		}
		w.do(ctx, t, buf, n)
		t.done.Done()
	}
}

// do performs one put or get.
func (w *w2) do(ctx context.Context, t w2task, buf []byte, n int) {
	r := w.r
	if ctx.Err() != nil {
		return
	}
	if t.put {
		if w.put(t.o, buf, n%2 == 0, "put") != 0 {
			w.evictOver()
		}
		return
	}
	if !w.g.isPresent(t.o) {
		r.misses.Add(1) // not in LMCache's index: evicted
		return
	}
	switch r.readObject(w.g, t.o, buf, t.o.size%w.bsize == 0, "get") {
	case readOK:
		r.hits.Add(1)
		w.g.touch(t.o)
	case readGone:
		r.misses.Add(1) // raced an eviction
	}
}

// put writes a new generation of o in place at its final name and returns
// it (0 on failure). Aligned sizes take the O_DIRECT path (no O_TRUNC, one
// write) when preferDirect; others the buffered O_TRUNC path.
func (w *w2) put(o *object, buf []byte, preferDirect bool, what string) uint64 {
	r := w.r
	o.pub.Lock()
	defer o.pub.Unlock()
	direct := preferDirect && o.size%w.bsize == 0
	flags := unix.O_WRONLY | unix.O_CREAT
	if !direct {
		flags |= unix.O_TRUNC
	}
	gen := w.g.newGen(o)
	Fill(buf[:o.size], o.key, gen, 0)
	fd, isDirect, err := r.open(o.path, flags, 0o644, direct)
	if !r.check(err == nil, "%s: open %s: %v", what, o.path, err) {
		return 0
	}
	if direct && !isDirect { // fell back: LMCache then truncates as mode A does
		r.op(1)
		_ = unix.Ftruncate(fd, 0)
	}
	ok := r.writeAt(fd, buf[:o.size], -1, fmt.Sprintf("%s %s (O_DIRECT=%v)", what, o.path, isDirect))
	ok = r.closeFD(fd, what+" "+o.path) && ok
	if !ok {
		return 0
	}
	st, err := r.stat(o.path)
	r.check(err == nil && st.Size == o.size, "%s: stat %s after put: size %d err %v, want %d", what, o.path, st.Size, err, o.size)
	w.g.setPresent(o, true)
	return gen
}

// evictOver unlinks least recently used keys while the bytes held exceed
// the cap (LMCache's synchronous eviction on put).
func (w *w2) evictOver() {
	w.evict.Lock()
	defer w.evict.Unlock()
	held := w.g.heldBytes()
	for _, o := range w.g.present(w.root, false) {
		if held <= w.cap {
			return
		}
		if w.r.unlinkObject(w.g, o, "W2 evict") {
			held -= o.size
		}
	}
}

// raceUnlinks reads objects while another goroutine unlinks them: every
// read must return the whole object or fail to open with ENOENT.
func (w *w2) raceUnlinks(ctx context.Context) {
	r := w.r
	victims := w.g.present(w.root, false)
	victims = victims[:min(len(victims), 2*r.p.Workers)]
	var wg sync.WaitGroup
	for _, o := range victims {
		wg.Add(2)
		started := make(chan struct{})
		go func() {
			defer wg.Done()
			var once sync.Once
			signal := func() { once.Do(func() { close(started) }) }
			defer signal()
			buf := make([]byte, o.size)
			for ctx.Err() == nil {
				res := r.readObject(w.g, o, buf, false, "read racing unlink")
				signal() // the first read is done: let the unlinker go
				if res != readOK {
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			<-started
			r.unlinkObject(w.g, o, "W2 unlink racing reads")
		}()
	}
	wg.Wait()
}
