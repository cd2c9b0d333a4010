package fusefs

import (
	"context"
	"fmt"

	"github.com/ctxmem/ctxmemd/catalog"
	"github.com/ctxmem/ctxmemd/tiering"
)

// reconcile builds the served tree from the database and the store:
//   - a configured namespace reuses its recorded subtree only if its
//     identity is unchanged; otherwise the old subtree is deleted;
//   - subtrees of namespaces no longer configured are kept in the database
//     (not served, their objects kept);
//   - entries whose object is not among be.Objects() are removed;
//   - nodes no entry reaches (unlinked while open at a crash) are removed;
//   - objects of kind ObjectKind no entry references are deleted.
//
// All database changes are committed in one transaction before serving.
func (f *fsys) reconcile(ctx context.Context, db *catalog.DB) error {
	l, err := db.Load()
	if err != nil {
		return fmt.Errorf("fusefs: read tree database: %w", err)
	}
	live := map[tiering.ObjectID]tiering.ObjectInfo{}
	for _, o := range f.be.Objects() {
		if o.Kind == ObjectKind {
			live[o.ID] = o
		}
	}

	t := &f.t
	t.nextIno = max(l.NextIno, l.MaxIno+1, rootIno+1)
	ts := now()
	t.root = &node{ino: rootIno, kind: kindDir, dir: newDirData(), mode: 0o755, atime: ts, mtime: ts, ctime: ts}

	var (
		fix     []catalog.Op        // database changes, written in one transaction
		delRecs = map[uint64]bool{} // node records to delete
		keep    = map[uint64]bool{} // node records reached (kept)
		refObjs = map[tiering.ObjectID]bool{}
		removed int
	)
	delDirent := func(parent uint64, name string) { fix = append(fix, catalog.DelDirent(parent, name)) }
	configured := map[string]bool{}
	for _, ns := range f.nss {
		configured[ns.cfg.Name] = true
	}

	built := map[uint64]*node{}
	// nodeFor returns the in-memory node for record r (made once), or nil
	// when r is a file whose object another node already claims.
	nodeFor := func(ino uint64, r catalog.Record, ns *namespace) *node {
		if n := built[ino]; n != nil {
			return n
		}
		n := &node{ino: ino, kind: r.Kind, ns: ns, obj: tiering.ObjectID(r.Obj), target: r.Target,
			mode: r.Mode & 0o7777, uid: r.UID, gid: r.GID, atime: r.Atime, mtime: r.Mtime, ctime: r.Ctime,
			xattrs: l.Xattrs[ino]}
		switch r.Kind {
		case kindDir:
			n.dir = newDirData()
		case kindFile:
			if t.byObj[n.obj] != nil {
				return nil
			}
			n.size = live[n.obj].Size
			n.reserved = n.size
			t.byObj[n.obj] = n
		}
		built[ino] = n
		return n
	}

	// walk visits the subtree under directory dino. dn is its in-memory
	// node, or nil for the subtree of a namespace that is not served
	// (records are then only marked as kept).
	var walk func(dino uint64, dn *node, ns *namespace)
	walk = func(dino uint64, dn *node, ns *namespace) {
		for _, c := range l.Children[dino] {
			r, ok := l.Nodes[c.Ino]
			bad := !ok || c.Ino == rootIno || validName(c.Name) != nil
			if !bad && r.Kind == kindDir && keep[c.Ino] {
				bad = true // second name of a directory
			}
			if !bad && r.Kind == kindFile {
				if _, ok := live[tiering.ObjectID(r.Obj)]; !ok {
					bad = true
					removed++
				}
			}
			var cn *node
			if !bad && dn != nil {
				if cn = nodeFor(c.Ino, r, ns); cn == nil {
					bad = true
				}
			}
			if bad {
				delDirent(dino, c.Name)
				continue
			}
			first := !keep[c.Ino]
			keep[c.Ino] = true
			if r.Kind == kindFile {
				refObjs[tiering.ObjectID(r.Obj)] = true
			}
			if dn != nil {
				dn.dir.add(c.Name, cn)
				cn.links = append(cn.links, link{dn, c.Name})
			}
			if first && r.Kind == kindDir {
				walk(c.Ino, cn, ns)
			}
		}
	}

	for _, ns := range f.nss {
		rec, ok := l.Namespaces[ns.cfg.Name]
		r, rok := l.Nodes[rec.Ino]
		reuse := ok && rok && r.Kind == kindDir && rec.Identity == ns.cfg.identity() && !keep[rec.Ino]
		if ok && !reuse {
			f.log.Warn("fusefs: namespace identity changed; starting it empty", "namespace", ns.cfg.Name,
				"old", rec.Identity, "new", ns.cfg.identity())
		}
		var n *node
		if reuse {
			n = &node{ino: rec.Ino, kind: kindDir, ns: ns, dir: newDirData(),
				atime: r.Atime, mtime: r.Mtime, ctime: r.Ctime}
			keep[rec.Ino] = true
		} else {
			n = &node{ino: t.allocIno(), kind: kindDir, ns: ns, dir: newDirData(), atime: ts, mtime: ts, ctime: ts}
		}
		n.mode, n.uid, n.gid = ns.cfg.Mode, ns.cfg.UID, ns.cfg.GID
		n.xattrs = l.Xattrs[n.ino]
		ns.root = n
		built[n.ino] = n
		t.root.dir.add(ns.cfg.Name, n)
		n.links = []link{{t.root, ns.cfg.Name}}
		if reuse {
			walk(rec.Ino, n, ns)
		}
		fix = append(fix, catalog.PutNamespace(ns.cfg.Name, catalog.NSRecord{Ino: n.ino, Identity: ns.cfg.identity()}),
			catalog.PutNode(n))
	}
	for name, rec := range l.Namespaces {
		if configured[name] {
			continue
		}
		if r, ok := l.Nodes[rec.Ino]; ok && r.Kind == kindDir && !keep[rec.Ino] {
			keep[rec.Ino] = true
			walk(rec.Ino, nil, nil)
		}
	}
	for ino := range l.Nodes {
		if !keep[ino] {
			delRecs[ino] = true
		}
	}
	for p, cs := range l.Children {
		if !keep[p] {
			for _, c := range cs {
				delDirent(p, c.Name)
			}
		}
	}

	// Everything built gets its link count; quota usage from sizes.
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

	for ino := range delRecs {
		fix = append(fix, catalog.DelNode(ino))
	}
	err = db.Write(append(fix, catalog.SetNextIno(t.nextIno))...)
	if err != nil {
		return fmt.Errorf("fusefs: write reconciled tree: %w", err)
	}

	orphans := 0
	for id := range live {
		if !refObjs[id] {
			orphans++
			if err := f.be.Delete(ctx, id); err != nil {
				f.log.Warn("fusefs: delete orphan object", "object", id, "err", err)
			}
		}
	}
	f.log.Info("fusefs: tree reconciled", "nodes", len(built), "entries_removed", removed,
		"records_dropped", len(delRecs), "orphan_objects_deleted", orphans)
	return nil
}
