package soak

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// Kill points, picked per cycle.
const (
	killWrites    = "writes"    // SIGKILL at a random moment while writers run
	killFsync     = "fsync"     // SIGKILL while a file writer is inside fsync(2)
	killNBDFlush  = "nbd-flush" // SIGKILL while an NBD FLUSH is outstanding
	killWriteback = "writeback" // writers stop (mostly un-fsync'd data), SIGKILL during write-back / the idle-clean window
	killStart     = "start"     // SIGKILL right after the mount came up, before anything else
	stopGraceful  = "sigterm"   // writers stop, SIGTERM: every closed file and every acknowledged write must survive
)

func (s *soak) pickMode() string {
	r := s.rng.IntN(100)
	switch {
	case r < 30:
		return killWrites
	case r < 50:
		return killFsync
	case r < 62:
		if s.noNBD {
			return killFsync
		}
		return killNBDFlush
	case r < 84:
		return killWriteback
	case r < 94:
		return killStart
	}
	return stopGraceful
}

// runCycle: the daemon is running on the epoch's data dir. Verify
// everything, run the workload, end it at the cycle's kill point.
func (s *soak) runCycle() {
	mode := s.pickMode()
	s.st.Kills[mode]++
	s.cycleFirstVersion = append(s.cycleFirstVersion, s.version.Load()+1)
	t0 := time.Now()
	defer func() {
		s.cycleLog = append(s.cycleLog, fmt.Sprintf("cycle %d: %s after %s (versions from %d)", s.cycle, mode,
			time.Since(t0).Round(time.Millisecond), s.cycleFirstVersion[len(s.cycleFirstVersion)-1]))
	}()
	if mode == killStart {
		time.Sleep(time.Duration(s.rng.IntN(50)) * time.Millisecond)
		s.kill()
		return
	}
	s.verify()
	w := s.startWorkload(mode)
	switch mode {
	case killWrites:
		time.Sleep(time.Duration(150+s.rng.IntN(750)) * time.Millisecond)
		s.kill()
	case killFsync, killNBDFlush:
		ch := w.fsyncing
		if mode == killNBDFlush {
			ch = w.flushing
		}
		select {
		case <-ch:
			time.Sleep(time.Duration(s.rng.IntN(3000)) * time.Microsecond)
		case <-time.After(2 * time.Second):
		}
		s.kill()
	case killWriteback:
		time.Sleep(time.Duration(200+s.rng.IntN(400)) * time.Millisecond)
		w.halt()
		time.Sleep(time.Duration(s.rng.IntN(700)) * time.Millisecond)
		s.kill()
	case stopGraceful:
		time.Sleep(time.Duration(200+s.rng.IntN(400)) * time.Millisecond)
		w.halt()
	}
	w.halt()
	s.collect()
	if mode == stopGraceful {
		if err := s.stopGraceful(); err != nil {
			s.fail("UNMOUNT", err.Error())
		}
		// Every closed file and every acknowledged NBD write is written
		// back by a SIGTERM stop: all of it is acknowledged now.
		for _, f := range s.files {
			if f.live != nil && f.closed && !s.prof.volatile {
				v := *f.live
				f.acked, f.pending = &v, nil
			}
		}
		if !s.prof.volatile {
			s.exp.gracefulStop()
		}
	}
}

// kill sends SIGKILL; errors workers see from now on are expected.
func (s *soak) kill() {
	s.killed.Store(true)
	s.d.Kill9()
}

// collect turns worker failures into a soak failure.
func (s *soak) collect() {
	s.mu.Lock()
	fails := s.fails
	s.fails = nil
	s.mu.Unlock()
	if len(fails) > 0 {
		msg := ""
		for _, f := range fails {
			msg += f.kind + ": " + f.detail + "\n"
		}
		s.fail(fails[0].kind, msg)
	}
}

// workerFail records a failure seen by a worker; I/O errors after the kill
// are expected and dropped.
func (s *soak) workerFail(kind, detail string, ioErr bool) {
	if ioErr && s.killed.Load() {
		return
	}
	s.mu.Lock()
	s.fails = append(s.fails, failure{kind, detail})
	s.mu.Unlock()
}

type workload struct {
	stop     chan struct{}
	once     sync.Once
	wg       sync.WaitGroup
	fsyncing chan struct{} // a file writer is entering fsync (buffered 1)
	flushing chan struct{} // an NBD writer is sending FLUSH (buffered 1)
	s        *soak
	progress []atomic.Int64 // per worker: last progress, unix nanos
	doing    []atomic.Value // per worker: what it is doing
}

func (w *workload) stopped() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

// halt stops the workers and waits for them; workers that do not return
// within drainBound (a request stuck in the kernel or the daemon) are a
// HANG.
func (w *workload) halt() {
	w.once.Do(func() { close(w.stop) })
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	bound := opTimeout // the daemon runs: each worker finishes its current operation
	if w.s.killed.Load() {
		bound = drainBound // the kill aborted every FUSE request and NBD connection
	}
	select {
	case <-done:
	case <-time.After(bound):
		msg := fmt.Sprintf("workers did not return within %v of being stopped (daemon killed: %v):", bound, w.s.killed.Load())
		for i := range w.doing {
			if v, _ := w.doing[i].Load().(string); v != "" {
				msg += fmt.Sprintf("\n  worker %d: %s (last progress %s ago)", i, v,
					time.Since(time.Unix(0, w.progress[i].Load())).Round(time.Millisecond))
			}
		}
		w.s.fail("HANG", msg)
	}
}

func (w *workload) mark(i int, what string) {
	w.progress[i].Store(time.Now().UnixNano())
	w.doing[i].Store(what)
}

// watchdog: while the daemon is alive, no worker may sit in one operation
// longer than opTimeout.
func (w *workload) watchdog() {
	defer w.wg.Done()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-tick.C:
		}
		if w.s.killed.Load() {
			continue
		}
		for i := range w.doing {
			v, _ := w.doing[i].Load().(string)
			if v != "" && time.Since(time.Unix(0, w.progress[i].Load())) > opTimeout {
				w.s.workerFail("HANG", fmt.Sprintf("worker %d stuck for more than %v in: %s", i, opTimeout, v), false)
				w.once.Do(func() { close(w.stop) })
				return
			}
		}
	}
}

func (s *soak) startWorkload(mode string) *workload {
	nw := nFileWriters + 1 + nNBDWriters
	w := &workload{stop: make(chan struct{}), fsyncing: make(chan struct{}, 1), flushing: make(chan struct{}, 1), s: s,
		progress: make([]atomic.Int64, nw), doing: make([]atomic.Value, nw)}
	fsyncPct := 50
	if mode == killWriteback {
		fsyncPct = 10
	}
	nbd := make([]*nbdPair, nNBDWriters)
	if s.noNBD {
		nbd = nil
	}
	for i := range nbd {
		nbd[i] = s.openNBDPair()
	}
	for i := 0; i < nFileWriters; i++ {
		w.wg.Add(1)
		go w.fileWriter(i, rand.New(rand.NewPCG(s.rng.Uint64(), uint64(i))), fsyncPct)
	}
	w.wg.Add(1)
	go w.fileReader(nFileWriters, rand.New(rand.NewPCG(s.rng.Uint64(), 99)))
	per := sectors / nNBDWriters
	for i := range nbd {
		w.wg.Add(1)
		go w.nbdWriter(nFileWriters+1+i, rand.New(rand.NewPCG(s.rng.Uint64(), uint64(100+i))), nbd[i], i*per, (i+1)*per)
	}
	w.wg.Add(1)
	go w.watchdog()
	return w
}

func (s *soak) path(f *fileState) string {
	return filepath.Join(s.d.Namespace(), fmt.Sprintf("f%d", f.id))
}

func (s *soak) tmpPath(f *fileState, v uint64) string {
	return filepath.Join(s.d.Namespace(), fmt.Sprintf("t%d.%d", f.id, v))
}

// fileWriter rewrites random files with new versions: in place (O_TRUNC)
// or through a temp file and rename, fsync'd with probability fsyncPct.
func (w *workload) fileWriter(wi int, rng *rand.Rand, fsyncPct int) {
	defer w.wg.Done()
	defer w.mark(wi, "")
	s := w.s
	for !w.stopped() {
		f := s.files[rng.IntN(len(s.files))]
		if !f.mu.TryLock() {
			continue
		}
		var err error
		switch r := rng.IntN(100); {
		case r < 10:
			// ftruncate + pwrite rounds on one descriptor (issue 11 item 1)
			err = w.truncRewrite(wi, rng, f, rng.IntN(3) == 0)
		case r < 18 && f.live != nil:
			// unlink while a descriptor holds the file, maybe recreate
			err = w.unlinkRecreate(wi, rng, f, fsyncPct)
		default:
			err = w.newVersion(wi, rng, f, fsyncPct)
		}
		f.mu.Unlock()
		if err != nil && s.prof.mayFill && errors.Is(err, syscall.ENOSPC) && !s.killed.Load() {
			s.enospc.Add(1) // refused: the version stays unacknowledged
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if err != nil && s.prof.mayFill && (errors.Is(err, syscall.EIO) || errors.Is(err, fs.ErrNotExist)) && !s.killed.Load() {
			// No lower tier for every block: G3 reclaim (or G2-only
			// eviction) dropped the file while it was being written. The
			// version stays unacknowledged; the file is gone whole.
			s.lostLive.Add(1)
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if err != nil {
			s.workerFail("I/O ERROR", fmt.Sprintf("file writer %d, file %d: %v", wi, f.id, err), true)
			return
		}
	}
}

// newVersion writes a new whole version of f (f.mu held): in place or
// through a temp file and rename, a quarter of them with O_DIRECT.
func (w *workload) newVersion(wi int, rng *rand.Rand, f *fileState, fsyncPct int) error {
	s := w.s
	v := fileVer{v: s.version.Add(1), size: pageSize * (1 + rng.IntN(s.prof.maxFile/pageSize))}
	sync := rng.IntN(100) < fsyncPct
	viaRename := rng.IntN(4) == 0
	direct := rng.IntN(4) == 0
	// Pending from before the first byte changes: from here on a kill
	// may leave this version (or a prefix), the acked one, or nothing.
	f.pending = append(f.pending, v)
	f.live, f.closed, f.unlinked = nil, false, false
	err := w.writeFile(wi, rng, f, v, sync, viaRename, direct)
	if err == nil {
		f.live, f.closed = &v, true
		s.filesWritten.Add(1)
		s.bytesWritten.Add(int64(v.size))
		if direct {
			s.directWrites.Add(1)
		}
	}
	return err
}

// alignedBuf returns n bytes starting on a page boundary (O_DIRECT).
func alignedBuf(n int) []byte {
	b := make([]byte, n+pageSize)
	o := int(uintptr(unsafe.Pointer(&b[0])) & (pageSize - 1))
	if o != 0 {
		o = pageSize - o
	}
	return b[o : o+n : o+n]
}

func (w *workload) writeFile(wi int, rng *rand.Rand, f *fileState, v fileVer, doSync, viaRename, direct bool) error {
	s := w.s
	img := fileImage(f.id, v.v, v.size, s.seed)
	flags := os.O_CREATE | os.O_TRUNC | os.O_WRONLY
	if direct { // page-aligned buffer, offsets and lengths whole pages
		img = append(alignedBuf(len(img))[:0], img...)
		flags |= syscall.O_DIRECT
	}
	name := s.path(f)
	if viaRename {
		name = s.tmpPath(f, v.v)
	}
	w.mark(wi, fmt.Sprintf("open %s (O_DIRECT %v)", name, direct))
	fd, err := os.OpenFile(name, flags, 0o644)
	if err != nil {
		return err
	}
	for off := 0; off < len(img); {
		n := min(len(img)-off, pageSize*(1+rng.IntN(32)))
		w.mark(wi, fmt.Sprintf("write %s [%d,%d)", name, off, off+n))
		if _, err := fd.Write(img[off : off+n]); err != nil {
			fd.Close()
			return err
		}
		off += n
		switch r := rng.IntN(1000); {
		case r < 3: // long enough for the 500 ms idle clean: a clean prefix may survive a kill
			time.Sleep(600 * time.Millisecond)
		case r < 60:
			time.Sleep(time.Duration(rng.IntN(10)) * time.Millisecond)
		}
	}
	if doSync {
		select {
		case w.fsyncing <- struct{}{}:
		default:
		}
		w.mark(wi, "fsync "+name)
		if err := fd.Sync(); err != nil {
			fd.Close()
			return fmt.Errorf("fsync: %w", err)
		}
		s.fsyncs.Add(1)
		if !viaRename && !s.prof.volatile {
			f.acked, f.pending = &v, nil
		}
	}
	w.mark(wi, "close "+name)
	if err := fd.Close(); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	if viaRename {
		w.mark(wi, "rename "+name)
		if err := os.Rename(name, s.path(f)); err != nil {
			return fmt.Errorf("rename: %w", err)
		}
		if doSync && !s.prof.volatile { // the bytes were fsync'd and the rename is logged before it returns
			f.acked, f.pending = &v, nil
		}
	}
	return nil
}

// Linux fallocate(2) modes (not in package syscall).
const (
	fallocKeepSize  = 0x01
	fallocPunchHole = 0x02
)

// truncRewrite (f.mu held) is issue 11 item 1's pattern on one descriptor
// (a third of the runs O_DIRECT): open with O_TRUNC, write pages 0..64
// (so pages 1..63 hold data until the first truncate), then rounds of
// pwrite 4 KiB at 256 KiB, ftruncate(4096), pwrite 4 KiB at 256 KiB, with
// an fsync every 25 rounds. Every syscall moves the file to a new state
// (fileVer with a page map: pages 1..63 become holes at the first
// truncate), recorded as pending before the call, so a kill may leave any
// state from the last fsync'd one on — and nothing else. After the first
// layout it also asks for fallocate(PUNCH_HOLE|KEEP_SIZE) of pages 1..2:
// the mount documents EOPNOTSUPP (then the state is withdrawn, nothing
// changed); if it is ever done, the punched state is what the model holds.
func (w *workload) truncRewrite(wi int, rng *rand.Rand, f *fileState, direct bool) error {
	s := w.s
	const tailPage = 64 // offset 256 KiB
	rounds := 25 + rng.IntN(126)
	name := s.path(f)
	buf := alignedBuf(pageSize)
	flags := os.O_CREATE | os.O_TRUNC | os.O_WRONLY
	if direct {
		flags |= syscall.O_DIRECT
	}
	base := s.version.Add(1)
	cur := fileVer{v: base, pages: []uint64{}}
	var fd *os.File
	defer func() {
		if fd != nil {
			fd.Close()
		}
	}()
	// step records the state op leads to as pending, then runs op.
	step := func(next fileVer, what string, op func() error) error {
		next.size = len(next.pages) * pageSize
		f.pending = append(f.pending, next)
		w.mark(wi, what)
		if err := op(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		cur = next
		return nil
	}
	with := func(idx int, ver uint64) fileVer { // cur with page idx of version ver (0: a hole)
		pg := make([]uint64, max(len(cur.pages), idx+1))
		copy(pg, cur.pages)
		pg[idx] = ver
		return fileVer{v: ver, pages: pg}
	}
	pwrite := func(ver uint64, idx int) func() error {
		return func() error {
			fillPage(buf, magicFile, f.id, ver, uint64(idx), s.seed)
			_, err := fd.WriteAt(buf, int64(idx)*pageSize)
			return err
		}
	}
	f.live, f.closed, f.unlinked = nil, false, false
	if err := step(cur, fmt.Sprintf("open O_TRUNC (O_DIRECT %v) %s", direct, name), func() error {
		var err error
		fd, err = os.OpenFile(name, flags, 0o644)
		return err
	}); err != nil {
		return err
	}
	for i := 0; i <= tailPage; i++ {
		if err := step(with(i, base), fmt.Sprintf("pwrite %s page %d", name, i), pwrite(base, i)); err != nil {
			return err
		}
	}
	punched := with(1, 0)
	punched.pages[2], punched.v, punched.size = 0, s.version.Add(1), cur.size
	f.pending = append(f.pending, punched)
	w.mark(wi, "fallocate(PUNCH_HOLE|KEEP_SIZE) "+name)
	switch err := syscall.Fallocate(int(fd.Fd()), fallocPunchHole|fallocKeepSize, pageSize, 2*pageSize); {
	case err == nil:
		cur = punched
		s.punchDone.Add(1)
	case errors.Is(err, syscall.EOPNOTSUPP):
		f.pending = f.pending[:len(f.pending)-1] // refused: nothing changed
		s.punchRefused.Add(1)
	default:
		return fmt.Errorf("fallocate(PUNCH_HOLE) %s: %w", name, err)
	}
	for r := 1; r <= rounds && !w.stopped(); r++ {
		va := s.version.Add(1)
		if err := step(with(tailPage, va), fmt.Sprintf("round %d: pwrite %s at 256 KiB", r, name), pwrite(va, tailPage)); err != nil {
			return err
		}
		tr := fileVer{v: s.version.Add(1), pages: append([]uint64(nil), cur.pages[:1]...)}
		if err := step(tr, fmt.Sprintf("round %d: ftruncate %s 4096", r, name), func() error { return fd.Truncate(pageSize) }); err != nil {
			return err
		}
		vb := s.version.Add(1)
		if err := step(with(tailPage, vb), fmt.Sprintf("round %d: pwrite %s at 256 KiB after the truncate", r, name), pwrite(vb, tailPage)); err != nil {
			return err
		}
		s.truncRounds.Add(1)
		s.bytesWritten.Add(2 * pageSize)
		if r%25 == 0 {
			select {
			case w.fsyncing <- struct{}{}:
			default:
			}
			w.mark(wi, fmt.Sprintf("round %d: fsync %s", r, name))
			if err := fd.Sync(); err != nil {
				return fmt.Errorf("fsync after round %d: %w", r, err)
			}
			s.fsyncs.Add(1)
			if !s.prof.volatile {
				c := cur
				f.acked, f.pending = &c, nil
			}
		}
		switch x := rng.IntN(1000); {
		case x < 4: // idle long enough to be recorded clean between two syscalls
			time.Sleep(600 * time.Millisecond)
		case x < 40:
			time.Sleep(time.Duration(rng.IntN(5)) * time.Millisecond)
		}
	}
	w.mark(wi, "close "+name)
	err := fd.Close()
	fd = nil
	if err != nil {
		return fmt.Errorf("close: %w", err)
	}
	c := cur
	f.live, f.closed = &c, true
	s.truncRuns.Add(1)
	s.filesWritten.Add(1)
	s.bytesWritten.Add(int64((tailPage + 1) * pageSize))
	return nil
}

// unlinkRecreate (f.mu held, f.live set): open the file for reading and
// hold the descriptor, unlink the name (from its return on, no restart may
// show the file until it is written again), check the name is gone and the
// held descriptor still reads the unlinked version exactly, then half of
// the time recreate the name with a new version and check the held
// descriptor again (still the old inode's bytes).
func (w *workload) unlinkRecreate(wi int, rng *rand.Rand, f *fileState, fsyncPct int) error {
	s := w.s
	old := *f.live
	name := s.path(f)
	w.mark(wi, "open (held) "+name)
	held, err := os.Open(name)
	if err != nil {
		return err
	}
	defer held.Close()
	f.unlinking = true
	w.mark(wi, "unlink "+name)
	if err := os.Remove(name); err != nil {
		return fmt.Errorf("unlink: %w", err)
	}
	f.acked, f.pending, f.live, f.closed = nil, nil, nil, false
	f.unlinking, f.unlinked = false, true
	s.unlinks.Add(1)
	w.mark(wi, "stat after unlink "+name)
	if _, err := os.Stat(name); !errors.Is(err, fs.ErrNotExist) {
		if err == nil || !s.killed.Load() {
			s.workerFail("WRONG BYTES", fmt.Sprintf("%s: stat after unlink returned %v, want ENOENT", name, err), false)
		}
		return nil
	}
	check := func(when string) error {
		w.mark(wi, "read held descriptor of "+name+" "+when)
		got, err := io.ReadAll(io.NewSectionReader(held, 0, 1<<40))
		if err != nil {
			return fmt.Errorf("read of the held descriptor of unlinked %s %s: %w", name, when, err)
		}
		if msg := compareFile(f, old, got, s.seed); msg != "" && !s.killed.Load() {
			s.workerFail("WRONG BYTES", "held descriptor of an unlinked file, "+when+": "+msg, false)
		}
		s.heldReads.Add(1)
		s.liveReads.Add(1)
		return nil
	}
	if err := check("after unlink"); err != nil {
		return err
	}
	if rng.IntN(2) == 0 {
		if err := w.newVersion(wi, rng, f, fsyncPct); err != nil {
			return err
		}
		s.recreates.Add(1)
		return check("after the name was recreated")
	}
	return nil
}

// fileReader reads whole files no writer holds and checks them against
// the last closed version, while the daemon runs.
func (w *workload) fileReader(wi int, rng *rand.Rand) {
	defer w.wg.Done()
	defer w.mark(wi, "")
	s := w.s
	for !w.stopped() {
		f := s.files[rng.IntN(len(s.files))]
		if !f.mu.TryLock() {
			continue
		}
		if f.live == nil {
			f.mu.Unlock()
			time.Sleep(time.Millisecond)
			continue
		}
		w.mark(wi, "read "+s.path(f))
		got, err := os.ReadFile(s.path(f))
		if err != nil && s.prof.mayFill && errors.Is(err, syscall.EIO) && !s.killed.Load() {
			var st syscall.Stat_t // EIO at the read that found the loss, then ENOENT
			if e := syscall.Stat(s.path(f), &st); errors.Is(e, syscall.ENOENT) {
				err = e
			}
		}
		if err != nil && s.prof.mayFill && errors.Is(err, fs.ErrNotExist) && !s.killed.Load() {
			// No G4: a block G3 cannot keep makes its file lost, whole.
			s.lostLive.Add(1)
			f.acked, f.pending, f.live = nil, nil, nil
			f.mu.Unlock()
			continue
		}
		if err != nil {
			f.mu.Unlock()
			s.workerFail("I/O ERROR", fmt.Sprintf("reader: file %d (live version %d): %v", f.id, f.live.v, err), true)
			return
		}
		if msg := compareFile(f, *f.live, got, s.seed); msg != "" && !s.killed.Load() {
			s.workerFail("WRONG BYTES", "read while the daemon runs: "+msg, false)
		}
		s.liveReads.Add(1)
		f.mu.Unlock()
	}
}

// compareFile checks got against version want of f in full; "" when equal.
func compareFile(f *fileState, want fileVer, got []byte, seed uint64) string {
	img := want.image(f.id, seed)
	if len(got) != len(img) {
		return fmt.Sprintf("file %d: %d bytes, want %d (%s)", f.id, len(got), len(img), want)
	}
	if i := firstDiff(got, img); i >= 0 {
		return describeDiff(fmt.Sprintf("file %d", f.id), got, img, i, want.v)
	}
	return ""
}

func describeDiff(what string, got, want []byte, i int, v uint64) string {
	p := i / pageSize * pageSize
	end := min(p+pageSize, len(got), len(want))
	scratch := make([]byte, pageSize)
	var gp pageInfo
	if end-p == pageSize {
		gp = decodePage(got[p:end], scratch)
	}
	return fmt.Sprintf("%s: first wrong byte at offset %d (page %d): expected %#02x got %#02x; expected version %d page %d, the page read is: %s",
		what, i, p/pageSize, want[i], got[i], v, p/pageSize, gp)
}

type nbdPair struct{ w, r *nbdClient }

func (s *soak) openNBDPair() *nbdPair {
	wc, err := dialNBD(s.sock, "default", opTimeout)
	if err != nil {
		s.fail("NBD", fmt.Sprintf("connect: %v", err))
	}
	rc, err := dialNBD(s.sock, "default", opTimeout)
	if err != nil {
		s.fail("NBD", fmt.Sprintf("connect: %v", err))
	}
	return &nbdPair{wc, rc}
}

// nbdWriter writes runs of self-verifying sectors into [lo, hi), some with
// FUA, a FLUSH every few writes, and reads each write back through a second
// connection (writes are visible to every connection once acknowledged).
func (w *workload) nbdWriter(wi int, rng *rand.Rand, p *nbdPair, lo, hi int) {
	defer w.wg.Done()
	defer w.mark(wi, "")
	defer p.w.Close()
	defer p.r.Close()
	s, m := w.s, w.s.exp
	var unflushed []int
	buf := make([]byte, 128*pageSize)
	rb := make([]byte, 128*pageSize)
	for n := 0; !w.stopped(); n++ {
		k := 1 + rng.IntN(32)
		sec := lo + rng.IntN(hi-lo-k)
		v := s.version.Add(1)
		// 80 % WRITE, 10 % TRIM, 10 % WRITE_ZEROES (half with NO_HOLE).
		// TRIM and WRITE_ZEROES can cover whole export blocks (freed) or
		// parts of one (zeroed in place): up to 128 sectors.
		op, noHole := "write", false
		switch r := rng.IntN(100); {
		case r < 10:
			op = "trim"
		case r < 20:
			op, noHole = "write-zeroes", rng.IntN(2) == 0
		}
		if op != "write" && s.noDiscard && !noHole {
			op = "write" // CTXMEM_SOAK_DISCARD=0: no request that discards blocks
		}
		fua := rng.IntN(100) < 15
		if op != "write" {
			if rng.IntN(3) == 0 {
				k = 1 + rng.IntN(128)
				sec = lo + rng.IntN(hi-lo-k)
			}
			m.markZero(v, fmt.Sprintf("%s [%d,%d) fua=%v no_hole=%v", op, sec, sec+k, fua, noHole))
			clear(buf[:k*pageSize])
		}
		for i := 0; i < k; i++ {
			if op == "write" {
				fillPage(buf[i*pageSize:(i+1)*pageSize], magicNBD, 0, v, uint64(sec+i), s.seed)
			}
			m.sent[sec+i] = append(m.sent[sec+i], v)
		}
		w.mark(wi, fmt.Sprintf("nbd %s sectors [%d,%d) fua=%v no_hole=%v", op, sec, sec+k, fua, noHole))
		var err error
		switch op {
		case "write":
			err = p.w.WriteAt(buf[:k*pageSize], int64(sec)*pageSize, fua)
		case "trim":
			err = p.w.Trim(int64(sec)*pageSize, uint32(k*pageSize), fua)
		default:
			err = p.w.WriteZeroes(int64(sec)*pageSize, uint32(k*pageSize), fua, noHole)
		}
		if s.nospace(err) {
			continue // refused; the sectors may hold the old or the new version
		} else if err != nil {
			s.workerFail("I/O ERROR", fmt.Sprintf("nbd %s sectors [%d,%d): %v", op, sec, sec+k, err), true)
			return
		}
		switch op {
		case "write":
			s.nbdWrites.Add(1)
			s.bytesWritten.Add(int64(k * pageSize))
		case "trim":
			s.nbdTrims.Add(1)
		default:
			s.nbdZeroes.Add(1)
		}
		for i := 0; i < k; i++ {
			m.lastAcked[sec+i] = v
			if fua && !s.prof.volatile {
				m.durable[sec+i] = v
			} else {
				unflushed = append(unflushed, sec+i)
			}
		}
		w.mark(wi, fmt.Sprintf("nbd read-back sectors [%d,%d)", sec, sec+k))
		if err := p.r.ReadAt(rb[:k*pageSize], int64(sec)*pageSize); err != nil {
			s.workerFail("I/O ERROR", fmt.Sprintf("nbd read sectors [%d,%d): %v", sec, sec+k, err), true)
			return
		}
		if i := firstDiff(rb[:k*pageSize], buf[:k*pageSize]); i >= 0 && !s.killed.Load() {
			s.workerFail("WRONG BYTES", "NBD read-back of an acknowledged "+op+" (zeros unless a write), other connection: "+
				describeDiff(fmt.Sprintf("export offset %d", sec*pageSize), rb[:k*pageSize], buf[:k*pageSize], i, v), false)
			return
		}
		s.liveReads.Add(1)
		if rng.IntN(6) == 0 {
			select {
			case w.flushing <- struct{}{}:
			default:
			}
			w.mark(wi, "nbd flush")
			if err := p.w.Flush(); s.nospace(err) {
				continue // not flushed: nothing became durable
			} else if err != nil {
				s.workerFail("I/O ERROR", fmt.Sprintf("nbd flush: %v", err), true)
				return
			}
			s.nbdFlushes.Add(1)
			if s.prof.volatile {
				unflushed = unflushed[:0]
			}
			for _, x := range unflushed {
				m.durable[x] = m.lastAcked[x]
			}
			unflushed = unflushed[:0]
		}
		if rng.IntN(10) == 0 {
			time.Sleep(time.Duration(rng.IntN(5)) * time.Millisecond)
		}
	}
}

// nospace: the server answered ENOSPC, legitimate on a profile whose
// tiers can fill (counted).
func (s *soak) nospace(err error) bool {
	var e errNBDReply
	if err != nil && s.prof.mayFill && errors.As(err, &e) && e.errno == uint32(syscall.ENOSPC) && !s.killed.Load() {
		s.enospc.Add(1)
		return true
	}
	return false
}
