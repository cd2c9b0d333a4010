package fusefs

import (
	"context"
	"syscall"
	"time"

	"github.com/ctxmem/ctxmemd/tiering"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// fileNode is the go-fuse node of a regular file. The file's data lives in
// its Backend object; every operation is a node operation (the file
// handle only records whether an open counts as a writer, see Open).
type fileNode struct {
	fs.Inode
	fsys *fsys
	n    *node
}

var (
	_ fs.NodeOpener        = (*fileNode)(nil)
	_ fs.NodeReleaser      = (*fileNode)(nil)
	_ fs.NodeReader        = (*fileNode)(nil)
	_ fs.NodeWriter        = (*fileNode)(nil)
	_ fs.NodeFlusher       = (*fileNode)(nil)
	_ fs.NodeFsyncer       = (*fileNode)(nil)
	_ fs.NodeAllocater     = (*fileNode)(nil)
	_ fs.NodeGetattrer     = (*fileNode)(nil)
	_ fs.NodeSetattrer     = (*fileNode)(nil)
	_ fs.NodeStatfser      = (*fileNode)(nil)
	_ fs.NodeOnForgetter   = (*fileNode)(nil)
	_ fs.NodeGetxattrer    = (*fileNode)(nil)
	_ fs.NodeSetxattrer    = (*fileNode)(nil)
	_ fs.NodeRemovexattrer = (*fileNode)(nil)
	_ fs.NodeListxattrer   = (*fileNode)(nil)
)

// Open modes (CacheKeep). Every OPEN is answered, so the daemon knows
// which files are open for writing (FUSE no_open would save the OPEN
// request but hide that):
//
//   - An open for writing, and a read-only open of a file nobody has open
//     for writing, get FOPEN_KEEP_CACHE: reads are served from the page
//     cache and a warm re-read costs no request. Writes go through the
//     page cache too, so every cached reader sees them.
//   - A read-only open of a file that is open for writing somewhere (a
//     tail reader) gets FOPEN_DIRECT_IO: its reads go to the daemon.
//
// Why (issue 11 item 5): while a buffered write(2) extends a file the
// kernel marks the size unstable and keeps its own i_size at the old
// value until the whole write(2) is done (one write may be several WRITE
// requests), but fstat in that window asks the daemon (GETATTR: the write
// invalidated the cached size) and reports the daemon's newer size. A
// page-cache read is bounded by the kernel's older i_size, so "fstat says
// S, pread returns less than S" happened. A direct-I/O read is bounded by
// what the daemon holds, which is never less than any size it reported.
//
// What stays uncovered: a reader that opened the file before any writer
// did keeps its cached descriptor (the kernel fixes the mode at open).
// Engines never append to a KV file that others already hold open (files
// are complete before they are renamed into place or read), so this is a
// documented limit rather than a reason to give up the page cache. Hot
// files are to move to FUSE passthrough later, which fixes the mode per
// file instead of per open.
//
// The cost is one OPEN request per open(2) (RELEASE is asynchronous and
// FLUSH is switched off), measured in README "The file system".

// openHandle is the file handle of one open; it records whether the open
// counts as a writer and whether it was answered in cached mode (see
// Open).
type openHandle struct {
	write, cached bool
	// atime: the open may read and did not ask for O_NOATIME, so its
	// release updates atime (fsys.relatime).
	atime bool
}

// writeAccess reports whether open flags ask for write access.
func writeAccess(flags uint32) bool {
	return flags&syscall.O_ACCMODE != syscall.O_RDONLY
}

// open counts a new open of n and returns its handle and FOPEN_* flags:
// passthrough where passthrough.go allows it, else the modes above.
func (f *fsys) open(ctx context.Context, n *node, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	n.openMu.Lock()
	defer n.openMu.Unlock()
	atime := flags&syscall.O_ACCMODE != syscall.O_WRONLY && flags&syscall.O_NOATIME == 0
	if h, handled, e := f.tryPassthrough(ctx, n, flags); handled {
		if ph, ok := h.(*ptHandle); ok {
			ph.atime = atime
		}
		return h, 0, e
	}
	h := &openHandle{write: writeAccess(flags), atime: atime}
	n.mu.Lock()
	n.opens++
	if h.write {
		n.writers++
	}
	writers := n.writers
	fl := uint32(fuse.FOPEN_KEEP_CACHE)
	if f.opts.Cache == CacheDirect || (!h.write && writers > 0) {
		fl = fuse.FOPEN_DIRECT_IO
	} else {
		h.cached = true
		n.cachedOpens++
	}
	n.mu.Unlock()
	return h, fl, 0
}

// relatime updates n's atime when an open that may read is released,
// with the kernel's relatime rule (fs/inode.c, atime_needs_update): when
// atime is not later than mtime or ctime, or is a day old. Reads
// themselves do not reach the daemon with passthrough or the page cache,
// so the open stands for them, as it does for atime-ordered evictors (a
// file just read is one just used); the release, not the open, so that
// opening alone changes nothing (as on a local filesystem). Persisted
// with the next journal commit, like other attribute-only changes.
func (f *fsys) relatime(n *node) {
	ts := now()
	n.mu.Lock()
	old := n.atime <= n.mtime || n.atime <= n.ctime || ts-n.atime >= int64(24*time.Hour)
	if old {
		n.atime = ts
	}
	n.mu.Unlock()
	if old {
		f.j.Touch(n)
	}
}

// Open answers every OPEN (see "Open modes" above). An open with O_TRUNC
// truncates here: the mount negotiates FUSE_ATOMIC_O_TRUNC, so the kernel
// passes O_TRUNC on and sends no SETATTR (size 0) after the OPEN (one
// round trip less per rewrite of an existing file). The kernel has
// already checked write permission (O_TRUNC needs it even with O_RDONLY)
// and truncates its page cache itself.
func (fn *fileNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	defer fn.fsys.observe("open", time.Now())
	fn.fsys.er.used(fn.n)
	if flags&syscall.O_TRUNC != 0 {
		if e := fn.fsys.openTruncate(ctx, fn.n); e != 0 {
			return nil, 0, e
		}
	}
	fn.fsys.curveOpen(fn.n, flags)
	if fn.fsys.skipRestore(fn.n, flags) {
		return nil, 0, syscall.ENOENT // a miss: see restore.go
	}
	fn.fsys.countOpen(fn.n, flags)
	return fn.fsys.open(ctx, fn.n, flags)
}

// openTruncate is the truncation of open(O_TRUNC): size 0, and, as for the
// SETATTR it replaces (FATTR_KILL_SUIDGID), setuid/setgid cleared when the
// caller is not root. The OPEN's own FUSE_OPEN_KILL_SUIDGID flag is not
// passed on by go-fuse (fs.NodeOpener sees the open(2) flags only), so
// the caller's uid decides, as in Write.
func (f *fsys) openTruncate(ctx context.Context, n *node) syscall.Errno {
	if uid, _ := caller(ctx); uid != 0 {
		n.mu.Lock()
		killPriv(n)
		n.mu.Unlock()
	}
	if e := f.truncate(n, 0); e != 0 {
		return e
	}
	f.j.Touch(n)
	return 0
}

// Release ends one open (RELEASE, after the last close of the
// descriptor). The last release of a file with no name left gives its
// space back at once (see releaseUnreachable).
func (fn *fileNode) Release(ctx context.Context, fh fs.FileHandle) syscall.Errno {
	defer fn.fsys.observe("release", time.Now())
	var h *openHandle
	switch x := fh.(type) {
	case *openHandle:
		h = x
		fn.fsys.fence.begin(ctx, fn.n)
	case *ptHandle:
		fn.fsys.releasePassthrough(fn.n, x)
		h = &x.openHandle
	default:
		return 0
	}
	n, t := fn.n, &fn.fsys.t
	t.mu.RLock()
	n.mu.Lock()
	n.opens--
	if h.cached {
		n.cachedOpens--
	}
	lastWriter := false
	if h.write {
		n.writers--
		lastWriter = n.writers == 0
	}
	if len(n.links) == 0 {
		releaseUnreachable(n)
	}
	obj := n.obj
	n.mu.Unlock()
	t.mu.RUnlock()
	if h.atime {
		fn.fsys.relatime(n)
	}
	if e, ok := fn.fsys.be.(expediter); ok && lastWriter {
		e.Expedite(obj) // nothing more is coming: write back now
	}
	if lastWriter {
		fn.fsys.changed(obj)
	}
	return 0
}

// expediter is implemented by backends that hold back the write-back of
// blocks being written (tiering.Store.Expedite).
type expediter interface {
	Expedite(id tiering.ObjectID)
}

// releaseUnreachable gives back the quota and statfs usage of a file that
// has no name and no open descriptor: nothing can read or write it any
// more, so its bytes leave the namespace now, not when the kernel gets
// round to FORGET (which deletes the object). tree.mu held (n.links
// stable) and n.mu held.
func releaseUnreachable(n *node) {
	if n.opens > 0 || n.released {
		return
	}
	n.released = true
	n.ns.AddInodes(-1)
	n.ns.Adjust(-n.reserved)
	n.setReserved(0)
}

// uncount drops a file from its namespace's inode count unless
// releaseUnreachable already did; n.mu held.
func uncount(n *node) {
	if !n.released {
		n.released = true
		n.ns.AddInodes(-1)
	}
}

// Read reads from the object. It is never short except at the end of the
// file.
func (fn *fileNode) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	defer fn.fsys.observe("read", time.Now())
	f, n := fn.fsys, fn.n
	f.pt.reads.Add(1)
	f.ptSawIO(fh)
	n.mu.Lock()
	lost := n.lost
	n.mu.Unlock()
	if lost {
		return nil, syscall.EIO
	}
	got, err := f.be.ReadAt(f.ctx, n.obj, dest, off)
	if err != nil {
		if gone(err) {
			f.onLost(n.obj)
		}
		return nil, errno(err)
	}
	return fuse.ReadResultData(dest[:got]), 0
}

// Write writes to the object after reserving quota for any growth
// (EDQUOT when the namespace quota would be passed).
func (fn *fileNode) Write(ctx context.Context, fh fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	defer fn.fsys.observe("write", time.Now())
	f, n := fn.fsys, fn.n
	f.pt.writes.Add(1)
	f.ptSawIO(fh)
	if off < 0 {
		return 0, syscall.EINVAL
	}
	end := off + int64(len(data))
	uid, _ := caller(ctx)
	n.mu.Lock()
	if n.lost {
		n.mu.Unlock()
		return 0, syscall.EIO
	}
	if uid != 0 {
		killPriv(n)
	}
	if end > n.reserved {
		if !n.ns.Reserve(end - n.reserved) {
			n.mu.Unlock()
			return 0, syscall.EDQUOT
		}
		n.setReserved(end)
	}
	n.inflight++
	if n.truncating > 0 {
		n.resync = true
	}
	n.mu.Unlock()

	wctx, release := f.interruptible(ctx)
	w, err := f.be.WriteAt(wctx, n.obj, data, off)
	release()

	ts := now()
	n.mu.Lock()
	n.inflight--
	if n.truncating > 0 {
		n.resync = true
	}
	if we := off + int64(w); w > 0 && we > n.size {
		n.size = we
	}
	if w > 0 {
		n.mtime, n.ctime = ts, ts
	}
	if err != nil {
		n.resync = true
	}
	if n.resync && n.inflight == 0 {
		f.resyncLocked(n)
	}
	n.mu.Unlock()
	if w > 0 {
		f.j.Touch(n)
	}
	if err != nil {
		if gone(err) {
			f.onLost(n.obj)
		}
		if w == 0 {
			return 0, errno(err)
		}
	}
	return uint32(w), 0
}

// killPriv clears setuid, and setgid on a group-executable file, as a
// write or truncate by an unprivileged caller must (the mount negotiates
// FUSE_HANDLE_KILLPRIV_V2); n.mu held.
func killPriv(n *node) {
	if n.mode&syscall.S_ISUID != 0 || n.mode&(syscall.S_ISGID|syscall.S_IXGRP) == syscall.S_ISGID|syscall.S_IXGRP {
		n.mode &^= syscall.S_ISUID
		if n.mode&syscall.S_IXGRP != 0 {
			n.mode &^= syscall.S_ISGID
		}
		n.ctime = now()
	}
}

// resyncLocked re-reads the object's size from the store and corrects the
// quota accounting; n.mu held, no write or truncate in flight.
func (f *fsys) resyncLocked(n *node) {
	n.resync = false
	info, err := f.be.Stat(n.obj)
	if err != nil {
		if gone(err) {
			f.onLost(n.obj)
		}
		return
	}
	n.ns.Adjust(info.Size - n.reserved)
	n.setReserved(info.Size)
	n.size = info.Size
}

// truncate sets the file size (EDQUOT if growing past the quota).
func (f *fsys) truncate(n *node, size int64) syscall.Errno {
	if size < 0 {
		return syscall.EINVAL
	}
	n.mu.Lock()
	if n.lost {
		n.mu.Unlock()
		return syscall.EIO
	}
	delta := size - n.reserved
	if delta > 0 && !n.ns.Reserve(delta) {
		n.mu.Unlock()
		return syscall.EDQUOT
	}
	if n.inflight > 0 {
		n.resync = true
	}
	n.inflight++
	n.truncating++
	n.mu.Unlock()

	err := f.be.Truncate(f.ctx, n.obj, size)

	ts := now()
	n.mu.Lock()
	n.inflight--
	n.truncating--
	switch {
	case err != nil:
		if delta > 0 {
			n.ns.Adjust(-delta)
		}
		n.resync = true
	case n.resync:
		// Other writes or truncates overlapped this one: keep the
		// reservation and re-read the size once they are done.
		if delta > 0 {
			n.setReserved(n.reserved + delta)
		}
	default:
		if delta < 0 {
			n.ns.Adjust(delta)
		}
		n.setReserved(size)
		n.size = size
	}
	if err == nil {
		n.mtime, n.ctime = ts, ts
	}
	if n.resync && n.inflight == 0 {
		f.resyncLocked(n)
	}
	n.mu.Unlock()
	if err != nil {
		if gone(err) {
			f.onLost(n.obj)
		}
		return errno(err)
	}
	return 0
}

// Flush answers ENOSYS, after which the kernel stops sending FLUSH on
// close(2): writes reach the store synchronously, so close has nothing to
// report (with WritebackCache the kernel writes dirty pages back before
// it checks for FLUSH support and reports their errors itself).
func (fn *fileNode) Flush(ctx context.Context, fh fs.FileHandle) syscall.Errno {
	defer fn.fsys.observe("flush", time.Now())
	return syscall.ENOSYS
}

// Fsync (and fdatasync) writes the object's dirty blocks below G2
// (Backend.Flush) and then commits and fdatasyncs the tree database, so the
// file survives kill -9 and power loss under its current name.
func (fn *fileNode) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	defer fn.fsys.observe("fsync", time.Now())
	f := fn.fsys
	fctx, release := f.interruptible(ctx)
	err := f.be.Flush(fctx, fn.n.obj)
	release()
	if err != nil {
		return errno(err)
	}
	f.ptFresh(fn.n) // passthrough writes were taken in: the size may have grown
	if err := f.j.Sync(); err != nil {
		return syscall.EIO
	}
	return 0
}

// Allocate implements fallocate mode 0: the size is extended and the new
// bytes are charged to the namespace (quota and statfs used) at once, as
// a write of zeros would be; ENOSPC when statfs shows less room than the
// extension needs (roomFor), EDQUOT past the namespace's quota, and
// nothing changes then. Blocks are not written (the range reads as a
// hole). Every other mode is EOPNOTSUPP.
func (fn *fileNode) Allocate(ctx context.Context, fh fs.FileHandle, off uint64, size uint64, mode uint32) syscall.Errno {
	if mode != 0 {
		return syscall.EOPNOTSUPP
	}
	n := fn.n
	end := int64(off + size)
	if end < 0 || off+size < off {
		return syscall.EFBIG
	}
	n.mu.Lock()
	cur := n.size
	n.mu.Unlock()
	if end <= cur {
		return 0
	}
	if !fn.fsys.roomFor(n, allocBytes(end)-allocBytes(cur)) {
		return syscall.ENOSPC
	}
	if e := fn.fsys.truncate(n, end); e != 0 {
		return e
	}
	fn.fsys.j.Touch(n)
	return 0
}

// Getattr reports the file's attributes.
func (fn *fileNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	defer fn.fsys.observe("getattr", time.Now())
	fn.fsys.er.used(fn.n)
	fn.fsys.attrOut(fn.n, out)
	return 0
}

// Setattr truncates and changes mode, owner and times.
func (fn *fileNode) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	defer fn.fsys.observe("setattr", time.Now())
	return fn.fsys.setattr(fn.n, in, out)
}

// Statfs reports the namespace's usage (see fsys.statfs).
func (fn *fileNode) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	fn.fsys.statfs(fn.n, out)
	return 0
}

// OnForget runs when the kernel drops its last reference to this inode
// (FORGET; go-fuse drops its Inode): the entry reclaim counts it
// (forget.go), and a file with no name left (unlinked, renamed over,
// O_TMPFILE) has then been closed for the last time: its object is
// deleted.
func (fn *fileNode) OnForget() {
	fn.fsys.er.forgot(fn.n)
	fn.fsys.forget(fn.n)
}

func (f *fsys) forget(n *node) {
	t := &f.t
	t.mu.Lock()
	if _, ok := t.orphans[n]; !ok || len(n.links) > 0 {
		t.mu.Unlock()
		return
	}
	delete(t.orphans, n)
	delete(t.byObj, n.obj)
	n.gone = true
	n.mu.Lock()
	uncount(n)
	n.mu.Unlock()
	t.mu.Unlock()
	f.deleteObject(n)
}

// deleteObject releases a file's quota and deletes its object.
func (f *fsys) deleteObject(n *node) {
	n.mu.Lock()
	res, lost := n.reserved, n.lost
	n.setReserved(0)
	n.mu.Unlock()
	n.ns.Adjust(-res)
	if lost {
		return
	}
	if err := f.be.Delete(f.ctx, n.obj); err != nil {
		f.log.Warn("fusefs: delete object", "object", n.obj, "err", err)
	}
}

// Getxattr reads user.ctxmem.* (from the store) or a stored user.*
// attribute (see xattr.go).
func (fn *fileNode) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	return fn.fsys.getxattr(fn.n, attr, dest)
}

// Setxattr pins, prestages or stores a user.* attribute.
func (fn *fileNode) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	return fn.fsys.setxattr(fn.n, attr, data, flags)
}

// Removexattr removes a stored user.* attribute (user.ctxmem.*: EPERM).
func (fn *fileNode) Removexattr(ctx context.Context, attr string) syscall.Errno {
	return fn.fsys.removexattr(fn.n, attr)
}

// Listxattr lists user.ctxmem.* and the stored attributes.
func (fn *fileNode) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	return fn.fsys.listxattr(fn.n, dest)
}

// symlinkNode is the go-fuse node of a symbolic link.
type symlinkNode struct {
	fs.Inode
	fsys *fsys
	n    *node
}

var (
	_ fs.NodeReadlinker = (*symlinkNode)(nil)
	_ fs.NodeGetattrer  = (*symlinkNode)(nil)
	_ fs.NodeSetattrer  = (*symlinkNode)(nil)
	_ fs.NodeStatfser   = (*symlinkNode)(nil)
)

// Statfs reports the namespace's usage (see fsys.statfs).
func (s *symlinkNode) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	s.fsys.statfs(s.n, out)
	return 0
}

// Readlink returns the link target.
func (s *symlinkNode) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	return []byte(s.n.target), 0
}

// Getattr reports the link's attributes.
func (s *symlinkNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	s.fsys.attrOut(s.n, out)
	return 0
}

// Setattr changes the link's owner or times (lchown, lutimes).
func (s *symlinkNode) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return s.fsys.setattr(s.n, in, out)
}
