package tiering

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// Passthrough: G2 objects in memory files.
//
// The FUSE front end serves a G2-resident file by kernel passthrough
// (Linux 6.9+, Documentation/filesystems/fuse-passthrough.rst): reads,
// writes and shared mmap of the open file go to a backing file without a
// request to the daemon. The backing file is the object's memory file
// (memfd): OpenPassthrough moves the object's G2 blocks into it, at their
// file offsets, and from then on each G2 block of the object is a slice of
// a MAP_SHARED mapping of that file. So the bytes exist once, in shmem
// pages the daemon reads and writes through its mapping and the kernel
// through the backing file, coherent both ways with no copy.
//
// While the object is open this way it stays wholly resident (none of its
// blocks is evicted: freeing them would hole the file under its readers).
// Bytes written through passthrough reach the memory file without the
// daemon seeing them, so an open for writing records the object dirty
// before it is answered (a crash then drops the object, never serves older
// bytes as current), and its writes are taken in (size from fstat of the
// memory file, every block marked dirty and queued) at Flush (fsync), at
// each close of a writer (ClosePassthrough) and when the object is stated.
// Once closed the object keeps its memory file; its blocks are evicted
// like any other (a hole is punched where a block was), and the next
// passthrough open fills the holes again first.
//
// Safety of the mapping: a page of a MAP_SHARED mapping past the end of
// the file raises SIGBUS, so the file is grown (ftruncate) before the
// daemon writes past its end and shrunk only after the bytes past the new
// end were dropped; a block's slice is only ever touched below the file's
// size. Mappings are never moved: a larger one is added when the file
// outgrows the current one and every mapping stays until the object goes,
// so block slices taken from an older one stay valid.

// ErrNoPassthrough is returned by OpenPassthrough for an object that is
// not served from a memory file (an NBD export, an object larger than
// Config.PassthroughMaxBytes, one waiting for G4's listing, a store
// closing); the front end serves it through the daemon instead.
var ErrNoPassthrough = errors.New("object not served by passthrough")

// DefaultPassthroughMaxBytes is Config.PassthroughMaxBytes' default.
const DefaultPassthroughMaxBytes = 256 << 20

// DefaultPassthroughMaxFiles is the floor of Config.PassthroughMaxFiles'
// default (AutoPassthroughMaxFiles). Each memory file costs the daemon a
// descriptor and at least one mapping (the kernel's vm.max_map_count,
// 65530 by default, bounds mappings), so only so many objects keep one;
// the least recently closed give theirs up first (their blocks move back
// to ordinary G2 buffers, a copy each: past the bound every new file costs
// an older one that move, so the bound should cover the files G2 holds).
const DefaultPassthroughMaxFiles = 1024

// AutoPassthroughMaxFiles is Config.PassthroughMaxFiles' default: as many
// memory files as this process can afford, min(65536, (RLIMIT_NOFILE soft
// limit − 4096) / 2, vm.max_map_count / 4), and at least
// DefaultPassthroughMaxFiles. Half the descriptors and a quarter of the
// mappings stay for everything else (G3 segments, FUSE, sockets, the Go
// heap).
func AutoPassthroughMaxFiles() int {
	n := 65536
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err == nil && rl.Cur < 1<<31 {
		n = min(n, (int(rl.Cur)-4096)/2)
	}
	if b, err := os.ReadFile("/proc/sys/vm/max_map_count"); err == nil {
		if m, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && m > 0 {
			n = min(n, m/4)
		}
	}
	return max(n, DefaultPassthroughMaxFiles)
}

// ptFiles tracks the objects that have a memory file (Store.pt).
type ptFiles struct {
	mu     sync.Mutex
	n      int                       // objects with a memory file
	closed *list.List                // of *object with no passthrough open, most recently closed first
	elem   map[*object]*list.Element // their places in closed
}

// memFile is the memory file of a G2 object (see above). opens and
// writers are guarded by the object's lock; maps and size also by mu
// (readers promoting blocks under the object's read lock map too).
type memFile struct {
	fd        int
	promoteMu sync.Mutex // serialises promotions into the file under the object's read lock
	// exposed: the file was handed to the kernel (a passthrough open). A
	// mapping an application made may outlive every open (mmap, then
	// close), and the kernel may still hold the file registered for a
	// moment after the last release, so from then on the daemon never
	// punches its pages to free them: an evicted block's pages stay until
	// the whole file is retired (retireMemFileLocked), and only a TRIM or
	// truncate (which must read as zeros) punches.
	exposed bool
	// retired: the file is being closed; no more punching.
	retired bool
	// closedAt is the last passthrough close (the retire grace period
	// runs from it).
	closedAt time.Time
	// takenMtime is the file's mtime at the last take-in (adoptLocked):
	// unchanged, nothing was written through the file since.
	takenMtime unix.Timespec
	mu         sync.Mutex
	maps       [][]byte // every mapping made, the newest last
	size       int64    // the file's size (bytes)
	opens      int      // passthrough opens of the object
	writers    int      // of them, opens for writing
}

// mapChunk is the granule mappings are sized in (virtual address space
// only; pages exist where the file has data).
const mapChunk = 1 << 20

func newMemFile(id ObjectID) (*memFile, error) {
	fd, err := unix.MemfdCreate(fmt.Sprintf("ctxmemd-g2-%d", id), unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd for object %d: %w", id, err)
	}
	return &memFile{fd: fd}, nil
}

// setSize sets the file's size.
func (m *memFile) setSize(n int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n == m.size {
		return nil
	}
	return m.truncateLocked(n)
}

// truncateLocked sets the file's size to n. m.mu held.
func (m *memFile) truncateLocked(n int64) error {
	if err := unix.Ftruncate(m.fd, n); err != nil {
		return fmt.Errorf("memory file size %d: %w", n, err)
	}
	m.size = n
	return nil
}

// grow makes the file at least n bytes long. The file may be longer than
// size records (a passthrough write extended it), so its real size is
// read before it is grown: growing must never cut those bytes off.
func (m *memFile) grow(n int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n <= m.size {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(m.fd, &st); err != nil {
		return fmt.Errorf("stat memory file: %w", err)
	}
	if n <= st.Size {
		m.size = st.Size
		return nil
	}
	return m.truncateLocked(n)
}

// mapped returns the newest mapping, at least end bytes long.
func (m *memFile) mapped(end int64) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l := len(m.maps); l > 0 && int64(len(m.maps[l-1])) >= end {
		return m.maps[l-1], nil
	}
	n := max(end, 2*int64(len(m.lastMap())))
	n = (n + mapChunk - 1) / mapChunk * mapChunk
	b, err := unix.Mmap(m.fd, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map memory file (%d bytes): %w", n, err)
	}
	m.maps = append(m.maps, b)
	return b, nil
}

func (m *memFile) lastMap() []byte {
	if len(m.maps) == 0 {
		return nil
	}
	return m.maps[len(m.maps)-1]
}

// punch frees the pages of [off, off+n) of a file never handed to the
// kernel (see exposed); an exposed file keeps them.
func (m *memFile) punch(off, n int64) {
	if m.exposed {
		return
	}
	m.punchData(off, n)
}

// punchData makes [off, off+n) read as zeros (TRIM, PUNCH_HOLE): also in
// an exposed file, whose readers must see the zeros.
func (m *memFile) punchData(off, n int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.retired || off >= m.size || n <= 0 {
		return
	}
	_ = unix.Fallocate(m.fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
}

// close unmaps every mapping and closes the file. No g2block of it may be
// used afterwards (the caller holds the object's write lock and has
// dropped them).
func (m *memFile) close() {
	for _, b := range m.maps {
		_ = unix.Munmap(b)
	}
	m.maps = nil
	_ = unix.Close(m.fd)
	m.fd = -1
}

// memBlock returns a G2 block of o's memory file for block idx: a slice of
// the mapping at the block's offset, bs bytes long, of which only bytes
// below the file's size may be touched. The file is grown to hold at
// least need bytes of the block first. o.mu held for writing, or for
// reading while no writer can change the file's size.
func (s *Store) memBlock(o *object, idx uint32, need int) (*g2block, error) {
	m := o.mf
	off := int64(idx) * int64(o.bs)
	if err := m.grow(off + int64(need)); err != nil {
		return nil, err
	}
	mp, err := m.mapped(off + int64(o.bs))
	if err != nil {
		return nil, err
	}
	n := pageRound(max(need, 1))
	used := s.g2used.Add(int64(n))
	s.g2blocks.Add(1)
	if o.pinned {
		s.g2pinned.Add(int64(n))
	}
	if float64(used) > s.limits().High*float64(s.limits().Bytes) {
		s.needEvict.broadcast()
	}
	// len is what G2 accounts (the block's bytes, page-rounded), cap the
	// whole block: growMemBlockLocked extends len as the block grows.
	return &g2block{buf: mp[off : off+int64(n) : off+int64(o.bs)], mf: m, off: off}, nil
}

// pageRound rounds n up to a whole number of pages.
func pageRound(n int) int { return (n + pageSize - 1) &^ (pageSize - 1) }

// growMemBlockLocked makes memory-file block g (of block state b) hold at
// least need bytes: the file is grown first, then g's length and the G2
// (and dirty, pinned) accounting. o.mu held for writing.
func (s *Store) growMemBlockLocked(o *object, b *blockState, g *g2block, need int) error {
	if err := g.mf.grow(g.off + int64(need)); err != nil {
		return err // the file must cover the bytes before they are written
	}
	if need <= len(g.buf) {
		return nil
	}
	n := min(pageRound(need), cap(g.buf))
	delta := int64(n - len(g.buf))
	g.buf = g.buf[:n]
	s.g2used.Add(delta)
	if o.pinned {
		s.g2pinned.Add(delta)
	}
	if b.dirty {
		b.w().dirtyN += delta
		s.g2dirty.Add(delta)
	}
	return nil
}

// promoteMemLocked is promoteLocked for an object with a memory file.
// Readers promote under the object's read lock, and every reader of a
// block gets the same pages of the file, so the bytes are read into a
// private buffer first and copied into the file only by the one reader
// that installs the block (under the memory file's promotion lock): a
// failed or losing read never writes, zeroes or punches pages another
// reader installed. o.mu held for reading or writing.
func (s *Store) promoteMemLocked(ctx context.Context, o *object, idx uint32, b *blockState) (*g2block, int, error) {
	blen := o.blockLen(idx)
	tmp, err := s.pool.get(max(blen, 1))
	if err != nil {
		return nil, 0, err
	}
	defer s.pool.put(tmp)
	src, err := s.readLower(ctx, o, idx, b, tmp[:blen], 0)
	if err != nil {
		return nil, 0, err
	}
	m := o.mf
	m.promoteMu.Lock()
	defer m.promoteMu.Unlock()
	if g := b.g2.Load(); g != nil {
		return g, tiG2, nil // another reader installed it meanwhile
	}
	g, err := s.memBlock(o, idx, max(blen, 1))
	if err != nil {
		return nil, 0, err
	}
	if err := g.fill(0, tmp[:blen]); err != nil {
		s.freeG2(bref{o.id, idx}, g, false, o.pinned)
		return nil, 0, err
	}
	g.n = blen
	b.g2.Store(g)
	s.c.promotions.Add(1)
	return g, src, nil
}

// residentInMemFile reports whether every block of o is in G2 in its
// memory file already (a passthrough open then reads nothing, whatever the
// object's size). o.mu held.
func (o *object) residentInMemFile() bool {
	if o.mf == nil {
		return false
	}
	for _, b := range o.blocks.all() {
		if g := b.g2.Load(); g == nil || g.mf == nil {
			return false
		}
	}
	return true
}

// PassthroughInfo is what OpenPassthrough hands the front end.
type PassthroughInfo struct {
	// File is a descriptor of the object's memory file, the caller's to
	// close (after ClosePassthrough).
	File *os.File
	// Size is the object's size in bytes.
	Size int64
}

// OpenPassthrough prepares object id to be served by FUSE passthrough from
// its memory file: every block is brought into G2 (read from the tier that
// holds it; the wait is bounded by ctx), the G2 copies move into the
// memory file, and the object stays wholly resident until the matching
// ClosePassthrough. An open for writing records the object dirty first.
// Errors: ErrNoPassthrough (serve it through the daemon), ErrNotExist,
// ErrLost, tier errors from reading a block, ctx errors.
func (s *Store) OpenPassthrough(ctx context.Context, id ObjectID, write bool) (PassthroughInfo, error) {
	info, err := s.openPassthrough(ctx, id, write)
	if err == nil {
		// Outside o.mu, as in ReadAt: the open is the object's access
		// (its reads never reach the daemon).
		s.touched(id)
	}
	s.askTrim()
	return info, err
}

func (s *Store) openPassthrough(ctx context.Context, id ObjectID, write bool) (PassthroughInfo, error) {
	if s.closed.Load() {
		return PassthroughInfo{}, ErrNoPassthrough
	}
	o, err := s.lockLive(id)
	if err != nil {
		return PassthroughInfo{}, err
	}
	defer o.mu.Unlock()
	if o.dur == DurabilityDevice || o.awaitG4 || (o.size > s.cfg.PassthroughMaxBytes && (o.mf == nil || o.mf.opens == 0) && !o.residentInMemFile()) {
		return PassthroughInfo{}, ErrNoPassthrough
	}
	if write {
		o.sealed = false // written through the kernel from now on, unseen here
	}
	if write {
		if err := s.markMetaDirty(o); err != nil {
			return PassthroughInfo{}, err
		}
	}
	hadFile := o.mf != nil
	if !hadFile && !s.pt.reserve(s.cfg.PassthroughMaxFiles) {
		return PassthroughInfo{}, ErrNoPassthrough // every memory file is open
	}
	srcs, err := s.toMemFileLocked(ctx, o)
	switch {
	case !hadFile && o.mf == nil:
		s.pt.release() // no file was made after all
	case !hadFile && o.mf.opens == 0 && err != nil:
		s.pt.closedLast(o) // made but not opened: a trim candidate
	}
	if err == nil && o.mf != nil {
		var fd int
		if fd, err = unix.FcntlInt(uintptr(o.mf.fd), unix.F_DUPFD_CLOEXEC, 0); err == nil {
			return s.openedLocked(o, id, fd, write, srcs), nil
		}
		err = fmt.Errorf("passthrough object %d: dup: %w", id, err)
		if !hadFile {
			s.pt.closedLast(o)
		}
		return PassthroughInfo{}, err
	}
	if err != nil {
		if errors.Is(err, tier.ErrNotFound) || errors.Is(err, tier.ErrCorrupt) {
			o.mu.Unlock()
			s.lose(id, err)
			o.mu.Lock()
			return PassthroughInfo{}, fmt.Errorf("passthrough object %d: %w: %v", id, ErrLost, err)
		}
		return PassthroughInfo{}, err
	}
	return PassthroughInfo{}, ErrNoPassthrough
}

// openedLocked counts a passthrough open of o whose memory file is ready
// and returns its descriptor fd to the caller. o.mu held for writing.
func (s *Store) openedLocked(o *object, id ObjectID, fd int, write bool, srcs map[uint32]int) PassthroughInfo {
	if o.mf.opens == 0 {
		s.holdResidentLocked(o)
		s.pt.opened(o)
		s.c.ptOpenObjects.Add(1)
	}
	o.mf.opens++
	if write {
		o.mf.writers++
	}
	s.c.ptOpens.Add(1)
	s.countOpenLocked(o, srcs)
	o.mf.exposed = true
	return PassthroughInfo{File: os.NewFile(uintptr(fd), fmt.Sprintf("ctxmemd-g2-%d", id)), Size: o.size}
}

// countOpenLocked counts a passthrough open as a read of every block (the
// daemon sees no READ of it): one read request, a block hit per block by
// the tier that served it (srcs, G2 for the rest), and an access for heat
// and admission. o.mu held for writing.
func (s *Store) countOpenLocked(o *object, srcs map[uint32]int) {
	s.c.readRequests.Add(1)
	allG2 := true
	for idx := range o.blocks.all() {
		n := o.blockLen(idx)
		if n == 0 {
			continue
		}
		src, ok := srcs[idx]
		if !ok {
			src = tiG2
		}
		if src != tiG2 {
			allG2 = false
		}
		s.touch(bref{o.id, idx}, false)
		s.countHit(src, n)
		if b := o.blocks.get(idx); b != nil {
			if g := b.g2.Load(); g != nil {
				s.usedPrestaged(g) // the open will read it through the kernel
			}
		}
	}
	if allG2 {
		s.c.readRequestHits.Add(1)
	}
}

// reserve counts a new memory file if fewer than max exist; else it
// makes room by asking for the least recently closed one to be given up
// (trim, after the caller's locks are released) and reports false when
// every one is open.
func (p *ptFiles) reserve(max int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n >= max && p.closed.Len() == 0 {
		return false
	}
	p.n++
	return true
}

// release uncounts a memory file reserved but not made, or closed.
func (p *ptFiles) release() {
	p.mu.Lock()
	p.n--
	p.mu.Unlock()
}

// opened takes o off the closed list (its first open).
func (p *ptFiles) opened(o *object) {
	p.mu.Lock()
	if e, ok := p.elem[o]; ok {
		p.closed.Remove(e)
		delete(p.elem, o)
	}
	p.mu.Unlock()
}

// closedLast puts o at the front of the closed list (its last close).
func (p *ptFiles) closedLast(o *object) {
	p.mu.Lock()
	if _, ok := p.elem[o]; !ok {
		p.elem[o] = p.closed.PushFront(o)
	}
	p.mu.Unlock()
}

// over returns the least recently closed objects beyond max memory files
// (trimMemFiles re-checks each under its lock, retireGrace included).
// count returns the objects with a memory file.
func (p *ptFiles) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

func (p *ptFiles) over(max int) []*object {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*object
	for e := p.closed.Back(); e != nil && p.n-len(out) > max; e = e.Prev() {
		out = append(out, e.Value.(*object))
	}
	return out
}

// attachMemFileLocked gives o the memory file m (o.mf was nil) and counts
// it (Stats.PassthroughObjects). o.mu held for writing.
func (s *Store) attachMemFileLocked(o *object, m *memFile) {
	o.mf = m
	s.c.ptObjects.Add(1)
}

// detachMemFileLocked forgets o's memory file (closed or being closed by
// the caller) and uncounts it, also as an open one while opens remain
// (the object is being removed: its passthrough closes then find it gone
// and count nothing). o.mu held for writing.
func (s *Store) detachMemFileLocked(o *object) {
	if o.mf == nil {
		return
	}
	if o.mf.opens > 0 {
		s.c.ptOpenObjects.Add(-1)
	}
	o.mf = nil
	s.c.ptObjects.Add(-1)
}

// retireGrace is how long after its last passthrough close a memory file
// is kept as it is: go-fuse unregisters the backing file only after the
// daemon's Release returns, and an open meanwhile would reuse it.
const retireGrace = time.Second

// retirable reports whether o's memory file may be closed now. o.mu held.
func (o *object) retirable() bool {
	m := o.mf
	return m != nil && m.opens == 0 && (!m.exposed || time.Since(m.closedAt) >= retireGrace)
}

// gone forgets o, whose memory file was closed.
func (p *ptFiles) gone(o *object) {
	p.mu.Lock()
	if e, ok := p.elem[o]; ok {
		p.closed.Remove(e)
		delete(p.elem, o)
	}
	p.n--
	p.mu.Unlock()
}

// trimSlack is how far past Config.PassthroughMaxFiles the memory files
// may go before the writer or opener that made one trims itself instead
// of leaving it to trimLoop (the bound's auto value keeps the descriptor
// and mapping limits at least twice as far).
const trimSlack = 1024

// askTrim has trimLoop give up memory files beyond
// Config.PassthroughMaxFiles, off the caller's path: a trim copies the
// blocks out and unmaps the file, and an munmap costs every core a TLB
// shootdown. Past trimSlack more, the caller trims at once.
func (s *Store) askTrim() {
	if s.pt.count() > s.cfg.PassthroughMaxFiles+trimSlack {
		s.trimMemFiles()
		return
	}
	select {
	case s.trimWake <- struct{}{}:
	default:
	}
}

// trimLoop runs trimMemFiles when asked (askTrim). Owner: the Store
// (s.wg); it ends with s.ctx.
func (s *Store) trimLoop() {
	defer s.wg.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.trimWake:
		}
		s.trimMemFiles()
	}
}

// trimMemFiles gives up the memory files of the least recently closed
// objects beyond Config.PassthroughMaxFiles: their G2 blocks move back to
// ordinary buffers (copied), then the file is closed. Called with no lock
// held.
func (s *Store) trimMemFiles() {
	for _, o := range s.pt.over(s.cfg.PassthroughMaxFiles) {
		o.mu.Lock()
		if !o.deleted && o.retirable() {
			s.fromMemFileLocked(o)
		}
		o.mu.Unlock()
	}
}

// fromMemFileLocked moves o's G2 blocks out of its memory file into pool
// buffers and closes the file. A clean block no buffer can be had for
// leaves G2 (its lower copy serves it); for a dirty one the file is kept
// (tried again at the next trim). o.mu held for writing, no passthrough
// open.
func (s *Store) fromMemFileLocked(o *object) {
	for idx, b := range o.blocks.all() {
		g := b.g2.Load()
		if g == nil || g.mf == nil {
			continue
		}
		ng, err := s.allocG2(max(g.n, 1), o.pinned)
		if err != nil {
			if b.dirty {
				s.log.Error("memory file kept: no G2 buffer for a dirty block", "object", o.id, "block", idx, "err", err)
				return // the file stays; tried again at the next trim
			}
			b.g2.Store(nil)
			s.freeG2(bref{o.id, idx}, g, false, o.pinned)
			continue
		}
		s.moveG2(b, g, ng)
		s.unaccountG2(g, o.pinned)
	}
	o.mf.retired = true
	o.mf.close()
	s.detachMemFileLocked(o)
	s.pt.gone(o)
}

// retireMemFileLocked is eviction from an exposed memory file: its pages
// cannot be punched (see exposed), so the whole file goes instead. Clean
// blocks leave G2 (their lower copies serve them), dirty ones move to pool
// buffers (as fromMemFileLocked), then the file is closed; the kernel
// frees its pages once no mapping holds them. o.mu held for writing,
// o.retirable().
func (s *Store) retireMemFileLocked(o *object) {
	for idx, b := range o.blocks.all() {
		g := b.g2.Load()
		if g == nil || g.mf == nil || b.dirty {
			continue
		}
		b.g2.Store(nil)
		s.freeG2(bref{o.id, idx}, g, false, o.pinned) // no punch: exposed
		s.c.evictions[tiG2].Add(1)
	}
	s.fromMemFileLocked(o) // the dirty ones, then the close
}

// maybeMemFileLocked gives file object o a memory file before its first G2
// block when Config.MemFiles asks for it and the object (end bytes once
// written) may be served by passthrough, so a later passthrough open
// finds its bytes in place instead of copying them; it reports whether it
// made one (the caller trims the memory files after unlocking). o.mu held
// for writing.
func (s *Store) maybeMemFileLocked(o *object, end int64) bool {
	if !s.cfg.MemFiles || o.mf != nil || o.dur == DurabilityDevice || o.blocks.len() > 0 ||
		!s.pt.reserve(s.cfg.PassthroughMaxFiles) {
		return false
	}
	m, err := newMemFile(o.id)
	if err == nil {
		err = m.setSize(o.size)
		if err != nil {
			m.close()
		}
	}
	if err != nil {
		s.pt.release()
		s.logLimited("memory file", "object", o.id, "err", err)
		return false
	}
	s.attachMemFileLocked(o, m)
	s.pt.closedLast(o)
	return true
}

// toMemFileLocked moves every block of o into its memory file (creating
// it), reading blocks not in G2 from below; it returns the tier each block
// read from below came from. o.mu held for writing.
func (s *Store) toMemFileLocked(ctx context.Context, o *object) (map[uint32]int, error) {
	if o.mf == nil {
		m, err := newMemFile(o.id)
		if err != nil {
			return nil, err
		}
		if err := m.setSize(o.size); err != nil {
			m.close()
			return nil, err
		}
		s.attachMemFileLocked(o, m)
	}
	if err := o.mf.grow(o.size); err != nil {
		return nil, err
	}
	var srcs map[uint32]int
	idxs := make([]uint32, 0, o.blocks.len())
	for idx := range o.blocks.all() {
		idxs = append(idxs, idx)
	}
	slices.Sort(idxs) // in order: runs of a G4 pack are read with one request
	for _, idx := range idxs {
		b := o.blocks.get(idx)
		g := b.g2.Load()
		if g != nil && g.mf != nil {
			continue
		}
		blen := o.blockLen(idx)
		if blen == 0 {
			continue
		}
		if g == nil {
			if srcs == nil {
				srcs = make(map[uint32]int)
			}
			if err := s.memFileRunLocked(ctx, o, idx, srcs); err != nil {
				return srcs, err
			}
			if g := b.g2.Load(); g != nil && g.mf != nil {
				continue // brought up by the batched read
			}
		}
		ng, err := s.memBlock(o, idx, blen)
		if err != nil {
			return srcs, err
		}
		r := bref{o.id, idx}
		if g != nil {
			s.moveG2(b, g, ng)
			s.freeG2(r, g, b.dirty, o.pinned)
			continue
		}
		src, err := s.readLower(ctx, o, idx, b, ng.buf[:blen], 0)
		if err != nil {
			s.unaccountG2(ng, o.pinned)
			o.mf.punch(ng.off, int64(o.bs))
			return srcs, err
		}
		if srcs == nil {
			srcs = make(map[uint32]int)
		}
		srcs[idx] = src
		ng.n = blen
		s.c.promotions.Add(1)
		b.g2.Store(ng)
	}
	return srcs, nil
}

// memFileRunLocked brings block idx of o, whose memory file is made, and
// the following blocks of its G4 run (restore.go) into the memory file
// with one batched read, recording their source in srcs, when the block
// is read as a run; blocks it did not bring up are left to the caller.
// If the read failed for block idx itself it returns the error, as
// readLower would have. o.mu held for writing.
func (s *Store) memFileRunLocked(ctx context.Context, o *object, idx uint32, srcs map[uint32]int) error {
	rr, run := s.g4Run(o, idx, runLimit(o, o.blockLen(idx), restoreRunBytes))
	if run < 2 {
		return nil
	}
	gs := make([]*g2block, 0, run)
	bufs := make([][]byte, 0, run)
	for i := range run {
		j := idx + uint32(i)
		ng, err := s.memBlock(o, j, o.blockLen(j))
		if err != nil {
			break
		}
		gs, bufs = append(gs, ng), append(bufs, ng.buf[:o.blockLen(j)])
	}
	good := 0
	var err error
	if len(bufs) >= 2 {
		good, err = s.readG4Run(ctx, rr, o, idx, bufs)
	}
	for i, ng := range gs {
		j := idx + uint32(i)
		if i >= good {
			s.unaccountG2(ng, o.pinned)
			o.mf.punch(ng.off, int64(o.bs))
			continue
		}
		ng.n = o.blockLen(j)
		s.c.promotions.Add(1)
		o.blocks.get(j).g2.Store(ng)
		srcs[j] = tiG4
	}
	if good == 0 && err != nil {
		return err // block idx: as readLower would have failed
	}
	return ctx.Err()
}

// holdResidentLocked takes o's G2 blocks out of the eviction order (the
// first passthrough open). o.mu held for writing.
func (s *Store) holdResidentLocked(o *object) {
	s.g2mu.Lock()
	for idx := range o.blocks.all() {
		s.place.remove(bref{o.id, idx})
	}
	s.g2mu.Unlock()
}

// ClosePassthrough ends one passthrough open of object id (write: it was
// for writing): bytes written through the memory file are taken in and
// queued for write-back, and after the last open the object's clean blocks
// become evictable again. Errors: ErrNotExist (the object was removed
// meanwhile; nothing to do).
func (s *Store) ClosePassthrough(id ObjectID, write bool) error {
	o, err := s.lockLive(id)
	if err != nil {
		return err
	}
	defer o.mu.Unlock()
	m := o.mf
	if m == nil || m.opens == 0 {
		return nil
	}
	if write {
		if err := s.adoptLocked(o); err != nil {
			s.logLimited("take in passthrough writes", "object", id, "err", err)
		}
		m.writers--
		s.expediteLocked(o)
	}
	if m.opens--; m.opens == 0 {
		m.closedAt = time.Now()
		s.pt.closedLast(o)
		s.c.ptOpenObjects.Add(-1)
		if !o.pinned {
			now := time.Now()
			s.g2mu.Lock()
			for idx, b := range o.blocks.all() {
				if !b.dirty && b.g2.Load() != nil {
					s.place.makeEvictable(bref{o.id, idx}, now)
				}
			}
			s.g2mu.Unlock()
		}
	}
	return nil
}

// adoptLocked takes in bytes written to o's memory file by passthrough:
// the object's size becomes the file's, blocks the writes created get G2
// block states, and every block is marked dirty (which bytes changed is
// not known) and queued. o.mu held for writing, o.mf set.
func (s *Store) adoptLocked(o *object) error {
	m := o.mf
	var st unix.Stat_t
	if err := unix.Fstat(m.fd, &st); err != nil {
		return fmt.Errorf("stat memory file: %w", err)
	}
	m.mu.Lock()
	m.size = st.Size
	m.mu.Unlock()
	if st.Mtim == m.takenMtime && st.Size == o.size {
		return nil // nothing written through the file since the last take-in
	}
	// Blocks are about to be marked dirty: the record must say so first
	// (an fsync may have recorded the object clean since the open).
	if err := s.markMetaDirty(o); err != nil {
		return err
	}
	m.takenMtime = st.Mtim
	o.setSizeLocked(st.Size)
	if _, err := m.mapped(st.Size); err != nil {
		return err
	}
	for off := int64(0); off < st.Size; off += int64(o.bs) {
		idx := uint32(off / int64(o.bs))
		b := o.blocks.get(idx)
		fresh := b == nil
		if fresh {
			if !memHasData(m.fd, off, int64(o.bs)) {
				continue // a hole nobody wrote
			}
			b = &blockState{}
		}
		g := b.g2.Load()
		if fresh {
			// A block the writes created: its bytes are in the file
			// already; the slice over them becomes its G2 copy.
			ng, err := s.memBlock(o, idx, o.blockLen(idx))
			if err != nil {
				return err
			}
			b.g2.Store(ng)
			o.blocks.set(idx, b)
			g = ng
		}
		if g == nil || g.mf == nil {
			// Cannot happen while the object is held resident; keep the
			// block's lower copy rather than guess.
			continue
		}
		if err := s.growMemBlockLocked(o, b, g, o.blockLen(idx)); err != nil {
			return err
		}
		g.n = o.blockLen(idx)
		if s.volatile {
			continue
		}
		o.wseq++
		b.version = o.wseq
		s.markDirtyLocked(o, b, bref{o.id, idx}, g, false)
	}
	s.wbReady.broadcast()
	return nil
}

// adoptIfWrittenLocked takes in passthrough writes when o is open for
// writing by passthrough (see adoptLocked). o.mu held for writing.
func (s *Store) adoptIfWrittenLocked(o *object) {
	if o.mf == nil || o.mf.writers == 0 {
		return
	}
	if err := s.adoptLocked(o); err != nil {
		s.logLimited("take in passthrough writes", "object", o.id, "err", err)
	}
}

// memHasData reports whether [off, off+n) of the file holds any data
// (SEEK_DATA): blocks a passthrough write created.
func memHasData(fd int, off, n int64) bool {
	d, err := unix.Seek(fd, off, unix.SEEK_DATA)
	return err == nil && d < off+n
}

// unaccountG2 undoes memBlock's accounting for a block slice never used.
func (s *Store) unaccountG2(g *g2block, pinned bool) {
	s.g2used.Add(-int64(len(g.buf)))
	s.g2blocks.Add(-1)
	if pinned {
		s.g2pinned.Add(-int64(len(g.buf)))
	}
	s.space.broadcast()
}

// ptSizeLocked is o's size, taking in a passthrough writer's growth of the
// memory file (fstat) without waiting for its close. o.mu held.
func (o *object) ptSize() int64 {
	if o.mf == nil || o.mf.writers == 0 {
		return o.size
	}
	var st unix.Stat_t
	if err := unix.Fstat(o.mf.fd, &st); err != nil {
		return o.size
	}
	return st.Size
}
