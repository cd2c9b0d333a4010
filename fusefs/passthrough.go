package fusefs

import (
	"context"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ctxmem/ctxmemd/tiering"
)

// FUSE passthrough (Linux 6.9+, Documentation/filesystems/fuse-passthrough
// .rst). An open of a file whose object the backend can serve from a
// memory file (tiering.Store.OpenPassthrough: every block in G2, in a
// memfd at its file offset) is answered with FOPEN_PASSTHROUGH and that
// memfd as backing file: the kernel then reads, writes and maps the open
// file without a request to the daemon, at the speed of the memory the
// bytes are in, and without a second copy in the FUSE page cache.
//
// The kernel's rules shape the choice per inode (fs/fuse/iomode.c): while
// an inode is open in passthrough every further open must be passthrough
// too (else EIO), and a passthrough open of an inode open in cached mode
// fails (EIO). So each node counts its passthrough opens and its cached
// opens (answered without FOPEN_DIRECT_IO), under a per-node lock held
// across the decision:
//   - passthrough opens exist: this one is passthrough (the object is held
//     resident by them, so it can always be served so);
//   - cached opens exist: the usual mode (KEEP_CACHE or DIRECT_IO);
//   - neither: passthrough when the backend agrees, else the usual mode.
//
// Opens for reading are served by passthrough; opens for writing go
// through the daemon, whose dirty bound, G2 budget and quota then hold for
// every write (a passthrough write lands in memory unchecked; opt in with
// Options.PassthroughWrites), except while
// the inode is already open in passthrough: then the kernel takes nothing
// else, so the writer is passthrough too (a file written while it is being
// read, which engines do not do), its size bounded only at open by the
// backend. The daemon sees no READ or WRITE of a passthrough open: heat is
// counted per open, and bytes written through it are taken in by the
// backend at fsync and close; meanwhile GETATTR reports the memory file's
// size (a stale, smaller size would make the kernel cut its view of the
// file short). Namespaces with a quota are served without passthrough. go-fuse turns passthrough off for the whole
// mount, silently, after one failed backing-file registration; a READ or
// WRITE arriving on a passthrough handle shows it happened, and the mount
// then reports passthrough off with that reason. Until the inodes open in
// passthrough at that moment are closed, the kernel refuses their new
// opens (they are answered without passthrough); nothing outside go-fuse
// can undo that, so the daemon only reports it.

// The release fence. go-fuse (v2.12.1, fs/bridge.go rawBridge.Release)
// drops a reference to the inode's backing-file id on the RELEASE of every
// handle, passthrough or not, once the daemon's Release has returned; only
// passthrough opens took one. So when a handle served through the daemon
// is released while a passthrough open of the same inode is being
// answered (the daemon already saw the first release, so the node had no
// open left, and chose passthrough), go-fuse unregisters the backing id
// the new open's reply carries, and the kernel fails that open with EIO
// (the kernel's backing-file rule: an open reply whose id is closed before
// the open completes fails; Linux commit 44350256ab94). A KV engine sees
// this as a read of a file it has just written failing with EIO
// (TestE2EWorkloads/W2 under load, 1 run in 6). The fence wraps go-fuse's
// RawFileSystem: each RELEASE of a handle not served by passthrough counts
// its node as releasing from the start of the daemon's Release until
// go-fuse's Release has returned, and a node that is releasing is not
// opened by passthrough (that open is served through the daemon).
type releaseFence struct {
	fuse.RawFileSystem
	mu sync.Mutex
	// releasing maps an in-flight RELEASE (its request's cancel channel,
	// unique while the request runs) to its node.
	releasing map[<-chan struct{}]*node
}

func newReleaseFence(raw fuse.RawFileSystem) *releaseFence {
	return &releaseFence{RawFileSystem: raw, releasing: map[<-chan struct{}]*node{}}
}

// Release is go-fuse's, then the end of the node's release (see above).
func (r *releaseFence) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	r.RawFileSystem.Release(cancel, in)
	r.mu.Lock()
	n := r.releasing[cancel]
	delete(r.releasing, cancel)
	r.mu.Unlock()
	if n != nil {
		n.mu.Lock()
		n.releasing--
		n.mu.Unlock()
	}
}

// begin marks n releasing a handle served through the daemon until the
// RELEASE request ctx belongs to has left go-fuse. A ctx that is not a
// go-fuse request (a direct call in a test) marks nothing.
func (r *releaseFence) begin(ctx context.Context, n *node) {
	fc, ok := ctx.(*fuse.Context)
	if r == nil || !ok || fc.Cancel == nil {
		return
	}
	r.mu.Lock()
	r.releasing[fc.Cancel] = n
	r.mu.Unlock()
	n.mu.Lock()
	n.releasing++
	n.mu.Unlock()
}

// ptBackend is implemented by backends that can serve objects by
// passthrough (tiering.Store).
type ptBackend interface {
	OpenPassthrough(ctx context.Context, id tiering.ObjectID, write bool) (tiering.PassthroughInfo, error)
	ClosePassthrough(id tiering.ObjectID, write bool) error
}

// ptState is a mount's passthrough state.
type ptState struct {
	on     atomic.Bool
	mu     sync.Mutex
	reason string // why it is off
	be     ptBackend
	// reads and writes count READ and WRITE requests the daemon served
	// (all opens), so the effect of passthrough can be seen.
	reads, writes atomic.Int64
}

// off turns passthrough off with a reason (kept: the first one).
func (p *ptState) off(reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reason == "" {
		p.reason = reason
	}
	p.on.Store(false)
}

// ptHandle is the file handle of a passthrough open: go-fuse registers
// file as the inode's backing file (fs.FilePassthroughFder) when the inode
// has none yet.
type ptHandle struct {
	openHandle
	file *os.File
}

var _ fs.FilePassthroughFder = (*ptHandle)(nil)

// PassthroughFd returns the memory file's descriptor, open until Release.
func (h *ptHandle) PassthroughFd() (int, bool) { return int(h.file.Fd()), true }

// tryPassthrough answers an open of n by passthrough when the rules above
// allow it. handled is false when the open is to be answered the usual
// way; otherwise the handle or errno is the answer. n.openMu held.
func (f *fsys) tryPassthrough(ctx context.Context, n *node, flags uint32) (h fs.FileHandle, handled bool, e syscall.Errno) {
	if !f.pt.on.Load() {
		return nil, false, 0
	}
	write := writeAccess(flags)
	n.mu.Lock()
	must := n.ptOpens > 0
	// Opens for writing go through the daemon (its dirty bound, G2 budget
	// and quota hold every write) unless the inode is already open in
	// passthrough, where the kernel accepts nothing else.
	// A writer through the daemon (direct I/O in CacheDirect mode is not a
	// cached open) must not meet a passthrough writer: the daemon's grow of
	// the memory file could cut off what the other just appended.
	// No open of any kind may be served by the daemon either: a direct-I/O
	// open (a reader that came while a writer was open) enters the kernel's
	// cached I/O mode when it is mapped shared, unseen by the daemon, and
	// the kernel then answers a passthrough open with EIO (fs/fuse/iomode.c;
	// TestE2EPassthroughAfterMappedDirectOpen).
	// Nor while a handle served through the daemon is being released:
	// see releaseFence.
	can := must || ((!write || f.opts.PassthroughWrites) && n.opens == 0 && n.releasing == 0 &&
		n.ns.cfg.QuotaBytes == 0 && !n.lost)
	obj := n.obj
	n.mu.Unlock()
	if !can {
		return nil, false, 0
	}
	pctx, release := f.interruptible(ctx)
	info, err := f.pt.be.OpenPassthrough(pctx, obj, write)
	release()
	if err != nil {
		if !must && errors.Is(err, tiering.ErrNoPassthrough) {
			return nil, false, 0
		}
		if gone(err) {
			f.onLost(obj)
		}
		if !must {
			f.log.Debug("fusefs: passthrough open failed; serving through the daemon", "object", obj, "err", err)
			return nil, false, 0
		}
		f.log.Warn("fusefs: passthrough open of a file open in passthrough failed", "object", obj, "err", err)
		return nil, true, errno(err)
	}
	ph := &ptHandle{openHandle: openHandle{write: write}, file: info.File}
	n.mu.Lock()
	n.opens++
	n.ptOpens++
	if write {
		n.writers++
		n.ptWriters++
	}
	n.mu.Unlock()
	return ph, true, 0
}

// releasePassthrough ends passthrough open h of n (Release): the backend
// takes in what was written, and the node's size follows. After a writer,
// the kernel's cached attributes and any pages a cached open left in the
// FUSE page cache before this passthrough session are invalidated before
// another open can choose cached mode (n.openMu): they predate the writes.
func (f *fsys) releasePassthrough(n *node, h *ptHandle) {
	n.openMu.Lock()
	defer n.openMu.Unlock()
	if err := f.pt.be.ClosePassthrough(n.obj, h.write); err != nil && !gone(err) {
		f.log.Warn("fusefs: passthrough close", "object", n.obj, "err", err)
	}
	h.file.Close()
	n.mu.Lock()
	n.ptOpens--
	if h.write {
		n.ptWriters--
		ts := now()
		n.mtime, n.ctime = ts, ts
		if n.inflight == 0 {
			f.resyncLocked(n)
		}
	}
	n.mu.Unlock()
	if h.write {
		f.j.Touch(n)
		if srv := f.notes.server(); srv != nil {
			srv.InodeNotify(n.ino, 0, -1)
		}
	}
}

// ptFresh re-reads the size of a file open for writing by passthrough
// (its writes do not reach the daemon) before its attributes are sent.
func (f *fsys) ptFresh(n *node) {
	n.mu.Lock()
	if n.ptWriters > 0 && n.inflight == 0 {
		f.resyncLocked(n)
	}
	n.mu.Unlock()
}

// ptSawIO notes a READ or WRITE on handle fh: on a passthrough handle it
// means the kernel did not take the backing file (go-fuse then turned
// passthrough off for the whole mount).
func (f *fsys) ptSawIO(fh fs.FileHandle) {
	if _, ok := fh.(*ptHandle); ok && f.pt.on.Load() {
		f.pt.off("the kernel refused a backing file (go-fuse turned passthrough off for this mount)")
		f.log.Warn("fusefs: passthrough is off for this mount: a passthrough open reached the daemon with READ/WRITE")
	}
}

// PassthroughStatus reports whether opens are served by FUSE passthrough,
// why not when off, and the READ and WRITE requests the daemon served.
type PassthroughStatus struct {
	On     bool   `json:"on"`
	Reason string `json:"reason,omitempty"`
	Reads  int64  `json:"daemon_reads"`
	Writes int64  `json:"daemon_writes"`
}

// Passthrough returns the mount's passthrough status.
func (s *Server) Passthrough() PassthroughStatus {
	p := &s.fsys.pt
	p.mu.Lock()
	defer p.mu.Unlock()
	return PassthroughStatus{On: p.on.Load(), Reason: p.reason, Reads: p.reads.Load(), Writes: p.writes.Load()}
}

// initPassthrough decides at mount whether passthrough is on.
func (f *fsys) initPassthrough(srv *fuse.Server) {
	p := &f.pt
	be, ok := f.be.(ptBackend)
	switch {
	case f.opts.NoPassthrough:
		p.off("disabled (passthrough: false)")
	case f.opts.WritebackCache:
		p.off("writeback_cache is on (the kernel cannot combine them)")
	case os.Geteuid() != 0:
		p.off("needs root (CAP_SYS_ADMIN)")
	case !ok:
		p.off("the backend cannot serve memory files")
	case srv.KernelSettings().Flags64()&fuse.CAP_PASSTHROUGH == 0:
		p.off("the kernel does not offer FUSE passthrough (Linux 6.9+)")
	default:
		p.be = be
		p.on.Store(true)
		return
	}
	f.log.Info("fusefs: passthrough off; every read and write goes through the daemon", "reason", p.reason)
}
