package fusefs

import (
	"context"
	"fmt"

	"github.com/ctxmem/ctxmemd/catalog"
	"github.com/ctxmem/ctxmemd/tiering"
)

// reconcile builds the served tree from the database and the store as
// catalog.Reconcile plans it (identity-changed namespaces start empty,
// unserved namespaces are kept, entries whose object is gone are
// removed, orphan objects of kind ObjectKind are deleted). All database
// changes are committed in one transaction before serving.
func (f *fsys) reconcile(ctx context.Context, db *catalog.DB) error {
	l, err := db.Load()
	if err != nil {
		return fmt.Errorf("fusefs: read tree database: %w", err)
	}
	live := map[tiering.ObjectID]int64{}
	for _, o := range f.be.Objects() {
		if o.Kind == ObjectKind {
			live[o.ID] = o.Size
		}
	}
	cfgs := make([]catalog.NamespaceConfig, len(f.nss))
	for i, ns := range f.nss {
		cfgs[i] = catalog.NamespaceConfig{Name: ns.cfg.Name, Identity: ns.cfg.identity(), Mode: ns.cfg.Mode, UID: ns.cfg.UID, GID: ns.cfg.GID}
	}
	ts := now()
	plan := catalog.Reconcile(l, live, cfgs, ts, f.log)

	t := &f.t
	t.nextIno = plan.NextIno
	t.root = &node{ino: rootIno, kind: kindDir, dir: newDirData(), mode: 0o755, atime: ts, mtime: ts, ctime: ts}
	built := map[uint64]*node{}
	for i, ns := range f.nss {
		r := plan.Roots[i]
		n := &node{ino: r.Ino, kind: kindDir, ns: ns, dir: newDirData(), atime: r.Atime, mtime: r.Mtime, ctime: r.Ctime,
			mode: ns.cfg.Mode, uid: ns.cfg.UID, gid: ns.cfg.GID, xattrs: r.Xattrs}
		ns.root = n
		built[n.ino] = n
		t.root.dir.Add(ns.cfg.Name, n)
		n.links = []link{{t.root, ns.cfg.Name}}
	}
	for _, k := range plan.Links {
		dn := built[k.Parent]
		cn := built[k.Ino]
		if cn == nil {
			cn = t.nodeFromLinkLocked(k, f.nss[k.NS], live)
			built[k.Ino] = cn
		}
		dn.dir.Add(k.Name, cn)
		cn.links = append(cn.links, link{dn, k.Name})
	}

	// Everything built gets its link count (the mount root too: 2 plus
	// its namespaces); quota usage from sizes.
	t.root.updateNlink()
	for _, n := range built {
		n.updateNlink()
		if n.ns != nil {
			n.ns.AddInodes(1)
		}
		if n.kind == kindFile {
			n.ns.Adjust(n.reserved)
			n.ns.AddAlloc(allocBytes(n.reserved))
		}
	}
	if err := db.Write(plan.Ops...); err != nil {
		return fmt.Errorf("fusefs: write reconciled tree: %w", err)
	}
	orphans := plan.DeleteOrphans(ctx, f.be, f.log)
	f.log.Info("fusefs: tree reconciled", "nodes", len(built), "entries_removed", plan.Removed,
		"records_dropped", plan.Dropped, "orphan_objects_deleted", orphans)
	return nil
}

// nodeFromLinkLocked builds the served node of a recorded link's inode
// (k.Record) in namespace ns: a directory gets its entries' index, a file
// its size from live (its object's, as the store has it) and its place in
// byObj. Used by reconcile at mount and by a namespace added back live.
// t.mu held for writing (or the tree not served yet).
func (t *tree) nodeFromLinkLocked(k catalog.Link, ns *namespace, live map[tiering.ObjectID]int64) *node {
	r := k.Record
	n := &node{ino: k.Ino, kind: r.Kind, ns: ns, obj: tiering.ObjectID(r.Obj), target: r.Target,
		mode: r.Mode & 0o7777, uid: r.UID, gid: r.GID, atime: r.Atime, mtime: r.Mtime, ctime: r.Ctime,
		xattrs: k.Xattrs}
	switch r.Kind {
	case kindDir:
		n.dir = newDirData()
	case kindFile:
		n.size = live[n.obj]
		n.reserved = n.size
		t.byObj[n.obj] = n
	}
	return n
}
