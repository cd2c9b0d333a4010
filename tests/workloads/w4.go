package workloads

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// RunW4 replays NIXL's POSIX plugin as SGLang and LMCache drive it
// (ENGINES.md W4) in dir/w4-nixl: each rank stores Params.Objects pages as
// `<2-hex bucket>/<key>_k` and `_v` files of Params.ObjectSize bytes, opened
// O_RDWR|O_CREAT|O_DIRECT (0644, no O_TRUNC) and written with native AIO
// (IOCB_CMD_PWRITE at offset 0, io_submit in groups of at most 64 iocbs,
// io_getevents polled with a zero timeout); reads are O_RDONLY|O_DIRECT
// IOCB_CMD_PREAD after a stat per key. Pages are then overwritten in place
// without truncation, misaligned O_DIRECT I/O is probed, and a cleaner
// unlinks the oldest pages by mtime while the bytes held exceed 80 % of
// Params.CapBytes (down to 70 %).
//
// Checks: every AIO completes with the full length (no EINVAL or
// EOPNOTSUPP on O_DIRECT files); a misaligned buffer, offset or length is
// either rejected with EINVAL (required when Params.StrictDIO) or written
// exactly; a file overwritten without O_TRUNC keeps its size, and a partial
// overwrite leaves the old bytes after it; stat per key gives the full
// size; every byte read back matches its generation.
func RunW4(ctx context.Context, dir string, p Params) (Report, error) {
	return runWorkload("W4", dir, "w4-nixl", p, func(b base) error {
		return (&w4{base: b}).run(ctx)
	})
}

type w4 struct {
	base
	cap int64
}

// files returns the _k and _v objects of rank's page i.
func (w *w4) files(rank, i int) [2]*object {
	h := KeyHash(fmt.Sprint("w4", w.r.p.Seed, rank, i))
	dir := filepath.Join(w.root, fmt.Sprintf("%02x", h%256))
	base := fmt.Sprintf("%016x", h)
	var out [2]*object
	for j, suf := range []string{"_k", "_v"} {
		path := filepath.Join(dir, base+suf)
		out[j] = w.g.get(path, path, w.r.p.ObjectSize)
	}
	return out
}

func (w *w4) run(ctx context.Context) error {
	r := w.r
	p := r.p
	w.cap = p.CapBytes
	if w.cap == 0 {
		w.cap = int64(p.Ranks*p.Objects) * 2 * p.ObjectSize / 2
	}
	start, _ := r.statvfs(w.root, "W4 start")
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := make(chan struct{})
	var bg, ranks sync.WaitGroup
	for rank := 0; rank < p.Ranks; rank++ {
		ranks.Add(1)
		go func() { defer ranks.Done(); w.rank(ctx, rank) }()
	}
	ranks.Wait() // ranks store, read and overwrite; then the cleaner runs against readers
	if ctx.Err() != nil {
		return ctx.Err()
	}
	bg.Add(1)
	go func() { defer bg.Done(); w.cleaner(stop) }()
	for rank := 0; rank < p.Ranks; rank++ {
		ranks.Add(1)
		go func() { defer ranks.Done(); w.readAll(ctx, rank, "read during cleaning") }()
	}
	ranks.Wait()
	close(stop)
	bg.Wait()

	buf, free, err := alignedBuf(int(p.ObjectSize))
	if err != nil {
		return err
	}
	defer free()
	var held int64
	seen := map[string]bool{}
	for _, o := range w.g.present("", false) {
		if d := filepath.Dir(o.path); !seen[d] {
			seen[d] = true
			held += r.finalAudit(w.g, d, buf, true)
		}
	}
	after, _ := r.statvfs(w.root, "W4 after stores")
	r.expectFreeMove(w.root, start, -held, "W4 statvfs after stores")
	var freed int64
	for _, o := range w.g.present("", true) {
		if r.unlinkObject(w.g, o, "W4 shutdown unlink") {
			freed += o.size
		}
	}
	r.expectFreeMove(w.root, after, freed, "W4 statvfs after unlinks")
	return nil
}

// batchPages is how many pages (two files each) one AIO batch carries:
// up to 128, as in NIXL, bounded to 128 MiB of buffers.
func (w *w4) batchPages() int {
	return max(1, min(w.r.p.Objects, 128, int((128<<20)/(2*w.r.p.ObjectSize))))
}

// rank stores all pages of a rank, reads them back, overwrites them in
// place, and probes misaligned O_DIRECT I/O.
func (w *w4) rank(ctx context.Context, rank int) {
	r := w.r
	pages := make([]int, r.p.Objects)
	for i := range pages {
		pages[i] = i
	}
	w.store(ctx, rank, pages, "store")
	w.readAll(ctx, rank, "read back")
	// Overwrite every other page in place (no O_TRUNC) with a new generation.
	var odd []int
	for i := 1; i < r.p.Objects; i += 2 {
		odd = append(odd, i)
	}
	w.store(ctx, rank, odd, "overwrite without O_TRUNC")
	w.readAll(ctx, rank, "read after overwrite")
	w.partialOverwrite(rank)
	w.misaligned(rank)
}

// aioBatch opens one file per object (writes: O_RDWR|O_CREAT, reads:
// O_RDONLY; O_DIRECT requested), runs one IOCB per file over aligned
// buffers and closes them, recording every failure. fill prepares a buffer
// before a write; check judges a buffer after a full read.
func (w *w4) aioBatch(ctx context.Context, objs []*object, write bool, what string,
	fill func(o *object, b []byte), check func(o *object, b []byte)) {
	r := w.r
	if len(objs) == 0 {
		return
	}
	size := int(r.p.ObjectSize)
	mem, free, err := alignedBuf(size * len(objs))
	if err != nil {
		r.failf("%s: %v", what, err)
		return
	}
	defer free()
	actx, err := newAIO(len(objs))
	if err != nil {
		r.failf("%s: %v", what, err)
		return
	}
	defer actx.destroy()
	flags := unix.O_RDONLY
	if write {
		flags = unix.O_RDWR | unix.O_CREAT
	}
	var ops []aioOp
	var opObjs []*object
	for i, o := range objs {
		fd, _, err := r.open(o.path, flags, 0o644, true)
		if err != nil {
			if !write && isNotExist(err) {
				r.misses.Add(1) // cleaned since the stat
				continue
			}
			r.failf("%s: open %s: %v", what, o.path, err)
			continue
		}
		b := mem[i*size : (i+1)*size]
		if write {
			fill(o, b)
		}
		ops = append(ops, aioOp{write: write, fd: fd, buf: b, res: math.MinInt64})
		opObjs = append(opObjs, o)
	}
	calls, err := actx.do(ctx, ops)
	r.op(calls)
	if err != nil {
		r.failf("%s: %v", what, err)
	}
	for i, op := range ops {
		o := opObjs[i]
		switch {
		case op.res == math.MinInt64:
			r.failf("%s: %s: AIO never completed", what, o.path)
		case op.res < 0:
			r.failf("%s: %s: AIO %s returned %v", what, o.path, map[bool]string{true: "PWRITE", false: "PREAD"}[write], unix.Errno(-op.res))
		case op.res != int64(len(op.buf)):
			r.failf("%s: %s: AIO transferred %d of %d bytes", what, o.path, op.res, len(op.buf))
		default:
			r.check(true, "")
			if write {
				r.written.Add(op.res)
			} else {
				r.read.Add(op.res)
				r.hits.Add(1)
				check(o, op.buf)
			}
		}
		r.closeFD(op.fd, what+" "+o.path)
	}
}

// store writes a new generation of the pages' _k and _v files.
func (w *w4) store(ctx context.Context, rank int, pages []int, what string) {
	r := w.r
	bp := w.batchPages()
	for s := 0; s < len(pages) && ctx.Err() == nil; s += bp {
		var objs []*object
		for _, i := range pages[s:min(s+bp, len(pages))] {
			f := w.files(rank, i)
			for _, o := range f {
				if !r.mkdirAll(filepath.Dir(o.path)) {
					return
				}
				objs = append(objs, o)
			}
		}
		for _, o := range objs {
			o.pub.Lock()
		}
		w.aioBatch(ctx, objs, true, fmt.Sprintf("rank %d %s", rank, what), func(o *object, b []byte) {
			Fill(b, o.key, w.g.newGen(o), 0)
		}, nil)
		for _, o := range objs {
			w.g.setPresent(o, true)
			o.pub.Unlock()
		}
		for _, o := range objs { // existence check as queryMem does it
			st, err := r.stat(o.path)
			r.check(err == nil && st.Size == o.size, "%s: stat %s: size %d err %v, want %d", what, o.path, st.Size, err, o.size)
		}
	}
}

// readAll stats each present page file of rank and reads the batch with
// AIO, checking every byte is the newest generation.
func (w *w4) readAll(ctx context.Context, rank int, what string) {
	r := w.r
	bp := w.batchPages()
	for s := 0; s < r.p.Objects && ctx.Err() == nil; s += bp {
		var objs []*object
		for i := s; i < min(s+bp, r.p.Objects); i++ {
			for _, o := range w.files(rank, i) {
				if !w.g.isPresent(o) {
					continue
				}
				if _, err := r.stat(o.path); err != nil {
					r.check(isNotExist(err), "%s: stat %s: %v", what, o.path, err)
					r.misses.Add(1)
					continue
				}
				objs = append(objs, o)
			}
		}
		w.aioBatch(ctx, objs, false, fmt.Sprintf("rank %d %s", rank, what), nil, func(o *object, b []byte) {
			gen := w.g.latestGen(o)
			if at := Verify(b, o.key, gen, 0); at >= 0 {
				_, why := matchGen(b, o.key, 0, w.g.gensOf(o))
				r.failf("%s: %s: byte %d is not from the newest generation %d: %s", what, o.path, at, gen, why)
			}
		})
	}
}

// partialOverwrite writes a whole scratch file, then only its first half
// with a new generation, without O_TRUNC: the size must stay and the
// second half must keep the old bytes.
func (w *w4) partialOverwrite(rank int) {
	r := w.r
	path := filepath.Join(w.root, fmt.Sprintf("scratch_partial_%d", rank))
	size := int(r.p.ObjectSize)
	half := max(pageSize, size/2/pageSize*pageSize)
	buf, free, err := alignedBuf(size)
	if err != nil {
		r.failf("partial overwrite: %v", err)
		return
	}
	defer free()
	for step, n := range []int{size, half} {
		fd, _, err := r.open(path, unix.O_RDWR|unix.O_CREAT, 0o644, true)
		if !r.check(err == nil, "partial overwrite: open %s: %v", path, err) {
			return
		}
		Fill(buf[:n], path, uint64(step+1), 0)
		r.writeAt(fd, buf[:n], 0, "partial overwrite "+path)
		r.closeFD(fd, "partial overwrite")
	}
	st, err := r.stat(path)
	r.check(err == nil && st.Size == int64(size), "overwrite without O_TRUNC changed the size of %s to %d (err %v), want %d", path, st.Size, err, size)
	fd, _, err := r.open(path, unix.O_RDONLY, 0, true)
	if r.check(err == nil, "partial overwrite: reopen: %v", err) {
		n, err := r.readAt(fd, buf, 0)
		r.closeFD(fd, "partial overwrite")
		if r.check(err == nil && n == size, "partial overwrite: read %d of %d, err %v", n, size, err) {
			r.read.Add(int64(n))
			a, b := Verify(buf[:half], path, 2, 0), Verify(buf[half:], path, 1, int64(half))
			r.check(a < 0 && b < 0, "partial overwrite of %s without O_TRUNC: new half wrong at %d, old half wrong at %d", path, a, b)
		}
	}
	r.op(1)
	r.check(unix.Unlink(path) == nil, "unlink %s", path)
	r.expectGone(path, "partial overwrite scratch")
}

// misaligned probes O_DIRECT with a misaligned buffer, offset and length,
// synchronously and through AIO: each must fail with EINVAL (mandatory with
// Params.StrictDIO) or write exactly the bytes given.
func (w *w4) misaligned(rank int) {
	r := w.r
	path := filepath.Join(w.root, fmt.Sprintf("scratch_misaligned_%d", rank))
	mem, free, err := alignedBuf(4 * pageSize)
	if err != nil {
		r.failf("misaligned probe: %v", err)
		return
	}
	defer free()
	fd, direct, err := r.open(path, unix.O_RDWR|unix.O_CREAT|unix.O_TRUNC, 0o644, true)
	if !r.check(err == nil, "misaligned probe: open %s: %v", path, err) {
		return
	}
	defer func() {
		r.closeFD(fd, "misaligned probe")
		r.op(1)
		_ = unix.Unlink(path)
	}()
	if !direct {
		return // buffered I/O has no alignment rule
	}
	actx, err := newAIO(4)
	if !r.check(err == nil, "misaligned probe: %v", err) {
		return
	}
	defer actx.destroy()
	probes := []struct {
		name string
		buf  []byte
		off  int64
	}{
		{"buffer+1", mem[1 : 1+pageSize], 0},
		{"offset 100", mem[:pageSize], 100},
		{"length 4196", mem[:pageSize+100], 0},
	}
	for i, pr := range probes {
		for _, viaAIO := range []bool{false, true} {
			gen := uint64(10 + 2*i)
			if viaAIO {
				gen++
			}
			Fill(pr.buf, path, gen, pr.off)
			var res int64
			if viaAIO {
				ops := []aioOp{{write: true, fd: fd, buf: pr.buf, off: pr.off, res: math.MinInt64}}
				calls, err := actx.do(context.Background(), ops)
				r.op(calls)
				if !r.check(err == nil, "misaligned %s via AIO: %v", pr.name, err) {
					continue
				}
				res = ops[0].res
			} else {
				r.op(1)
				n, err := unix.Pwrite(fd, pr.buf, pr.off)
				res = int64(n)
				if err != nil {
					res = -int64(errnoOf(err))
				}
			}
			how := map[bool]string{false: "pwrite", true: "AIO"}[viaAIO]
			key := fmt.Sprintf("misaligned_%s_%s", how, pr.name)
			switch {
			case res == -int64(unix.EINVAL):
				r.note(key, "EINVAL")
				r.check(true, "")
			case res == int64(len(pr.buf)):
				r.note(key, "accepted")
				r.check(!r.p.StrictDIO, "O_DIRECT %s with %s accepted, but the file system claims strict alignment", how, pr.name)
				w.verifyBuffered(path, pr.buf, pr.off, gen, how+" "+pr.name)
			default:
				r.failf("O_DIRECT %s with %s: result %d, want EINVAL or %d (%v)", how, pr.name, res, len(pr.buf), errnoName(res))
			}
		}
	}
}

// verifyBuffered reads len(want) bytes at off through a separate buffered
// descriptor and checks them against generation gen.
func (w *w4) verifyBuffered(path string, want []byte, off int64, gen uint64, what string) {
	r := w.r
	fd, _, err := r.open(path, unix.O_RDONLY, 0, false)
	if !r.check(err == nil, "verify %s: %v", what, err) {
		return
	}
	defer r.closeFD(fd, "verify "+what)
	got := make([]byte, len(want))
	n, err := r.readAt(fd, got, off)
	if r.check(err == nil && n == len(got), "verify accepted misaligned %s: read %d of %d: %v", what, n, len(got), err) {
		at := Verify(got, path, gen, off)
		r.check(at < 0, "accepted misaligned O_DIRECT %s wrote wrong bytes (first at +%d): silent bounce corruption", what, at)
	}
}

// errnoName renders a negative AIO result as an errno.
func errnoName(res int64) string {
	if res < 0 {
		return unix.Errno(-res).Error()
	}
	return "positive"
}

// cleaner is the rank-0 watermark cleaner: while the bytes held exceed 80 %
// of the cap it unlinks pages oldest mtime first down to 70 %.
func (w *w4) cleaner(stop <-chan struct{}) {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		w.r.statvfs(w.root, "W4 cleaner")
		held := w.g.heldBytes()
		if held <= w.cap*80/100 {
			continue
		}
		for _, o := range w.g.present("", true) {
			if held <= w.cap*70/100 {
				break
			}
			if w.r.unlinkObject(w.g, o, "W4 cleaner") {
				held -= o.size
			}
		}
	}
}
