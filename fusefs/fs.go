package fusefs

import (
	"context"
	"errors"
	"log/slog"
	"syscall"

	"github.com/ctxmem/ctxmemd/catalog"
	"github.com/ctxmem/ctxmemd/tiering"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// fsys is the state shared by every node of one mount.
type fsys struct {
	be   Backend
	opts Options
	log  *slog.Logger
	// lk counts KV lookups in every namespace (lookups.go).
	lk lookupCounts
	// ctx is passed to Backend calls instead of the request context: FUSE
	// interrupts are not honoured (see the package doc). It is cancelled
	// when the mount shuts down.
	ctx   context.Context
	t     tree
	j     *catalog.Journal
	nss   []*namespace
	notes *notifier
	pt    ptState // FUSE passthrough (passthrough.go)
	// fence guards passthrough opens against go-fuse's release of a
	// backing id (passthrough.go); nil until mounted.
	fence *releaseFence
	// er bounds the files the kernel keeps looked up (forget.go).
	er *entryReclaim
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
	f.ptFresh(n)
	n.fillAttr(&out.Attr)
	f.setTimeouts(out)
	in := parent.NewInode(ctx, f.opsFor(n), fs.StableAttr{Mode: n.typeBits(), Ino: n.ino})
	if n.kind == kindFile {
		f.er.looked(n)
	}
	return in
}

func (f *fsys) setTimeouts(out *fuse.EntryOut) {
	out.SetEntryTimeout(f.opts.EntryTimeout)
	out.SetAttrTimeout(f.opts.AttrTimeout)
}

func (f *fsys) attrOut(n *node, out *fuse.AttrOut) {
	f.ptFresh(n)
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

// statfsFiles is f_files: inodes are not a limited resource, so statfs
// reports a fixed 2^32 of which the namespace's live inodes are used.
const statfsFiles = 1 << 32

// statfs answers statfs(2) for a path under n (issue 11 item 6). Engines
// drive their eviction from it, so it follows what the namespace holds,
// not what the tiers hold:
//
//   - used (f_blocks - f_bfree) is the namespace's bytes: the sum of its
//     files' sizes, each rounded up to f_bsize (4096), open-but-unlinked
//     files included until their last close. It moves when write(2),
//     truncate or the last close of an unlinked file returns, never when
//     blocks move between tiers (a block that sinks to G4 is still the
//     namespace's). Holes count as written (see README: fallocate mode 0
//     and ftruncate are not told apart, and a per-page map of every file
//     is not worth its memory).
//   - total (f_blocks) is the namespace's quota when it has one; else
//     Options.StatfsCapacity when set; else the store's capacity (G2 +
//     G3; an unbounded G4 adds nothing, so a namespace without a quota is
//     sized to the fast tiers unless the operator says otherwise).
//   - free (f_bfree = f_bavail) is total - used, never negative.
//
// Each namespace answers for itself; the mount root answers for all of
// them (used summed, total the capacity, or the sum of the quotas when
// every namespace has one and no capacity is set).
func (f *fsys) statfs(n *node, out *fuse.StatfsOut) {
	var used, inodes, total int64
	capacity := f.opts.StatfsCapacity
	if capacity <= 0 {
		capacity, _ = f.be.Capacity()
	}
	if ns := n.ns; ns != nil {
		used, inodes = ns.Alloc(), ns.Inodes()
		total = capacity
		if ns.cfg.QuotaBytes > 0 {
			total = ns.cfg.QuotaBytes
		}
	} else {
		quotas, all := int64(0), true
		f.t.mu.RLock() // f.nss grows under t.mu (AddNamespace)
		defer f.t.mu.RUnlock()
		for _, ns := range f.nss {
			used += ns.Alloc()
			inodes += ns.Inodes()
			quotas += ns.cfg.QuotaBytes
			all = all && ns.cfg.QuotaBytes > 0
		}
		inodes++ // the root itself
		total = capacity
		if all && len(f.nss) > 0 && f.opts.StatfsCapacity <= 0 {
			total = quotas
		}
	}
	total = max(total, 0) / BlockSizeStatfs
	used = (max(used, 0) + BlockSizeStatfs - 1) / BlockSizeStatfs
	out.Bsize = BlockSizeStatfs
	out.Frsize = BlockSizeStatfs
	out.Blocks = uint64(total)
	out.Bfree = uint64(max(total-used, 0))
	out.Bavail = out.Bfree
	out.Files = statfsFiles
	out.Ffree = uint64(statfsFiles - min(max(inodes, 0), statfsFiles))
	out.NameLen = maxNameLen
}

// roomFor reports whether statfs shows at least delta bytes free both in
// n's namespace (unless its quota decides, with EDQUOT) and on the whole
// mount: what fallocate mode 0 promises
// (a preallocated file's later writes find room) is then true of the
// space the mount reports, whether a quota or the tiers' capacity bounds
// it. Concurrent writers can still take the room before the file's own
// writes land; a store with an unbounded G4 under it takes them anyway.
func (f *fsys) roomFor(n *node, delta int64) bool {
	if delta <= 0 || (n.ns != nil && n.ns.cfg.QuotaBytes > 0) {
		return true // a quota bounds the namespace: truncate answers EDQUOT
	}
	for _, at := range []*node{n, f.t.root} {
		var out fuse.StatfsOut
		f.statfs(at, &out)
		if out.Blocks > 0 && int64(out.Bfree)*int64(out.Bsize) < delta {
			return false
		}
	}
	return true
}

// touchTimes sets mtime and ctime of n to ts.
func touchTimes(n *node, ts int64) {
	n.mu.Lock()
	n.mtime, n.ctime = ts, ts
	n.mu.Unlock()
}
