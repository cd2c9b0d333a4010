package fusefs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Tree database layout (bbolt, one file per mount):
//
//	meta    "version" → 1; "next_ino" → u64 (big-endian)
//	ns      namespace name → JSON nsRecord
//	nodes   ino (u64 BE) → node record (see encodeNode)
//	dirents parent ino (u64 BE) ‖ name → child ino (u64 BE)
//	xattrs  ino (u64 BE) ‖ name → value
//
// Sizes are not stored: they come from Backend.Stat (Backend.Objects at
// mount). st_nlink and directory parents are derived from dirents.
var (
	bucketMeta    = []byte("meta")
	bucketNS      = []byte("ns")
	bucketNodes   = []byte("nodes")
	bucketDirents = []byte("dirents")
	bucketXattrs  = []byte("xattrs")
	keyVersion    = []byte("version")
	keyNextIno    = []byte("next_ino")
)

const schemaVersion = 1

// nsRecord is the ns bucket value.
type nsRecord struct {
	Ino      uint64   `json:"ino"`
	Identity identity `json:"identity"`
}

// openTreeDB opens (creating if needed) the tree database. NoSync: a
// commit reaches the OS page cache (it survives kill -9 of the daemon) but
// is fdatasync'ed only on fsync/fsyncdir (journal.sync), so it may be lost
// in a power failure; KV cache files may vanish but never be corrupted, and
// a create must not cost a disk flush.
func openTreeDB(path string) (*bolt.DB, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout:        time.Second,
		NoSync:         true,
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
	})
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("fusefs: tree database %s is in use by another process", path)
		}
		return nil, fmt.Errorf("fusefs: open tree database: %w", err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketMeta, bucketNS, bucketNodes, bucketDirents, bucketXattrs} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		m := tx.Bucket(bucketMeta)
		if v := m.Get(keyVersion); v != nil && binary.BigEndian.Uint64(v) != schemaVersion {
			return fmt.Errorf("tree database schema %d, want %d", binary.BigEndian.Uint64(v), schemaVersion)
		}
		return m.Put(keyVersion, u64(schemaVersion))
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("fusefs: init tree database: %w", err)
	}
	return db, nil
}

func u64(v uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, v)
	return b
}

func direntKey(parent uint64, name string) []byte {
	k := make([]byte, 8+len(name))
	binary.BigEndian.PutUint64(k, parent)
	copy(k[8:], name)
	return k
}

// nodeRecord is a decoded nodes-bucket value.
type nodeRecord struct {
	kind                nodeKind
	mode, uid, gid      uint32
	atime, mtime, ctime int64
	obj                 uint64
	target              string
}

const nodeRecordVersion = 1

// encodeNode serializes n's persistent attributes:
// version(1) kind(1) mode(4) uid(4) gid(4) atime(8) mtime(8) ctime(8)
// obj(8) target(rest), integers little-endian, times in unix ns.
func encodeNode(n *node) []byte {
	b := make([]byte, 46, 46+len(n.target))
	b[0] = nodeRecordVersion
	b[1] = byte(n.kind)
	n.mu.Lock()
	le := binary.LittleEndian
	le.PutUint32(b[2:], n.mode)
	le.PutUint32(b[6:], n.uid)
	le.PutUint32(b[10:], n.gid)
	le.PutUint64(b[14:], uint64(n.atime))
	le.PutUint64(b[22:], uint64(n.mtime))
	le.PutUint64(b[30:], uint64(n.ctime))
	n.mu.Unlock()
	le.PutUint64(b[38:], uint64(n.obj))
	return append(b, n.target...)
}

func decodeNode(b []byte) (nodeRecord, error) {
	if len(b) < 46 || b[0] != nodeRecordVersion {
		return nodeRecord{}, errors.New("bad node record")
	}
	le := binary.LittleEndian
	r := nodeRecord{
		kind:   nodeKind(b[1]),
		mode:   le.Uint32(b[2:]),
		uid:    le.Uint32(b[6:]),
		gid:    le.Uint32(b[10:]),
		atime:  int64(le.Uint64(b[14:])),
		mtime:  int64(le.Uint64(b[22:])),
		ctime:  int64(le.Uint64(b[30:])),
		obj:    le.Uint64(b[38:]),
		target: string(b[46:]),
	}
	if r.kind < kindDir || r.kind > kindSymlink {
		return r, fmt.Errorf("bad node kind %d", r.kind)
	}
	return r, nil
}

// op is one change to the tree database.
type op struct {
	kind   opKind
	n      *node
	parent uint64
	name   string
	child  uint64
	value  []byte
}

type opKind uint8

const (
	opPutNode opKind = iota
	opDelNode
	opPutDirent
	opDelDirent
	opPutXattr
	opDelXattr
)

func putNode(n *node) op { return op{kind: opPutNode, n: n} }
func delNode(n *node) op { return op{kind: opDelNode, n: n} }
func putDirent(p *node, name string, c *node) op {
	return op{kind: opPutDirent, parent: p.ino, name: name, child: c.ino}
}
func delDirent(p *node, name string) op { return op{kind: opDelDirent, parent: p.ino, name: name} }
func putXattr(n *node, name string, v []byte) op {
	return op{kind: opPutXattr, parent: n.ino, name: name, value: v}
}
func delXattr(n *node, name string) op { return op{kind: opDelXattr, parent: n.ino, name: name} }

type xkey struct {
	ino  uint64
	name string
}

type dkey struct {
	parent uint64
	name   string
}

// kv is a key and its new value (nil: delete).
type kv struct{ k, v []byte }

// putSorted applies kvs to b in key order; onDelete runs after each
// deletion.
func putSorted(b *bolt.Bucket, kvs []kv, onDelete func(k []byte) error) error {
	slices.SortFunc(kvs, func(a, b kv) int { return bytes.Compare(a.k, b.k) })
	for _, x := range kvs {
		if x.v != nil {
			if err := b.Put(x.k, x.v); err != nil {
				return err
			}
			continue
		}
		if err := b.Delete(x.k); err != nil {
			return err
		}
		if onDelete != nil {
			if err := onDelete(x.k); err != nil {
				return err
			}
		}
	}
	return nil
}

// deletePrefix removes every key of b starting with prefix.
func deletePrefix(b *bolt.Bucket, prefix []byte) error {
	c := b.Cursor()
	for k, _ := c.Seek(prefix); k != nil && len(k) >= len(prefix) && string(k[:len(prefix)]) == string(prefix); k, _ = c.Seek(prefix) {
		if err := c.Delete(); err != nil {
			return err
		}
	}
	return nil
}
