package catalog

import (
	"context"
	"errors"
	"log/slog"
	"strings"

	"github.com/ctxmem/ctxmemd/tiering"
)

// RootIno is the inode number of the tree root (the mount root, FUSE's
// root node id). No entry may refer to it.
const RootIno = 1

// MaxNameLen is the longest directory entry name, in bytes.
const MaxNameLen = 255

// ValidName reports whether name can be a directory entry: 1 to
// MaxNameLen bytes, no '/' or NUL, not "." or "..".
func ValidName(name string) error {
	switch {
	case name == "" || name == "." || name == "..":
		return errors.New("invalid name")
	case len(name) > MaxNameLen:
		return errors.New("name longer than 255 bytes")
	case strings.ContainsAny(name, "/\x00"):
		return errors.New("name contains '/' or NUL")
	}
	return nil
}

// NamespaceConfig is a configured namespace as reconciliation sees it:
// its name, identity, and the owner and mode (07777) of its directory.
type NamespaceConfig struct {
	Name           string
	Identity       Identity
	Mode, UID, GID uint32
}

// Plan is the served tree that Reconcile decided on, and the database
// changes that make the database agree with it.
type Plan struct {
	// NextIno is the next inode number to hand out.
	NextIno uint64
	// Roots are the directories of the configured namespaces, in the
	// order given to Reconcile.
	Roots []Root
	// Links are the entries of the served namespaces, depth first, each
	// directory's in name order: a directory's own entry comes before
	// those inside it. A file with several names has several Links.
	Links []Link
	// Orphans are live objects no entry references (served or not).
	Orphans []tiering.ObjectID
	// Removed counts entries dropped because their object is gone;
	// Dropped counts node records deleted.
	Removed, Dropped int
	// Ops are the database changes, to be written in one DB.Write before
	// anything is served.
	Ops []Op
}

// Root is a namespace directory of a Plan: its inode, whether its
// recorded subtree is reused, and its times (unix ns) and xattrs.
type Root struct {
	Ino                 uint64
	Reused              bool
	Atime, Mtime, Ctime int64
	Xattrs              map[string][]byte
}

// Link is one entry of a Plan: name in directory Parent refers to node
// Ino (Record, Xattrs) of namespace Roots[NS].
type Link struct {
	NS     int
	Parent uint64
	Name   string
	Ino    uint64
	Record Record
	Xattrs map[string][]byte
}

// fixedNode is a node record known at planning time.
type fixedNode struct {
	ino uint64
	rec Record
}

func (n fixedNode) Ino() uint64    { return n.ino }
func (n fixedNode) Record() Record { return n.rec }

// Reconcile decides the served tree from the database content l, the
// live objects of the tree's kind (id → size in bytes) and the
// configured namespaces; now (unix ns) timestamps new namespace
// directories. The rules:
//   - a configured namespace reuses its recorded subtree only if its
//     identity is unchanged (logged otherwise); the old subtree is then
//     deleted;
//   - subtrees of namespaces no longer configured are kept in the
//     database (not served, their objects kept);
//   - entries whose object is not live, with an invalid name, pointing at
//     no record or at the root, second names of a directory, and file
//     entries whose object another file already has are removed;
//   - records no entry reaches (unlinked while open at a crash) are
//     removed;
//   - live objects no entry references are orphans.
func Reconcile(l *Snapshot, live map[tiering.ObjectID]int64, nss []NamespaceConfig, now int64, log *slog.Logger) *Plan {
	p := &Plan{NextIno: max(l.NextIno, l.MaxIno+1, RootIno+1)}
	var (
		delRecs = map[uint64]bool{} // node records to delete
		keep    = map[uint64]bool{} // node records reached (kept)
		refObjs = map[tiering.ObjectID]bool{}
		built   = map[uint64]bool{} // served nodes
		claimed = map[tiering.ObjectID]bool{}
	)
	delDirent := func(parent uint64, name string) { p.Ops = append(p.Ops, DelDirent(parent, name)) }
	configured := map[string]bool{}
	for _, ns := range nss {
		configured[ns.Name] = true
	}

	// walk visits the subtree under directory dino; served is the index
	// of its namespace in nss, or -1 for the subtree of a namespace that
	// is not served (records are then only marked as kept).
	var walk func(dino uint64, served int)
	walk = func(dino uint64, served int) {
		for _, c := range l.Children[dino] {
			r, ok := l.Nodes[c.Ino]
			bad := !ok || c.Ino == RootIno || ValidName(c.Name) != nil
			if !bad && r.Kind == KindDir && keep[c.Ino] {
				bad = true // second name of a directory
			}
			if !bad && r.Kind == KindFile {
				if _, ok := live[tiering.ObjectID(r.Obj)]; !ok {
					bad = true
					p.Removed++
				}
			}
			if !bad && served >= 0 && !built[c.Ino] {
				if r.Kind == KindFile && claimed[tiering.ObjectID(r.Obj)] {
					bad = true // another file has its object
				} else {
					built[c.Ino] = true
					if r.Kind == KindFile {
						claimed[tiering.ObjectID(r.Obj)] = true
					}
				}
			}
			if bad {
				delDirent(dino, c.Name)
				continue
			}
			first := !keep[c.Ino]
			keep[c.Ino] = true
			if r.Kind == KindFile {
				refObjs[tiering.ObjectID(r.Obj)] = true
			}
			if served >= 0 {
				p.Links = append(p.Links, Link{NS: served, Parent: dino, Name: c.Name, Ino: c.Ino, Record: r, Xattrs: l.Xattrs[c.Ino]})
			}
			if first && r.Kind == KindDir {
				walk(c.Ino, served)
			}
		}
	}

	for i, ns := range nss {
		rec, ok := l.Namespaces[ns.Name]
		r, rok := l.Nodes[rec.Ino]
		reuse := ok && rok && r.Kind == KindDir && rec.Identity == ns.Identity && !keep[rec.Ino]
		if ok && !reuse {
			log.Warn("catalog: namespace identity changed; starting it empty", "namespace", ns.Name,
				"old", rec.Identity, "new", ns.Identity)
		}
		root := Root{Reused: reuse}
		if reuse {
			root.Ino, root.Atime, root.Mtime, root.Ctime = rec.Ino, r.Atime, r.Mtime, r.Ctime
			keep[rec.Ino] = true
		} else {
			root.Ino, root.Atime, root.Mtime, root.Ctime = p.NextIno, now, now, now
			p.NextIno++
		}
		root.Xattrs = l.Xattrs[root.Ino]
		built[root.Ino] = true
		p.Roots = append(p.Roots, root)
		if reuse {
			walk(rec.Ino, i)
		}
		dir := Record{Kind: KindDir, Mode: ns.Mode, UID: ns.UID, GID: ns.GID, Atime: root.Atime, Mtime: root.Mtime, Ctime: root.Ctime}
		p.Ops = append(p.Ops, PutNamespace(ns.Name, NSRecord{Ino: root.Ino, Identity: ns.Identity}),
			PutNode(fixedNode{root.Ino, dir}))
	}
	for name, rec := range l.Namespaces {
		if configured[name] {
			continue
		}
		if r, ok := l.Nodes[rec.Ino]; ok && r.Kind == KindDir && !keep[rec.Ino] {
			keep[rec.Ino] = true
			walk(rec.Ino, -1)
		}
	}
	for ino := range l.Nodes {
		if !keep[ino] {
			delRecs[ino] = true
		}
	}
	for parent, cs := range l.Children {
		if !keep[parent] {
			for _, c := range cs {
				delDirent(parent, c.Name)
			}
		}
	}
	for ino := range delRecs {
		p.Ops = append(p.Ops, DelNode(ino))
	}
	p.Dropped = len(delRecs)
	p.Ops = append(p.Ops, SetNextIno(p.NextIno))
	for id := range live {
		if !refObjs[id] {
			p.Orphans = append(p.Orphans, id)
		}
	}
	return p
}

// DeleteOrphans deletes p.Orphans through objs, logging each failure,
// and returns how many there were.
func (p *Plan) DeleteOrphans(ctx context.Context, objs Deleter, log *slog.Logger) int {
	for _, id := range p.Orphans {
		if err := objs.Delete(ctx, id); err != nil {
			log.Warn("catalog: delete orphan object", "object", id, "err", err)
		}
	}
	return len(p.Orphans)
}
