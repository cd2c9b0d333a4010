package fusefs

import (
	"errors"
	"fmt"

	"github.com/ctxmem/ctxmemd/catalog"
	"github.com/ctxmem/ctxmemd/tiering"
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
// A namespace the tree database holds from an earlier mount (declared
// then, not at this mount) is served again with its files, as a restart
// that declares it would serve it, if its identity is the recorded one.
// Errors: an invalid ns (as Mount would refuse it); ErrNamespaceExists
// when the name is served; ErrNeedsRestart when the tree database holds a
// namespace of that name with another identity (a restart serves it
// empty and deletes its files); ErrUnmounted after unmount; tree database
// errors. Removing or changing a namespace is restart-only.
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
	// Recorded (as reconcile records a namespace) before it is served, so
	// that every logged change inside it comes after its record.
	files := 0
	switch err := s.db.AddNamespace(ns.Name, ns.identity(), n); {
	case errors.Is(err, catalog.ErrNamespaceRecorded):
		// Served by an earlier mount: served again with its files.
		if n, files, err = s.recorded(ns, nsp, ts); err != nil {
			return err
		}
	case err != nil:
		return fmt.Errorf("fusefs: record namespace %q: %w", ns.Name, err)
	default:
		nsp.AddInodes(1)
	}
	nsp.root = n

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
		"quota_bytes", ns.QuotaBytes, "mode", fmt.Sprintf("%#o", ns.Mode), "files_kept", files)
	return nil
}

// recorded builds, for AddNamespace, the tree of namespace ns (accounting
// nsp) that the tree database holds from an earlier mount that served it,
// as Mount would serve it (catalog.Reconcile's plan for it alone), and
// returns its root, not yet linked into the mount root, and how many file
// entries it has. Entries Mount would remove (their object is gone, or a
// served file has it) are left out but stay in the database, for the next
// mount to remove. The subtree of a namespace not served is not changed
// by anyone meanwhile, so the database holds it whole; its inode numbers
// are below t.nextIno, which Mount set past every record. Only its root
// record is written (owner and mode as ns says, as Mount does).
// ErrNeedsRestart when ns's identity differs from the recorded one (a
// mount starts it empty and deletes its files, which is restart-only) or
// the record is damaged.
func (s *Server) recorded(ns Namespace, nsp *namespace, ts int64) (*node, int, error) {
	f := s.fsys
	l, err := s.db.Load()
	if err != nil {
		return nil, 0, fmt.Errorf("fusefs: add namespace %q: read tree database: %w", ns.Name, err)
	}
	rec := l.Namespaces[ns.Name]
	if r, ok := l.Nodes[rec.Ino]; !ok || r.Kind != kindDir || rec.Identity != ns.identity() {
		return nil, 0, fmt.Errorf("fusefs: add namespace %q: the tree database holds it from an earlier mount with another identity "+
			"(a restart serves it EMPTY and deletes its files): %w", ns.Name, ErrNeedsRestart)
	}
	live := map[tiering.ObjectID]int64{}
	for _, o := range f.be.Objects() {
		if o.Kind == ObjectKind {
			live[o.ID] = o.Size
		}
	}
	cfg := catalog.NamespaceConfig{Name: ns.Name, Identity: ns.identity(), Mode: ns.Mode, UID: ns.UID, GID: ns.GID}
	plan := catalog.Reconcile(l, live, []catalog.NamespaceConfig{cfg}, ts, f.log)
	r := plan.Roots[0]
	if !r.Reused || r.Ino != rec.Ino {
		return nil, 0, fmt.Errorf("fusefs: add namespace %q: its recorded tree cannot be served live: %w", ns.Name, ErrNeedsRestart)
	}
	root := &node{ino: r.Ino, kind: kindDir, ns: nsp, dir: newDirData(), atime: r.Atime, mtime: r.Mtime, ctime: r.Ctime,
		mode: ns.Mode, uid: ns.UID, gid: ns.GID, xattrs: r.Xattrs}
	// Not under t.mu: a journal commit holds the database and then asks
	// for t.mu (its NextIno).
	if err := s.db.Write(catalog.PutNode(root)); err != nil {
		return nil, 0, fmt.Errorf("fusefs: record namespace %q: %w", ns.Name, err)
	}
	t := &f.t
	t.mu.Lock()
	defer t.mu.Unlock()
	built := map[uint64]*node{root.ino: root}
	files := 0
	for _, k := range plan.Links {
		dn := built[k.Parent]
		if dn == nil {
			continue // inside an entry left out
		}
		cn := built[k.Ino]
		if cn == nil {
			if _, taken := t.byObj[tiering.ObjectID(k.Record.Obj)]; k.Record.Kind == kindFile && taken {
				continue // a served file has its object
			}
			cn = t.nodeFromLinkLocked(k, nsp, live)
			built[k.Ino] = cn
		}
		if cn.kind == kindFile {
			files++
		}
		dn.dir.Add(k.Name, cn)
		cn.links = append(cn.links, link{dn, k.Name})
	}
	for _, n := range built {
		n.updateNlink()
		nsp.AddInodes(1)
		if n.kind == kindFile {
			nsp.Adjust(n.reserved)
			nsp.AddAlloc(allocBytes(n.reserved))
		}
	}
	t.nextIno = max(t.nextIno, plan.NextIno)
	return root, files, nil
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
