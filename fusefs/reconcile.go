package fusefs

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"

	"github.com/ctxmem/ctxmemd/tiering"
	bolt "go.etcd.io/bbolt"
)

// loaded is the raw content of the tree database.
type loaded struct {
	nextIno  uint64
	maxIno   uint64
	ns       map[string]nsRecord
	nodes    map[uint64]nodeRecord
	children map[uint64][]childRef // by parent ino, in name order
	xattrs   map[uint64]map[string][]byte
}

type childRef struct {
	name string
	ino  uint64
}

func readTreeDB(db *bolt.DB) (*loaded, error) {
	l := &loaded{
		ns:       map[string]nsRecord{},
		nodes:    map[uint64]nodeRecord{},
		children: map[uint64][]childRef{},
		xattrs:   map[uint64]map[string][]byte{},
	}
	err := db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketMeta).Get(keyNextIno); len(v) == 8 {
			l.nextIno = binary.BigEndian.Uint64(v)
		}
		err := tx.Bucket(bucketNS).ForEach(func(k, v []byte) error {
			var r nsRecord
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("namespace record %q: %w", k, err)
			}
			l.ns[string(k)] = r
			return nil
		})
		if err != nil {
			return err
		}
		err = tx.Bucket(bucketNodes).ForEach(func(k, v []byte) error {
			r, err := decodeNode(v)
			if err != nil || len(k) != 8 {
				return fmt.Errorf("node record %x: %v", k, err)
			}
			ino := binary.BigEndian.Uint64(k)
			l.nodes[ino] = r
			l.maxIno = max(l.maxIno, ino)
			return nil
		})
		if err != nil {
			return err
		}
		err = tx.Bucket(bucketDirents).ForEach(func(k, v []byte) error {
			if len(k) <= 8 || len(v) != 8 {
				return fmt.Errorf("bad dirent %x", k)
			}
			p := binary.BigEndian.Uint64(k)
			l.children[p] = append(l.children[p], childRef{string(k[8:]), binary.BigEndian.Uint64(v)})
			return nil
		})
		if err != nil {
			return err
		}
		return tx.Bucket(bucketXattrs).ForEach(func(k, v []byte) error {
			if len(k) <= 8 {
				return nil
			}
			ino := binary.BigEndian.Uint64(k)
			m := l.xattrs[ino]
			if m == nil {
				m = map[string][]byte{}
				l.xattrs[ino] = m
			}
			m[string(k[8:])] = append([]byte(nil), v...)
			return nil
		})
	})
	return l, err
}

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
func (f *fsys) reconcile(ctx context.Context, db *bolt.DB) error {
	l, err := readTreeDB(db)
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
	t.nextIno = max(l.nextIno, l.maxIno+1, rootIno+1)
	ts := now()
	t.root = &node{ino: rootIno, kind: kindDir, dir: newDirData(), mode: 0o755, atime: ts, mtime: ts, ctime: ts}

	var (
		txOps      []func(tx *bolt.Tx) error
		delRecs    = map[uint64]bool{} // node records to delete
		delDirents = map[dkey]bool{}
		keep       = map[uint64]bool{} // node records reached (kept)
		refObjs    = map[tiering.ObjectID]bool{}
		removed    int
	)
	configured := map[string]bool{}
	for _, ns := range f.nss {
		configured[ns.cfg.Name] = true
	}

	built := map[uint64]*node{}
	// nodeFor returns the in-memory node for record r (made once), or nil
	// when r is a file whose object another node already claims.
	nodeFor := func(ino uint64, r nodeRecord, ns *namespace) *node {
		if n := built[ino]; n != nil {
			return n
		}
		n := &node{ino: ino, kind: r.kind, ns: ns, obj: tiering.ObjectID(r.obj), target: r.target,
			mode: r.mode & 0o7777, uid: r.uid, gid: r.gid, atime: r.atime, mtime: r.mtime, ctime: r.ctime,
			xattrs: l.xattrs[ino]}
		switch r.kind {
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
		for _, c := range l.children[dino] {
			r, ok := l.nodes[c.ino]
			bad := !ok || c.ino == rootIno || validName(c.name) != nil
			if !bad && r.kind == kindDir && keep[c.ino] {
				bad = true // second name of a directory
			}
			if !bad && r.kind == kindFile {
				if _, ok := live[tiering.ObjectID(r.obj)]; !ok {
					bad = true
					removed++
				}
			}
			var cn *node
			if !bad && dn != nil {
				if cn = nodeFor(c.ino, r, ns); cn == nil {
					bad = true
				}
			}
			if bad {
				delDirents[dkey{dino, c.name}] = true
				continue
			}
			first := !keep[c.ino]
			keep[c.ino] = true
			if r.kind == kindFile {
				refObjs[tiering.ObjectID(r.obj)] = true
			}
			if dn != nil {
				dn.dir.add(c.name, cn)
				cn.links = append(cn.links, link{dn, c.name})
			}
			if first && r.kind == kindDir {
				walk(c.ino, cn, ns)
			}
		}
	}

	for _, ns := range f.nss {
		rec, ok := l.ns[ns.cfg.Name]
		r, rok := l.nodes[rec.Ino]
		reuse := ok && rok && r.kind == kindDir && rec.Identity == ns.cfg.identity() && !keep[rec.Ino]
		if ok && !reuse {
			f.log.Warn("fusefs: namespace identity changed; starting it empty", "namespace", ns.cfg.Name,
				"old", rec.Identity, "new", ns.cfg.identity())
		}
		var n *node
		if reuse {
			n = &node{ino: rec.Ino, kind: kindDir, ns: ns, dir: newDirData(),
				atime: r.atime, mtime: r.mtime, ctime: r.ctime}
			keep[rec.Ino] = true
		} else {
			n = &node{ino: t.allocIno(), kind: kindDir, ns: ns, dir: newDirData(), atime: ts, mtime: ts, ctime: ts}
		}
		n.mode, n.uid, n.gid = ns.cfg.Mode, ns.cfg.UID, ns.cfg.GID
		n.xattrs = l.xattrs[n.ino]
		ns.root = n
		built[n.ino] = n
		t.root.dir.add(ns.cfg.Name, n)
		n.links = []link{{t.root, ns.cfg.Name}}
		if reuse {
			walk(rec.Ino, n, ns)
		}
		nsRec, _ := json.Marshal(nsRecord{Ino: n.ino, Identity: ns.cfg.identity()})
		name := ns.cfg.Name
		txOps = append(txOps, func(tx *bolt.Tx) error {
			if err := tx.Bucket(bucketNS).Put([]byte(name), nsRec); err != nil {
				return err
			}
			return tx.Bucket(bucketNodes).Put(u64(n.ino), encodeNode(n))
		})
	}
	for name, rec := range l.ns {
		if configured[name] {
			continue
		}
		if r, ok := l.nodes[rec.Ino]; ok && r.kind == kindDir && !keep[rec.Ino] {
			keep[rec.Ino] = true
			walk(rec.Ino, nil, nil)
		}
	}
	for ino := range l.nodes {
		if !keep[ino] {
			delRecs[ino] = true
		}
	}
	for p, cs := range l.children {
		if !keep[p] {
			for _, c := range cs {
				delDirents[dkey{p, c.name}] = true
			}
		}
	}

	// Everything built gets its link count; quota usage from sizes.
	for _, n := range built {
		n.updateNlink()
		if n.ns != nil {
			n.ns.inodes.Add(1)
		}
		if n.kind == kindFile {
			n.ns.adjust(n.reserved)
			n.ns.alloc.Add(allocBytes(n.reserved))
		}
	}

	recKVs := make([]kv, 0, len(delRecs))
	for ino := range delRecs {
		recKVs = append(recKVs, kv{u64(ino), nil})
	}
	dentKVs := make([]kv, 0, len(delDirents))
	for k := range delDirents {
		dentKVs = append(dentKVs, kv{direntKey(k.parent, k.name), nil})
	}
	err = db.Update(func(tx *bolt.Tx) error {
		xb := tx.Bucket(bucketXattrs)
		if err := putSorted(tx.Bucket(bucketNodes), recKVs, func(k []byte) error { return deletePrefix(xb, k) }); err != nil {
			return err
		}
		if err := putSorted(tx.Bucket(bucketDirents), dentKVs, nil); err != nil {
			return err
		}
		for _, fn := range txOps {
			if err := fn(tx); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketMeta).Put(keyNextIno, u64(t.nextIno))
	})
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
