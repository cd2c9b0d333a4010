package fusefs

import (
	"context"
	"errors"
	"log/slog"
	"syscall"

	"github.com/ctxmem/ctxmemd/tiering"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// fsys is the state shared by every node of one mount.
type fsys struct {
	be   Backend
	opts Options
	log  *slog.Logger
	// ctx is passed to Backend calls instead of the request context: FUSE
	// interrupts are not honoured (see the package doc). It is cancelled
	// when the mount shuts down.
	ctx   context.Context
	t     tree
	j     *journal
	nss   []*namespace
	notes *notifier
}

// opsFor returns a fresh go-fuse node for n.
func (f *fsys) opsFor(n *node) fs.InodeEmbedder {
	switch n.kind {
	case kindDir:
		return &dirNode{fsys: f, n: n}
	case kindSymlink:
		return &symlinkNode{fsys: f, n: n}
	}
	return &fileNode{fsys: f, n: n}
}

// inode returns the kernel-facing Inode of n (go-fuse deduplicates by
// inode number) and fills out with n's attributes and cache timeouts.
func (f *fsys) inode(ctx context.Context, parent *fs.Inode, n *node, out *fuse.EntryOut) *fs.Inode {
	n.fillAttr(&out.Attr)
	f.setTimeouts(out)
	return parent.NewInode(ctx, f.opsFor(n), fs.StableAttr{Mode: n.typeBits(), Ino: n.ino})
}

func (f *fsys) setTimeouts(out *fuse.EntryOut) {
	out.SetEntryTimeout(f.opts.EntryTimeout)
	out.SetAttrTimeout(f.opts.AttrTimeout)
}

func (f *fsys) attrOut(n *node, out *fuse.AttrOut) {
	n.fillAttr(&out.Attr)
	out.SetTimeout(f.opts.AttrTimeout)
}

// logged maps the result of journal.apply to an errno: EIO when the
// change could not be made durable (it is still in effect in memory).
func logged(err error) syscall.Errno {
	if err != nil {
		return syscall.EIO
	}
	return 0
}

// caller returns the uid and gid of the process making the request.
func caller(ctx context.Context) (uid, gid uint32) {
	if c, ok := fuse.FromContext(ctx); ok {
		return c.Uid, c.Gid
	}
	return 0, 0
}

// errno maps a Backend error to the errno a file operation returns; a
// vanished object is EIO (the file is being removed), not ENOENT.
func errno(err error) syscall.Errno {
	if errors.Is(err, tiering.ErrNotExist) || errors.Is(err, tiering.ErrLost) {
		return syscall.EIO
	}
	return tiering.Errno(err)
}

// gone reports whether err says the object no longer exists.
func gone(err error) bool {
	return errors.Is(err, tiering.ErrNotExist) || errors.Is(err, tiering.ErrLost)
}

// statfs fills out for n: f_bsize = f_frsize = 4096; capacity from the
// store, further limited by n's namespace quota when it has one.
func (f *fsys) statfs(n *node, out *fuse.StatfsOut) {
	total, free := f.be.Capacity()
	if ns := n.ns; ns != nil && ns.cfg.QuotaBytes > 0 {
		total = min(total, ns.cfg.QuotaBytes)
		free = min(free, max(0, ns.cfg.QuotaBytes-ns.used.Load()))
	}
	total, free = max(total, 0), max(min(free, total), 0)
	out.Bsize = BlockSizeStatfs
	out.Frsize = BlockSizeStatfs
	out.Blocks = uint64(total) / BlockSizeStatfs
	out.Bfree = uint64(free) / BlockSizeStatfs
	out.Bavail = out.Bfree
	out.Files = 1 << 32
	out.Ffree = 1<<32 - 1
	out.NameLen = maxNameLen
}

// touchTimes sets mtime and ctime of n to ts.
func touchTimes(n *node, ts int64) {
	n.mu.Lock()
	n.mtime, n.ctime = ts, ts
	n.mu.Unlock()
}
