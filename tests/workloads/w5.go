package workloads

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// RunW5 replays the big-file slot engines (ENGINES.md W5) in dir/w5-slots
// with at least three files, one per layout (files = max(3, Params.Ranks),
// layouts in turn):
//
//   - Dynamo KVBM: mkstemp `dynamo-kvbm-disk-cache-XXXXXX`, fcntl(F_SETFL,
//     flags|O_DIRECT), fallocate(fd, 0, 0, size) (EOPNOTSUPP ⇒ zero-fill in
//     16 MiB writes), slots written and read with native AIO at queue depth
//     up to 64, unlinked while open at shutdown;
//   - SGLang HF3FS: `hicache.<r>.bin` ftruncated to Params.SparseSize, slots
//     spread over it, Params.Workers threads issuing batches of 8
//     pwrite/pread on their own slots;
//   - TRT-LLM V2: O_TMPFILE (EOPNOTSUPP ⇒ mkstemp + unlink), resized with
//     ftruncate, slots written by Params.Workers threads.
//
// Each file holds Params.Objects slots of Params.ObjectSize bytes; slots are
// rewritten over three rounds (slot reuse) and read back after each round.
// FALLOC_FL_KEEP_SIZE beyond EOF and FALLOC_FL_PUNCH_HOLE over a slot are
// probed.
//
// Checks: F_SETFL O_DIRECT, fallocate (both modes) and O_TMPFILE return
// success or exactly the code the engine's fallback expects (EINVAL without
// Params.RequireODirect; EOPNOTSUPP); unwritten regions and punched holes
// read as zeros; concurrent non-overlapping slot writes do not interfere;
// the latest write per slot wins; KEEP_SIZE leaves st_size alone; an O_TMPFILE
// file has no link; an unlinked open file stays readable and its space is
// reclaimed after the last close (Params.StatfsTracksUsage).
func RunW5(ctx context.Context, dir string, p Params) (Report, error) {
	p = p.withDefaults()
	if err := p.validate(); err != nil {
		return Report{Workload: "W5"}, err
	}
	r := newRun("W5", p)
	root := filepath.Join(dir, "w5-slots")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return r.finish(err)
	}
	var wg sync.WaitGroup
	for i := 0; i < max(3, p.Ranks); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f := &w5file{r: r, root: root, rank: i, layout: i % 3}
			f.run(ctx)
		}()
	}
	wg.Wait()
	return r.finish(ctx.Err())
}

const (
	layoutKVBM  = 0
	layoutHF3FS = 1
	layoutTRT   = 2
)

// w5file is one slot file and the model of its contents.
type w5file struct {
	r      *run
	root   string
	rank   int
	layout int
	name   string // for messages and pattern keys
	path   string // "" once unlinked or for O_TMPFILE
	fd     int
	direct bool
	size   int64 // logical size
	stride int64 // distance between slot starts
	slots  []uint64
	gen    uint64 // guarded by mu
	mu     sync.Mutex
}

func (f *w5file) nextGen() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gen++
	return f.gen
}

func (f *w5file) key(slot int) string { return fmt.Sprintf("%s#%d", f.name, slot) }

func (f *w5file) off(slot int) int64 { return int64(slot) * f.stride }

func (f *w5file) run(ctx context.Context) {
	r := f.r
	p := r.p
	f.slots = make([]uint64, p.Objects)
	f.stride = p.ObjectSize
	f.size = int64(p.Objects) * p.ObjectSize
	var ok bool
	switch f.layout {
	case layoutKVBM:
		ok = f.createKVBM()
	case layoutHF3FS:
		f.stride = max(p.ObjectSize, p.SparseSize/int64(p.Objects)/pageSize*pageSize)
		f.size = p.SparseSize
		ok = f.createHF3FS()
	default:
		ok = f.createTRT()
	}
	if !ok {
		return
	}
	defer func() {
		if f.fd >= 0 {
			r.closeFD(f.fd, f.name)
		}
		if f.path != "" {
			r.op(1)
			_ = unix.Unlink(f.path)
		}
	}()
	f.checkSize("after create")
	f.verifyAll("fresh file") // everything reads as zeros before any write
	rng := rand.New(rand.NewSource(p.Seed*131 + int64(f.rank)))
	for round := 0; round < 3 && ctx.Err() == nil; round++ {
		if f.layout == layoutKVBM {
			f.aioRound(ctx, rng)
		} else {
			f.threadRound(ctx, round)
		}
		f.verifyAll(fmt.Sprintf("after round %d", round))
	}
	f.fallocateProbes()
	f.verifyAll("final")
	f.checkSize("final")
	if f.layout == layoutKVBM {
		f.unlinkWhileOpen()
	}
}

// mkstemp creates a unique file from prefix with O_RDWR|O_CREAT|O_EXCL
// (the glibc mkstemp contract).
func (f *w5file) mkstemp(prefix string) (string, int, error) {
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	rng := rand.New(rand.NewSource(int64(f.rank)*7 + int64(os.Getpid())))
	for try := 0; try < 100; try++ {
		b := make([]byte, 6)
		for i := range b {
			b[i] = letters[rng.Intn(len(letters))]
		}
		path := filepath.Join(f.root, prefix+string(b))
		fd, _, err := f.r.open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL, 0o600, false)
		if errnoOf(err) == unix.EEXIST {
			continue
		}
		return path, fd, err
	}
	return "", -1, fmt.Errorf("mkstemp %s: no free name", prefix)
}

func (f *w5file) createKVBM() bool {
	r := f.r
	path, fd, err := f.mkstemp("dynamo-kvbm-disk-cache-")
	if !r.check(err == nil, "KVBM mkstemp: %v", err) {
		return false
	}
	f.path, f.fd, f.name = path, fd, filepath.Base(path)
	r.op(2)
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err == nil {
		_, err = unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl|unix.O_DIRECT)
	}
	switch errnoOf(err) {
	case 0:
		r.op(1)
		fl2, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
		f.direct = r.check(fl2&unix.O_DIRECT != 0, "F_SETFL O_DIRECT on %s succeeded but F_GETFL does not show it", f.name)
		r.note("fcntl_setfl_odirect", "ok")
	case unix.EINVAL:
		r.note("fcntl_setfl_odirect", "EINVAL")
		r.check(!r.p.RequireODirect, "fcntl(F_SETFL, O_DIRECT) on %s: EINVAL; the file system must accept O_DIRECT", f.name)
	default:
		r.failf("fcntl(F_SETFL, O_DIRECT) on %s: %v, want success or EINVAL", f.name, err)
	}
	r.op(1)
	err = unix.Fallocate(fd, 0, 0, f.size)
	switch errnoOf(err) {
	case 0:
		r.note("fallocate_mode0", "ok")
		r.check(true, "")
	case unix.EOPNOTSUPP:
		r.note("fallocate_mode0", "EOPNOTSUPP (zero-fill fallback)")
		return f.zeroFill()
	default:
		r.failf("fallocate(%s, 0, 0, %d): %v, want success or exactly EOPNOTSUPP", f.name, f.size, err)
		return false
	}
	return true
}

// zeroFill is KVBM's fallback: write zeros over the whole file, 16 MiB at a time.
func (f *w5file) zeroFill() bool {
	const chunk = 16 << 20
	zero, free, err := alignedBuf(chunk)
	if err != nil {
		f.r.failf("zero-fill: %v", err)
		return false
	}
	defer free()
	for off := int64(0); off < f.size; off += chunk {
		if !f.r.writeAt(f.fd, zero[:min(int64(chunk), f.size-off)], off, "zero-fill "+f.name) {
			return false
		}
	}
	return true
}

func (f *w5file) createHF3FS() bool {
	r := f.r
	f.name = fmt.Sprintf("hicache.%d.bin", f.rank)
	f.path = filepath.Join(f.root, f.name)
	fd, _, err := r.open(f.path, unix.O_RDWR|unix.O_CREAT, 0o644, false)
	if !r.check(err == nil, "HF3FS open %s: %v", f.path, err) {
		f.path = ""
		return false
	}
	f.fd = fd
	r.op(1)
	return r.check(unix.Ftruncate(fd, f.size) == nil, "ftruncate %s to %d", f.name, f.size)
}

func (f *w5file) createTRT() bool {
	r := f.r
	f.name = fmt.Sprintf("trtllm-v2-pool-%d", f.rank)
	r.op(1)
	fd, err := unix.Open(f.root, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	switch errnoOf(err) {
	case 0:
		r.note("o_tmpfile", "ok")
		var st unix.Stat_t
		r.op(1)
		r.check(unix.Fstat(fd, &st) == nil && st.Nlink == 0, "O_TMPFILE file has nlink %d, want 0", st.Nlink)
		names, err := r.readDir(f.root)
		r.check(err == nil, "readdir %s: %v", f.root, err)
		for _, n := range names {
			var est unix.Stat_t
			r.op(1)
			if unix.Lstat(filepath.Join(f.root, n), &est) == nil {
				r.check(est.Ino != st.Ino, "O_TMPFILE file (inode %d) visible in readdir as %q", st.Ino, n)
			}
		}
	case unix.EOPNOTSUPP:
		r.note("o_tmpfile", "EOPNOTSUPP (mkstemp+unlink fallback)")
		var path string
		path, fd, err = f.mkstemp("trtllm-v2-")
		if !r.check(err == nil, "TRT fallback mkstemp: %v", err) {
			return false
		}
		r.op(1)
		r.check(unix.Unlink(path) == nil, "TRT fallback unlink %s", path)
	default:
		r.failf("open(%s, O_TMPFILE|O_RDWR): %v, want success or exactly EOPNOTSUPP", f.root, err)
		return false
	}
	f.fd = fd
	r.op(1)
	return r.check(unix.Ftruncate(fd, f.size) == nil, "ftruncate (resize) %s to %d", f.name, f.size)
}

// checkSize checks the file keeps its logical size.
func (f *w5file) checkSize(when string) {
	var st unix.Stat_t
	f.r.op(1)
	err := unix.Fstat(f.fd, &st)
	f.r.check(err == nil && st.Size == f.size, "%s: %s has size %d (err %v), want %d", when, f.name, st.Size, err, f.size)
}

// aioRound rewrites a random half of the slots through AIO (distinct slots
// in flight at once) and reads another random half back.
func (f *w5file) aioRound(ctx context.Context, rng *rand.Rand) {
	r := f.r
	n := max(1, len(f.slots)/2)
	qd := min(64, n)
	mem, free, err := alignedBuf(qd * int(r.p.ObjectSize))
	if err != nil {
		r.failf("AIO buffers: %v", err)
		return
	}
	defer free()
	actx, err := newAIO(qd)
	if !r.check(err == nil, "io_setup: %v", err) {
		return
	}
	defer actx.destroy()
	for _, write := range []bool{true, false} {
		perm := rng.Perm(len(f.slots))[:n]
		for s := 0; s < n; s += qd {
			batch := perm[s:min(s+qd, n)]
			ops := make([]aioOp, len(batch))
			gens := make([]uint64, len(batch))
			for i, slot := range batch {
				b := mem[i*int(r.p.ObjectSize) : (i+1)*int(r.p.ObjectSize)]
				if write {
					gens[i] = f.nextGen()
					Fill(b, f.key(slot), gens[i], 0)
				}
				ops[i] = aioOp{write: write, fd: f.fd, buf: b, off: f.off(slot), res: math.MinInt64}
			}
			calls, err := actx.do(ctx, ops)
			r.op(calls)
			if !r.check(err == nil, "%s AIO batch: %v", f.name, err) {
				return
			}
			for i, slot := range batch {
				if !r.check(ops[i].res == r.p.ObjectSize, "%s AIO %v slot %d: result %d (%s), want %d",
					f.name, map[bool]string{true: "PWRITE", false: "PREAD"}[write], slot, ops[i].res, errnoName(ops[i].res), r.p.ObjectSize) {
					continue
				}
				if write {
					r.written.Add(ops[i].res)
					f.slots[slot] = gens[i]
				} else {
					r.read.Add(ops[i].res)
					f.checkSlot(slot, ops[i].buf, "AIO read")
				}
			}
		}
	}
}

// threadRound has Params.Workers threads each rewrite its own slots (slot
// % Workers == thread) in batches of 8 pwrites followed by 8 preads.
func (f *w5file) threadRound(ctx context.Context, round int) {
	r := f.r
	var wg sync.WaitGroup
	for t := 0; t < r.p.Workers; t++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf, free, err := alignedBuf(int(r.p.ObjectSize))
			if err != nil {
				r.failf("thread buffer: %v", err)
				return
			}
			defer free()
			var mine []int
			for s := t; s < len(f.slots); s += r.p.Workers {
				if (s/r.p.Workers+round)%2 == 0 || round == 2 { // a different half each round, all on the last
					mine = append(mine, s)
				}
			}
			for b := 0; b < len(mine) && ctx.Err() == nil; b += 8 {
				batch := mine[b:min(b+8, len(mine))]
				for _, slot := range batch {
					gen := f.nextGen()
					Fill(buf, f.key(slot), gen, 0)
					if r.writeAt(f.fd, buf, f.off(slot), fmt.Sprintf("%s slot %d", f.name, slot)) {
						f.slots[slot] = gen
					}
				}
				for _, slot := range batch {
					n, err := r.readAt(f.fd, buf, f.off(slot))
					if r.check(err == nil && int64(n) == r.p.ObjectSize, "%s pread slot %d: %d bytes, err %v", f.name, slot, n, err) {
						r.read.Add(int64(n))
						f.checkSlot(slot, buf, "pread")
					}
				}
			}
		}()
	}
	wg.Wait()
}

// checkSlot compares a slot's bytes with the model: the latest generation
// written, or zeros.
func (f *w5file) checkSlot(slot int, b []byte, what string) {
	gen := f.slots[slot]
	if gen == 0 {
		at := zeroIndex(b)
		f.r.check(at < 0, "%s: %s slot %d never written (or punched) but byte %d is %#x, want zero", what, f.name, slot, at, b[max(at, 0)])
		return
	}
	at := Verify(b, f.key(slot), gen, 0)
	if at >= 0 {
		var older []uint64
		for g := gen; g > 0 && len(older) < 64; g-- {
			older = append(older, g)
		}
		_, why := matchGen(b, f.key(slot), 0, older)
		f.r.failf("%s: %s slot %d: byte %d is not from the latest write (gen %d): %s", what, f.name, slot, at, gen, why)
		return
	}
	f.r.check(true, "")
}

// verifyAll reads every slot and, for the sparse layout, the gap after
// each slot: slots must match the model, gaps must be zeros.
func (f *w5file) verifyAll(when string) {
	r := f.r
	buf, free, err := alignedBuf(int(r.p.ObjectSize))
	if err != nil {
		r.failf("verify buffer: %v", err)
		return
	}
	defer free()
	for slot := range f.slots {
		n, err := r.readAt(f.fd, buf, f.off(slot))
		if !r.check(err == nil && int64(n) == r.p.ObjectSize, "%s: %s read slot %d: %d bytes, err %v", when, f.name, slot, n, err) {
			continue
		}
		r.read.Add(int64(n))
		f.checkSlot(slot, buf, when)
		if gap := f.stride - r.p.ObjectSize; gap >= pageSize {
			off := f.off(slot) + r.p.ObjectSize + gap/2/pageSize*pageSize
			n, err := r.readAt(f.fd, buf[:pageSize], off)
			r.check(err == nil && n == pageSize && zeroIndex(buf[:pageSize]) < 0,
				"%s: %s unwritten region at %d: %d bytes err %v, not all zeros", when, f.name, off, n, err)
		}
	}
}

// fallocateProbes calls fallocate with non-zero modes: KEEP_SIZE beyond EOF
// must leave st_size alone; PUNCH_HOLE over slot 0 must make it read zeros.
// Either may fail only with EOPNOTSUPP.
func (f *w5file) fallocateProbes() {
	r := f.r
	r.op(1)
	err := unix.Fallocate(f.fd, unix.FALLOC_FL_KEEP_SIZE, f.size, r.p.ObjectSize)
	switch errnoOf(err) {
	case 0:
		r.note("fallocate_keep_size", "ok")
		f.checkSize("after FALLOC_FL_KEEP_SIZE beyond EOF")
	case unix.EOPNOTSUPP:
		r.note("fallocate_keep_size", "EOPNOTSUPP")
		r.check(true, "")
	default:
		r.failf("fallocate(%s, KEEP_SIZE, %d, %d): %v, want success or exactly EOPNOTSUPP", f.name, f.size, r.p.ObjectSize, err)
	}
	r.op(1)
	err = unix.Fallocate(f.fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, f.off(0), r.p.ObjectSize)
	switch errnoOf(err) {
	case 0:
		r.note("fallocate_punch_hole", "ok")
		f.slots[0] = 0
		r.check(true, "")
	case unix.EOPNOTSUPP:
		r.note("fallocate_punch_hole", "EOPNOTSUPP")
		r.check(true, "")
	default:
		r.failf("fallocate(%s, PUNCH_HOLE|KEEP_SIZE, slot 0): %v, want success or exactly EOPNOTSUPP", f.name, err)
	}
}

// unlinkWhileOpen is KVBM's shutdown: unlink the file while it is open; it
// must stay readable, its name must be gone, and its space must come back
// after the last close.
func (f *w5file) unlinkWhileOpen() {
	r := f.r
	var st unix.Stat_t
	r.op(1)
	_ = unix.Fstat(f.fd, &st)
	allocated := st.Blocks * 512
	before, _ := r.statvfs(f.root, "W5 before unlink")
	r.op(1)
	if !r.check(unix.Unlink(f.path) == nil, "unlink %s", f.path) {
		return
	}
	r.expectGone(f.path, "KVBM shutdown")
	f.path = ""
	f.verifyAll("after unlink, before close")
	r.closeFD(f.fd, f.name)
	f.fd = -1
	r.expectFreeMove(f.root, before, allocated, "W5 space reclaimed after last close of unlinked "+f.name)
}
