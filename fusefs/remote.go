package fusefs

import (
	"context"
	"errors"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/ctxmem/ctxmemd/tiering"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Remote resolves names a namespace does not hold locally (DESIGN.md
// "Fabric (G3.5)": a file another host shared through the cross-host
// pool). Options.Remote; every method is safe for concurrent use.
type Remote interface {
	// Import makes the shared file path ("dir/name", relative to the
	// namespace directory) of namespace ns available locally: it creates
	// the object in the backend and returns its id and size (bytes).
	// ok=false (nil error) when no host shares that name. Called without
	// fusefs locks held; may take milliseconds. ctx is cancelled when the
	// mount shuts down.
	//
	// The object must be of kind ObjectKind (or the lookup fails with EIO
	// and the object is left alone), in namespace ns, with the namespace's
	// block size, and new: fusefs owns it from then on (it deletes it when
	// the file is removed, or at once if it cannot link it). With a non-nil
	// error no object is left behind.
	Import(ctx context.Context, ns, path string) (id tiering.ObjectID, size int64, ok bool, err error)
	// HasDir reports whether some shared file lives under ns/path/.
	HasDir(ns, path string) bool
	// Missed reports a lookup of ns/path that found nothing locally nor
	// shared (so the control plane can ask the holder to share it). Must
	// not block.
	Missed(ns, path string)
}

// lookupRemote is Lookup's fallback for a name absent from d, a directory
// inside a namespace, when Options.Remote is set. In order:
//
//  1. Remote.HasDir(ns, path): a directory is made under name, as Mkdir
//     would (logged; owner and mode those of the namespace directory, the
//     group and setgid bit inherited from a setgid parent).
//  2. Remote.Import ok: a regular file (mode 0644, owner that of the
//     namespace directory, group inherited from a setgid parent) is linked
//     under name for the returned object, logged as Create logs a file.
//     Its size is reserved against the namespace quota: EDQUOT, as a write
//     would get, when it does not fit.
//  3. Otherwise Remote.Missed and ENOENT, answered so that the kernel
//     keeps no negative dentry (see uncachedENOENT): a name shared later
//     is found by the next lookup.
//
// A lookup or create that linked name first (a race) wins: its entry is
// returned and the imported object is deleted. After Import, every failure
// deletes the object unless a file of the tree references it. Errors:
// ENOENT; EDQUOT; EIO when Import fails, its object is unusable, or the
// change could not be logged (it is then in effect in memory, as for
// Mkdir and Create).
func (d *dirNode) lookupRemote(name string, out *fuse.EntryOut) (*node, syscall.Errno) {
	f := d.fsys
	r := f.opts.Remote
	if len(name) > maxNameLen {
		return nil, syscall.ENOENT
	}
	path, ok := f.nsPath(d.n, name)
	if !ok {
		return nil, syscall.ENOENT // d was removed
	}
	ns := d.n.ns.cfg
	if r.HasDir(ns.Name, path) {
		n, _, e := d.linkOrExisting(name, d.sharedNode(kindDir, ns.Mode))
		return n, e
	}
	id, size, ok, err := r.Import(f.ctx, ns.Name, path)
	if err != nil {
		f.log.Warn("fusefs: import shared file", "namespace", ns.Name, "path", path, "err", err)
		return nil, syscall.EIO
	}
	if !ok {
		r.Missed(ns.Name, path)
		uncachedENOENT(out)
		return nil, syscall.ENOENT
	}
	return d.linkImported(name, path, id, size)
}

// linkImported links the object id that Remote.Import returned for path
// under name (see lookupRemote).
func (d *dirNode) linkImported(name, path string, id tiering.ObjectID, size int64) (*node, syscall.Errno) {
	f := d.fsys
	ns := d.n.ns
	info, err := f.be.Stat(id)
	switch {
	case err != nil:
		f.log.Warn("fusefs: imported object unusable", "namespace", ns.cfg.Name, "path", path, "object", id, "err", err)
		f.discardImport(id)
		return nil, syscall.EIO
	case info.Kind != ObjectKind:
		// Not ours to delete: reconciliation never touches other kinds.
		f.log.Error("fusefs: imported object has the wrong kind; left alone", "namespace", ns.cfg.Name, "path", path,
			"object", id, "kind", info.Kind, "want", ObjectKind)
		return nil, syscall.EIO
	case size < 0:
		f.log.Warn("fusefs: imported object has a negative size", "namespace", ns.cfg.Name, "path", path, "object", id, "size", size)
		f.discardImport(id)
		return nil, syscall.EIO
	}
	if c := d.child(name); c != nil {
		f.discardImport(id) // a racing lookup or create won
		return c, 0
	}
	if f.referenced(id) {
		// Some other file already has this object: never delete it.
		f.log.Error("fusefs: imported object already belongs to a file", "namespace", ns.cfg.Name, "path", path, "object", id)
		return nil, syscall.EIO
	}
	if !ns.Reserve(size) {
		f.discardImport(id)
		return nil, syscall.EDQUOT
	}
	n := d.sharedNode(kindFile, 0o644)
	n.obj = id
	n.size = size
	n.setReserved(size)
	c, created, e := d.linkOrExisting(name, n)
	if !created {
		ns.Adjust(-size)
		n.mu.Lock()
		n.setReserved(0)
		n.mu.Unlock()
		f.discardImport(id)
	}
	return c, e
}

// linkOrExisting links the new node n under name and logs it, as insert
// does, or returns the node that a concurrent lookup or create linked
// there first (created false). Errors as insert's; EIO when the change is
// made but could not be logged (created true).
func (d *dirNode) linkOrExisting(name string, n *node) (c *node, created bool, e syscall.Errno) {
	for {
		e, err := d.insert(name, n)
		if e == 0 {
			return n, true, logged(err)
		}
		if e != syscall.EEXIST {
			return nil, false, e
		}
		if c := d.child(name); c != nil {
			return c, false, 0
		}
		// Removed again since insert saw it: try once more.
	}
}

// sharedNode makes a node for lookupRemote owned by the namespace
// directory's owner, as newNode would for that caller.
func (d *dirNode) sharedNode(k nodeKind, mode uint32) *node {
	cfg := d.n.ns.cfg
	ctx := fuse.NewContext(context.Background(), &fuse.Caller{Owner: fuse.Owner{Uid: cfg.UID, Gid: cfg.GID}})
	return d.newNode(ctx, k, mode)
}

// child returns d's entry name, or nil.
func (d *dirNode) child(name string) *node {
	t := &d.fsys.t
	t.mu.RLock()
	defer t.mu.RUnlock()
	return d.n.dir.Get(name)
}

// nsPath returns the path of name in directory dir relative to dir's
// namespace directory ("a/b/name"); ok is false once dir is removed.
// tree.mu is taken here.
func (f *fsys) nsPath(dir *node, name string) (string, bool) {
	t := &f.t
	t.mu.RLock()
	defer t.mu.RUnlock()
	parts := []string{name}
	for c := dir; c != dir.ns.root; {
		if c.gone || len(c.links) == 0 || c.ino == rootIno {
			return "", false
		}
		l := c.links[0]
		parts = append(parts, l.name)
		c = l.parent
	}
	slices.Reverse(parts)
	return strings.Join(parts, "/"), true
}

// referenced reports whether a file of the tree has object id.
func (f *fsys) referenced(id tiering.ObjectID) bool {
	t := &f.t
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.byObj[id] != nil
}

// discardImport deletes an imported object that no file took, unless a
// file of the tree references it (a Remote that returned the same object
// to two racing lookups).
func (f *fsys) discardImport(id tiering.ObjectID) {
	if f.referenced(id) {
		return
	}
	if err := f.be.Delete(f.ctx, id); err != nil && !errors.Is(err, tiering.ErrNotExist) {
		f.log.Warn("fusefs: delete unused imported object", "object", id, "err", err)
	}
}

// uncachedENOENT makes the ENOENT of a lookup reach the kernel as an
// error, which it never caches: fuse_lookup then invalidates the negative
// dentry at once (fuse_invalidate_entry_cache), so the next lookup of the
// name is sent to the daemon again. go-fuse v2.12.1 (rawBridge.Lookup)
// turns ENOENT into a cached negative entry (nodeid 0, timeout
// fs.Options.NegativeTimeout) only when the node left the entry timeout
// in out at 0. A go-fuse that honoured this timeout for its negative
// entry instead would cache it for 1 ns (one jiffy in the kernel).
func uncachedENOENT(out *fuse.EntryOut) {
	out.SetEntryTimeout(time.Nanosecond)
}
