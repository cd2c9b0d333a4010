package fusefs

import (
	"errors"
	"fmt"

	"github.com/ctxmem/ctxmemd/catalog"
)

// Errors of AddNamespace (test with errors.Is).
var (
	// ErrNamespaceExists: a namespace of that name is already served.
	ErrNamespaceExists = errors.New("namespace already served")
	// ErrNeedsRestart: the change cannot be made while the file system
	// is mounted; it takes effect at the next mount.
	ErrNeedsRestart = errors.New("needs a restart")
	// ErrUnmounted: the file system is no longer served.
	ErrUnmounted = errors.New("file system unmounted")
)

// AddNamespace serves a new namespace at once: a directory named ns.Name
// under the mount root, with ns's owner, mode, block size, quota and
// identity (zero fields take the defaults Mount applies). It is recorded in
// the tree database (namespace record and directory node, committed and
// fdatasync'ed before it is served), so files written in it survive a
// restart whose configuration still declares it; a restart without it
// keeps its files unserved, as Mount does for any namespace no longer
// declared. The kernel is told at once (entry and attribute invalidation
// of the root), so a negative dentry cached by an earlier lookup of the
// name does not hide it.
//
// Only new names can be added live. Errors: an invalid ns (as Mount
// would refuse it); ErrNamespaceExists when the name is served;
// ErrNeedsRestart when the tree database holds a namespace of that name
// from an earlier mount (whether its files are kept depends on its
// identity, which Mount decides: restart to serve it); ErrUnmounted after
// unmount; tree database errors. Removing or changing a namespace is
// restart-only.
func (s *Server) AddNamespace(ns Namespace) error {
	o, err := Options{TreePath: s.fsys.opts.TreePath, Namespaces: []Namespace{ns}}.withDefaults()
	if err != nil {
		return err
	}
	ns = o.Namespaces[0]
	// closeMu keeps Unmount from closing the tree database meanwhile and
	// serialises concurrent adds.
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	select {
	case <-s.served:
		return fmt.Errorf("fusefs: add namespace %q: %w", ns.Name, ErrUnmounted)
	default:
	}
	f := s.fsys
	t := &f.t
	t.mu.RLock()
	served := t.root.dir.Get(ns.Name) != nil
	t.mu.RUnlock()
	if served {
		return fmt.Errorf("fusefs: add namespace %q: %w", ns.Name, ErrNamespaceExists)
	}
	nsp := newNamespace(ns)
	ts := now()
	t.mu.Lock()
	n := &node{ino: t.allocIno(), kind: kindDir, ns: nsp, dir: newDirData(), atime: ts, mtime: ts, ctime: ts,
		mode: ns.Mode, uid: ns.UID, gid: ns.GID}
	t.mu.Unlock()
	nsp.root = n
	nsp.AddInodes(1)
	// Recorded (as reconcile records a namespace) before it is served, so
	// that every logged change inside it comes after its record.
	switch err := s.db.AddNamespace(ns.Name, ns.identity(), n); {
	case errors.Is(err, catalog.ErrNamespaceRecorded):
		return fmt.Errorf("fusefs: add namespace %q: the tree database holds it from an earlier mount (restart to serve it): %w",
			ns.Name, ErrNeedsRestart)
	case err != nil:
		return fmt.Errorf("fusefs: record namespace %q: %w", ns.Name, err)
	}

	t.mu.Lock()
	t.root.dir.Add(ns.Name, n)
	n.links = []link{{t.root, ns.Name}}
	n.updateNlink()
	t.root.updateNlink()
	touchTimes(t.root, ts)
	f.nss = append(f.nss, nsp)
	t.mu.Unlock()

	if srv := f.notes.server(); srv != nil {
		// ENOENT when the kernel has no entry cached: nothing to drop.
		srv.EntryNotify(rootIno, ns.Name)
		srv.InodeNotify(rootIno, 0, -1)
	}
	f.log.Info("fusefs: namespace added", "namespace", ns.Name, "ino", n.ino, "block_size", ns.BlockSize,
		"quota_bytes", ns.QuotaBytes, "mode", fmt.Sprintf("%#o", ns.Mode))
	return nil
}

// Namespaces returns the served namespaces (defaults applied), those given
// to Mount first, then those added live, in the order they were added.
func (s *Server) Namespaces() []Namespace {
	t := &s.fsys.t
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]Namespace, 0, len(s.fsys.nss))
	for _, ns := range s.fsys.nss {
		out = append(out, ns.cfg)
	}
	return out
}
