package fusefs

import (
	"syscall"

	"github.com/ctxmem/ctxmemd/catalog"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// setattr applies SETATTR to n: size (files: truncate), mode, owner, atime
// and mtime, each only when present (utimensat with only atime leaves
// mtime alone). Permission checks are the kernel's (default_permissions).
// Mode and owner changes are logged (durable on return); size and time
// changes are committed within Options.CommitInterval.
// The root is read-only (EPERM); a namespace directory takes its mode and
// owner from the configuration (EPERM), only its times change.
func (f *fsys) setattr(n *node, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if n.ino == rootIno {
		return syscall.EPERM
	}
	mode, hasMode := in.GetMode()
	uid, hasUID := in.GetUID()
	gid, hasGID := in.GetGID()
	if n.ns.root == n && (hasMode || hasUID || hasGID) {
		return syscall.EPERM
	}
	if size, ok := in.GetSize(); ok {
		switch n.kind {
		case kindDir:
			return syscall.EISDIR
		case kindSymlink:
			return syscall.EINVAL
		}
		if e := f.truncate(n, int64(size)); e != 0 {
			return e
		}
	}
	ts := now()
	n.mu.Lock()
	if hasMode {
		n.mode = mode & 0o7777
	}
	if hasUID {
		n.uid = uid
	}
	if hasGID {
		n.gid = gid
	}
	if a, ok := in.GetATime(); ok {
		n.atime = a.UnixNano()
	}
	if m, ok := in.GetMTime(); ok {
		n.mtime = m.UnixNano()
	}
	if in.Valid&fuse.FATTR_KILL_SUIDGID != 0 && n.kind == kindFile {
		killPriv(n)
	}
	n.ctime = ts
	n.mu.Unlock()
	f.attrOut(n, out)
	if !hasMode && !hasUID && !hasGID {
		// Only the size (kept by the store) or times changed: they are
		// committed lazily, so an evictor's utimensat on every cache hit
		// costs no log write.
		f.j.Touch(n)
		return 0
	}
	return logged(f.j.Apply(catalog.PutNode(n)))
}
