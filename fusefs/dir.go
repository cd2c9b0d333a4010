package fusefs

import (
	"context"
	"syscall"
	"time"

	"github.com/ctxmem/ctxmemd/catalog"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// dirNode is the go-fuse node of a directory: the mount root, a namespace
// or a directory inside one. The root is read-only: every change in it is
// EPERM (non-root callers get EACCES from the kernel first).
type dirNode struct {
	fs.Inode
	fsys *fsys
	n    *node
}

var (
	_ fs.NodeLookuper       = (*dirNode)(nil)
	_ fs.NodeGetattrer      = (*dirNode)(nil)
	_ fs.NodeSetattrer      = (*dirNode)(nil)
	_ fs.NodeCreater        = (*dirNode)(nil)
	_ fs.NodeMknoder        = (*dirNode)(nil)
	_ fs.NodeMkdirer        = (*dirNode)(nil)
	_ fs.NodeSymlinker      = (*dirNode)(nil)
	_ fs.NodeLinker         = (*dirNode)(nil)
	_ fs.NodeTmpfiler       = (*dirNode)(nil)
	_ fs.NodeUnlinker       = (*dirNode)(nil)
	_ fs.NodeRmdirer        = (*dirNode)(nil)
	_ fs.NodeRenamer        = (*dirNode)(nil)
	_ fs.NodeOpendirHandler = (*dirNode)(nil)
	_ fs.NodeStatfser       = (*dirNode)(nil)
	_ fs.NodeFsyncer        = (*dirNode)(nil)
	_ fs.NodeGetxattrer     = (*dirNode)(nil)
	_ fs.NodeSetxattrer     = (*dirNode)(nil)
	_ fs.NodeRemovexattrer  = (*dirNode)(nil)
	_ fs.NodeListxattrer    = (*dirNode)(nil)
)

// Lookup resolves a child name.
func (d *dirNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	defer d.fsys.observe("lookup", time.Now())
	t := &d.fsys.t
	t.mu.RLock()
	c := d.n.dir.Get(name)
	t.mu.RUnlock()
	if c == nil && d.n.ns != nil && d.fsys.opts.Remote != nil {
		var e syscall.Errno
		if c, e = d.lookupRemote(name, out); e != 0 { // shared by another host?
			return nil, e
		}
	}
	if c == nil {
		if d.n.ns != nil {
			// A KV lookup miss (lookups.go). The kernel must not cache
			// it: every lookup of a missing name is then counted, and
			// the kernel's lookup before creating a name always comes,
			// so each creation's probe has its ENOENT to cancel.
			d.fsys.lookupMiss(d.n.ns)
			d.fsys.curveMiss(d.n, name)
			uncachedENOENT(out)
		}
		// At the root, go-fuse turns ENOENT into a cached negative
		// entry (fs.Options.NegativeTimeout).
		return nil, syscall.ENOENT
	}
	return d.fsys.inode(ctx, &d.Inode, c, out), 0
}

// Getattr reports the directory's attributes.
func (d *dirNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	defer d.fsys.observe("getattr", time.Now())
	d.fsys.attrOut(d.n, out)
	return 0
}

// Setattr changes mode, owner or times.
func (d *dirNode) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	defer d.fsys.observe("setattr", time.Now())
	return d.fsys.setattr(d.n, in, out)
}

// Statfs reports the namespace's usage (see fsys.statfs).
func (d *dirNode) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	d.fsys.statfs(d.n, out)
	return 0
}

// Fsync (fsyncdir) makes the whole tree durable in the tree database.
func (d *dirNode) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	defer d.fsys.observe("fsync", time.Now())
	if err := d.fsys.j.Sync(); err != nil {
		return syscall.EIO
	}
	return 0
}

// writable checks that entries can be added to or removed from d.
func (d *dirNode) writable() syscall.Errno {
	if d.n.ns == nil {
		return syscall.EPERM
	}
	return 0
}

// checkNew validates a new name in d; tree.mu held.
func (d *dirNode) checkNew(name string) syscall.Errno {
	if len(name) > maxNameLen {
		return syscall.ENAMETOOLONG
	}
	if d.n.gone {
		return syscall.ENOENT
	}
	if d.n.dir.Get(name) != nil {
		return syscall.EEXIST
	}
	return 0
}

// newNode makes a node of kind k owned by the caller, inheriting the group
// of a setgid directory.
func (d *dirNode) newNode(ctx context.Context, k nodeKind, mode uint32) *node {
	uid, gid := caller(ctx)
	ts := now()
	d.n.mu.Lock()
	if d.n.mode&syscall.S_ISGID != 0 {
		gid = d.n.gid
		if k == kindDir {
			mode |= syscall.S_ISGID
		}
	}
	d.n.mu.Unlock()
	n := &node{kind: k, ns: d.n.ns, mode: mode & 0o7777, uid: uid, gid: gid, atime: ts, mtime: ts, ctime: ts}
	if k == kindDir {
		n.dir = newDirData()
	}
	return n
}

// insert links the new node n under name and logs the change; tree.mu is
// taken here. A non-nil error means the change is made but could not be
// logged.
func (d *dirNode) insert(name string, n *node) (syscall.Errno, error) {
	t := &d.fsys.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := d.checkNew(name); e != 0 {
		return e, nil
	}
	n.ino = t.allocIno()
	n.ns.AddInodes(1)
	if n.kind == kindFile {
		t.byObj[n.obj] = n
	}
	d.n.dir.Add(name, n)
	n.links = []link{{d.n, name}}
	n.updateNlink()
	d.n.updateNlink()
	n.mu.Lock()
	ts := n.ctime
	n.mu.Unlock()
	touchTimes(d.n, ts)
	d.fsys.j.Touch(d.n)
	return 0, d.fsys.j.Apply(catalog.PutNode(n), catalog.PutDirent(d.n.ino, name, n.ino))
}

// newFile creates a regular file called name (a nameless O_TMPFILE file
// when name is "").
func (d *dirNode) newFile(ctx context.Context, name string, mode uint32) (*node, syscall.Errno) {
	if e := d.writable(); e != 0 {
		return nil, e
	}
	f := d.fsys
	if name != "" {
		f.t.mu.RLock()
		e := d.checkNew(name)
		f.t.mu.RUnlock()
		if e != 0 {
			return nil, e
		}
	}
	ns := d.n.ns
	id, err := f.be.Create(ns.cfg.Name, ns.cfg.BlockSize, ObjectKind)
	if err != nil {
		return nil, errno(err)
	}
	n := d.newNode(ctx, kindFile, mode)
	n.obj = id
	if name == "" {
		f.t.mu.Lock()
		n.ino = f.t.allocIno()
		ns.AddInodes(1)
		f.t.byObj[id] = n
		f.t.orphans[n] = struct{}{}
		n.updateNlink()
		f.t.mu.Unlock()
		return n, 0
	}
	e, err := d.insert(name, n)
	if e != 0 {
		if err := f.be.Delete(f.ctx, id); err != nil {
			f.log.Warn("fusefs: delete unused object", "object", id, "err", err)
		}
		return nil, e
	}
	return n, logged(err)
}

// Create makes and opens a regular file (open(O_CREAT) of a missing name).
func (d *dirNode) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	defer d.fsys.observe("create", time.Now())
	d.fsys.createProbe(d.n.ns)
	d.fsys.curveProbe(d.n, name)
	n, e := d.newFile(ctx, name, mode)
	if e != 0 {
		return nil, nil, 0, e
	}
	h, fl, e := d.fsys.open(ctx, n, flags)
	if e != 0 {
		return nil, nil, 0, e
	}
	return d.fsys.inode(ctx, &d.Inode, n, out), h, fl, 0
}

// Tmpfile makes an open regular file with no name (O_TMPFILE). Its object
// is deleted at the last close unless linkat gives it a name.
func (d *dirNode) Tmpfile(ctx context.Context, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	n, e := d.newFile(ctx, "", mode)
	if e != 0 {
		return nil, nil, 0, e
	}
	h, fl, e := d.fsys.open(ctx, n, flags)
	if e != 0 {
		return nil, nil, 0, e
	}
	return d.fsys.inode(ctx, &d.Inode, n, out), h, fl, 0
}

// Mknod makes regular files only; other node types are EPERM.
func (d *dirNode) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	d.fsys.createProbe(d.n.ns)
	d.fsys.curveProbe(d.n, name)
	if mode&syscall.S_IFMT != syscall.S_IFREG && mode&syscall.S_IFMT != 0 {
		return nil, syscall.EPERM
	}
	n, e := d.newFile(ctx, name, mode)
	if e != 0 {
		return nil, e
	}
	return d.fsys.inode(ctx, &d.Inode, n, out), 0
}

// Mkdir makes a directory.
func (d *dirNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	defer d.fsys.observe("mkdir", time.Now())
	d.fsys.createProbe(d.n.ns)
	d.fsys.curveProbe(d.n, name)
	if e := d.writable(); e != 0 {
		return nil, e
	}
	n := d.newNode(ctx, kindDir, mode)
	e, err := d.insert(name, n)
	if e != 0 {
		return nil, e
	}
	if e := logged(err); e != 0 {
		return nil, e
	}
	return d.fsys.inode(ctx, &d.Inode, n, out), 0
}

// Symlink makes a symbolic link.
func (d *dirNode) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	d.fsys.createProbe(d.n.ns)
	d.fsys.curveProbe(d.n, name)
	if e := d.writable(); e != 0 {
		return nil, e
	}
	n := d.newNode(ctx, kindSymlink, 0o777)
	n.target = target
	e, err := d.insert(name, n)
	if e != 0 {
		return nil, e
	}
	if e := logged(err); e != 0 {
		return nil, e
	}
	return d.fsys.inode(ctx, &d.Inode, n, out), 0
}

// Link adds a name to a file or symlink of the same namespace (EXDEV
// across namespaces); it also names an O_TMPFILE file.
func (d *dirNode) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	d.fsys.createProbe(d.n.ns)
	d.fsys.curveProbe(d.n, name)
	if e := d.writable(); e != 0 {
		return nil, e
	}
	var n *node
	switch tn := target.(type) {
	case *fileNode:
		n = tn.n
	case *symlinkNode:
		n = tn.n
	default:
		return nil, syscall.EPERM
	}
	if n.ns != d.n.ns {
		return nil, syscall.EXDEV
	}
	f := d.fsys
	t := &f.t
	t.mu.Lock()
	if e := d.checkNew(name); e != 0 {
		t.mu.Unlock()
		return nil, e
	}
	if n.gone {
		t.mu.Unlock()
		return nil, syscall.ENOENT
	}
	delete(t.orphans, n)
	d.n.dir.Add(name, n)
	n.links = append(n.links, link{d.n, name})
	n.updateNlink()
	ts := now()
	touchTimes(d.n, ts)
	n.mu.Lock()
	n.ctime = ts
	n.mu.Unlock()
	f.j.Touch(d.n)
	err := f.j.Apply(catalog.PutNode(n), catalog.PutDirent(d.n.ino, name, n.ino))
	t.mu.Unlock()
	if n.kind == kindFile {
		f.changed(n.obj)
	}
	if e := logged(err); e != 0 {
		return nil, e
	}
	return f.inode(ctx, &d.Inode, n, out), 0
}

// dropName queues the removal of the last or another name of n after it
// lost one; tree.mu held. Files without names become orphans, deleted at
// FORGET (last close); symlinks and directories go at once.
func (f *fsys) dropName(n *node, ts int64, ops []catalog.Op) []catalog.Op {
	n.mu.Lock()
	n.ctime = ts
	n.mu.Unlock()
	if len(n.links) > 0 {
		f.j.Touch(n)
		return ops
	}
	if n.kind == kindFile {
		f.t.orphans[n] = struct{}{}
		n.mu.Lock()
		releaseUnreachable(n)
		n.mu.Unlock()
	} else {
		n.gone = true
		n.ns.AddInodes(-1)
		n.updateNlink()
	}
	return append(ops, catalog.DelNode(n.ino))
}

// Unlink removes a name of a file or symlink. The file's object is deleted
// when the kernel forgets the inode, i.e. after the last close.
func (d *dirNode) Unlink(ctx context.Context, name string) syscall.Errno {
	defer d.fsys.observe("unlink", time.Now())
	if e := d.writable(); e != 0 {
		return e
	}
	f := d.fsys
	t := &f.t
	t.mu.Lock()
	c := d.n.dir.Get(name)
	if c == nil {
		t.mu.Unlock()
		return syscall.ENOENT
	}
	if c.kind == kindDir {
		t.mu.Unlock()
		return syscall.EISDIR
	}
	d.n.dir.Remove(name)
	c.removeLink(d.n, name)
	ts := now()
	touchTimes(d.n, ts)
	f.j.Touch(d.n)
	ops := f.dropName(c, ts, []catalog.Op{catalog.DelDirent(d.n.ino, name)})
	err := f.j.Apply(ops...)
	t.mu.Unlock()
	if c.kind == kindFile {
		f.changed(c.obj)
	}
	return logged(err)
}

// Rmdir removes an empty directory (ENOTEMPTY otherwise).
func (d *dirNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	if e := d.writable(); e != 0 {
		return e
	}
	f := d.fsys
	t := &f.t
	t.mu.Lock()
	c := d.n.dir.Get(name)
	var e syscall.Errno
	switch {
	case c == nil:
		e = syscall.ENOENT
	case c.kind != kindDir:
		e = syscall.ENOTDIR
	case c.dir.Len() > 0:
		e = syscall.ENOTEMPTY
	}
	if e != 0 {
		t.mu.Unlock()
		return e
	}
	d.n.dir.Remove(name)
	c.removeLink(d.n, name)
	c.gone = true
	c.ns.AddInodes(-1)
	c.updateNlink()
	d.n.updateNlink()
	ts := now()
	touchTimes(d.n, ts)
	f.j.Touch(d.n)
	err := f.j.Apply(catalog.DelDirent(d.n.ino, name), catalog.DelNode(c.ino))
	t.mu.Unlock()
	return logged(err)
}

// Rename moves a name, atomically replacing an existing target (whose file
// is deleted at its last close). RENAME_NOREPLACE and RENAME_EXCHANGE are
// supported; renames across namespaces are EXDEV, renames of or into the
// root EPERM.
func (d *dirNode) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	defer d.fsys.observe("rename", time.Now())
	np, ok := newParent.(*dirNode)
	if !ok {
		return syscall.EINVAL
	}
	if flags&^uint32(renameNoReplace|renameExchange) != 0 ||
		flags == renameNoReplace|renameExchange {
		return syscall.EINVAL
	}
	if d.writable() != 0 || np.writable() != 0 {
		return syscall.EPERM
	}
	if d.n.ns != np.n.ns {
		return syscall.EXDEV
	}
	if len(newName) > maxNameLen {
		return syscall.ENAMETOOLONG
	}
	f := d.fsys
	t := &f.t
	t.mu.Lock()
	src, dst := d.n.dir.Get(name), np.n.dir.Get(newName) // for OnChange
	ops, e := d.renameLocked(name, np.n, newName, flags)
	var err error
	if e == 0 && len(ops) > 0 {
		err = f.j.Apply(ops...)
	}
	t.mu.Unlock()
	if e != 0 {
		return e
	}
	for _, c := range []*node{src, dst} {
		if c != nil && c.kind == kindFile {
			f.changed(c.obj)
		}
	}
	return logged(err)
}

// renameLocked does Rename's tree change and returns the database ops;
// tree.mu held.
func (d *dirNode) renameLocked(name string, nd *node, newName string, flags uint32) ([]catalog.Op, syscall.Errno) {
	f := d.fsys
	sp := d.n
	src := sp.dir.Get(name)
	if src == nil || nd.gone {
		return nil, syscall.ENOENT
	}
	dst := nd.dir.Get(newName)
	if dst == nil {
		f.createProbe(nd.ns) // the kernel looked newName up first
		f.curveProbe(nd, newName)
	}
	ts := now()
	var ops []catalog.Op

	if flags&renameExchange != 0 {
		if dst == nil {
			return nil, syscall.ENOENT
		}
		if src == dst {
			return nil, 0
		}
		if (src.kind == kindDir && isAncestor(src, nd)) || (dst.kind == kindDir && isAncestor(dst, sp)) {
			return nil, syscall.EINVAL
		}
		sp.dir.Replace(name, dst)
		nd.dir.Replace(newName, src)
		src.removeLink(sp, name)
		dst.removeLink(nd, newName)
		src.links = append(src.links, link{nd, newName})
		dst.links = append(dst.links, link{sp, name})
		for _, x := range []*node{src, dst, sp, nd} {
			x.updateNlink()
		}
		for _, x := range []*node{src, dst} {
			x.mu.Lock()
			x.ctime = ts
			x.mu.Unlock()
		}
		touchTimes(sp, ts)
		touchTimes(nd, ts)
		f.j.Touch(sp)
		f.j.Touch(nd)
		ops = append(ops, catalog.PutDirent(sp.ino, name, dst.ino), catalog.PutDirent(nd.ino, newName, src.ino))
		return ops, 0
	}

	if dst != nil && flags&renameNoReplace != 0 {
		return nil, syscall.EEXIST
	}
	if dst == src {
		return nil, 0
	}
	if src.kind == kindDir {
		if isAncestor(src, nd) {
			return nil, syscall.EINVAL
		}
		if dst != nil && dst.kind != kindDir {
			return nil, syscall.ENOTDIR
		}
		if dst != nil && dst.dir.Len() > 0 {
			return nil, syscall.ENOTEMPTY
		}
	} else if dst != nil && dst.kind == kindDir {
		return nil, syscall.EISDIR
	}

	sp.dir.Remove(name)
	src.removeLink(sp, name)
	ops = append(ops, catalog.DelDirent(sp.ino, name))
	if dst != nil {
		nd.dir.Replace(newName, src)
		dst.removeLink(nd, newName)
		ops = f.dropName(dst, ts, ops)
	} else {
		nd.dir.Add(newName, src)
	}
	src.links = append(src.links, link{nd, newName})
	for _, x := range []*node{src, sp, nd} {
		x.updateNlink()
	}
	src.mu.Lock()
	src.ctime = ts
	src.mu.Unlock()
	touchTimes(sp, ts)
	touchTimes(nd, ts)
	f.j.Touch(src)
	f.j.Touch(sp)
	f.j.Touch(nd)
	ops = append(ops, catalog.PutDirent(nd.ino, newName, src.ino))
	return ops, 0
}

// OpendirHandle opens a directory stream.
func (d *dirNode) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return &dirHandle{d: d}, 0, 0
}

// Getxattr reads a stored user.* attribute (see xattr.go).
func (d *dirNode) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	return d.fsys.getxattr(d.n, attr, dest)
}

// Setxattr stores a user.* attribute.
func (d *dirNode) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	return d.fsys.setxattr(d.n, attr, data, flags)
}

// Removexattr removes a user.* attribute.
func (d *dirNode) Removexattr(ctx context.Context, attr string) syscall.Errno {
	return d.fsys.removexattr(d.n, attr)
}

// Listxattr lists the stored attributes.
func (d *dirNode) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	return d.fsys.listxattr(d.n, dest)
}

// renameat2(2) flags.
const (
	renameNoReplace = 1 // RENAME_NOREPLACE
	renameExchange  = 2 // RENAME_EXCHANGE
)
