package fusefs

import (
	"github.com/ctxmem/ctxmemd/catalog"
	"github.com/ctxmem/ctxmemd/tiering"
)

// Tree returns the mount's namespace tree as the catalog's name service
// reads it (catalog.NewNames): object ids to names and back, and file
// removal for dropping a namespace. Views hold the tree's read lock; a
// removed file's names are dropped from the kernel's caches as for a lost
// object (removeFile).
func (s *Server) Tree() catalog.Tree { return catalogTree{s.fsys} }

// catalogTree implements catalog.Tree on the in-memory tree.
type catalogTree struct{ f *fsys }

func (c catalogTree) View(fn func(catalog.View)) {
	t := &c.f.t
	t.mu.RLock()
	defer t.mu.RUnlock()
	fn(treeView{c.f})
}

func (c catalogTree) RemoveFile(id tiering.ObjectID, why string) bool { return c.f.removeFile(id, why) }

// treeView implements catalog.View; tree.mu is held for reading.
type treeView struct{ f *fsys }

// entry returns what the catalog sees of n.
func entry(n *node) catalog.Entry {
	e := catalog.Entry{Ino: n.ino, Kind: n.kind, Obj: n.obj, Ref: n}
	if n.ns != nil {
		e.NS = n.ns.cfg.Name
	}
	return e
}

func nodeOf(e catalog.Entry) *node { return e.Ref.(*node) }

func (v treeView) Namespace(name string) (catalog.Entry, bool) {
	var root *node
	for _, ns := range v.f.nss { // f.nss grows under t.mu (AddNamespace)
		if ns.cfg.Name == name {
			root = ns.root
		}
	}
	if root == nil {
		return catalog.Entry{}, false
	}
	return entry(root), true
}

func (v treeView) Child(dir catalog.Entry, name string) (catalog.Entry, bool) {
	d := nodeOf(dir)
	if d.dir == nil {
		return catalog.Entry{}, false
	}
	c := d.dir.Get(name)
	if c == nil {
		return catalog.Entry{}, false
	}
	return entry(c), true
}

func (v treeView) Parent(dir catalog.Entry) catalog.Entry { return entry(nodeOf(dir).parent()) }

func (v treeView) File(id tiering.ObjectID) (catalog.Entry, bool) {
	n := v.f.t.byObj[id]
	if n == nil || n.gone {
		return catalog.Entry{}, false
	}
	return entry(n), true
}

func (v treeView) Name(e catalog.Entry) (catalog.Entry, string, bool) {
	n := nodeOf(e)
	if len(n.links) == 0 {
		return catalog.Entry{}, "", false
	}
	l := n.links[0]
	return entry(l.parent), l.name, true
}

func (v treeView) Files(ns string) []tiering.ObjectID {
	var ids []tiering.ObjectID
	for id, n := range v.f.t.byObj {
		if n.ns != nil && n.ns.cfg.Name == ns {
			ids = append(ids, id)
		}
	}
	return ids
}
