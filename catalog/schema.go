package catalog

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Tree database layout (bbolt, one file per mount):
//
//	meta    "version" → 1; "next_ino" → u64 (big-endian);
//	        "applied_seq" → u64 (last journal record in the database)
//	ns      namespace name → JSON NSRecord
//	nodes   ino (u64 BE) → node record (see Record.Encode)
//	dirents parent ino (u64 BE) ‖ name → child ino (u64 BE)
//	xattrs  ino (u64 BE) ‖ name → value
//
// Sizes are not stored: they come from the store. st_nlink and directory
// parents are derived from dirents.
var (
	bucketMeta    = []byte("meta")
	bucketNS      = []byte("ns")
	bucketNodes   = []byte("nodes")
	bucketDirents = []byte("dirents")
	bucketXattrs  = []byte("xattrs")
	keyVersion    = []byte("version")
	keyNextIno    = []byte("next_ino")
	keyAppliedSeq = []byte("applied_seq")
)

const schemaVersion = 1

// Kind is the type of a tree node, as stored in its record.
type Kind uint8

// The node kinds. Any other value in a record makes it invalid.
const (
	KindDir     Kind = 1
	KindFile    Kind = 2
	KindSymlink Kind = 3
)

// Identity is the part of a namespace's configuration that must match
// between mounts for its recorded files to be reused: which KV bytes the
// namespace holds. Its JSON form is stored in NSRecord.
type Identity struct {
	ModelID           string `json:"model_id,omitempty"`
	ModelRevision     string `json:"model_revision,omitempty"`
	TokenizerRevision string `json:"tokenizer_revision,omitempty"`
	KVDType           string `json:"kv_dtype,omitempty"`
	LayoutVersion     string `json:"layout_version,omitempty"`
	Tenant            string `json:"tenant,omitempty"`
	// BlockSize is the namespace's object block size in bytes.
	BlockSize int `json:"block_size"`
}

// NSRecord is what the database records of a namespace (ns bucket, JSON):
// the inode of its directory and the identity it was served with.
type NSRecord struct {
	Ino      uint64   `json:"ino"`
	Identity Identity `json:"identity"`
}

// Record is the persistent part of a node (nodes bucket). Times are unix
// nanoseconds; Mode holds the permission bits (07777); Obj is the object
// id of a file (0 otherwise); Target is a symlink's target.
type Record struct {
	Kind                Kind
	Mode, UID, GID      uint32
	Atime, Mtime, Ctime int64
	Obj                 uint64
	Target              string
}

const recordVersion = 1

// recordLen is the length of a record without its target.
const recordLen = 46

// Encode serializes r: version(1) kind(1) mode(4) uid(4) gid(4) atime(8)
// mtime(8) ctime(8) obj(8) target(rest), integers little-endian.
func (r Record) Encode() []byte {
	b := make([]byte, recordLen, recordLen+len(r.Target))
	b[0] = recordVersion
	b[1] = byte(r.Kind)
	le := binary.LittleEndian
	le.PutUint32(b[2:], r.Mode)
	le.PutUint32(b[6:], r.UID)
	le.PutUint32(b[10:], r.GID)
	le.PutUint64(b[14:], uint64(r.Atime))
	le.PutUint64(b[22:], uint64(r.Mtime))
	le.PutUint64(b[30:], uint64(r.Ctime))
	le.PutUint64(b[38:], r.Obj)
	return append(b, r.Target...)
}

// DecodeRecord parses what Record.Encode wrote. It fails on a short
// record, an unknown version or an unknown kind.
func DecodeRecord(b []byte) (Record, error) {
	if len(b) < recordLen || b[0] != recordVersion {
		return Record{}, errors.New("bad node record")
	}
	le := binary.LittleEndian
	r := Record{
		Kind:   Kind(b[1]),
		Mode:   le.Uint32(b[2:]),
		UID:    le.Uint32(b[6:]),
		GID:    le.Uint32(b[10:]),
		Atime:  int64(le.Uint64(b[14:])),
		Mtime:  int64(le.Uint64(b[22:])),
		Ctime:  int64(le.Uint64(b[30:])),
		Obj:    le.Uint64(b[38:]),
		Target: string(b[46:]),
	}
	if r.Kind < KindDir || r.Kind > KindSymlink {
		return r, fmt.Errorf("bad node kind %d", r.Kind)
	}
	return r, nil
}

// DB is an open tree database. Its methods are safe for concurrent use
// (bbolt serialises writers).
type DB struct {
	db   *bolt.DB
	path string
}

// Open opens (creating if needed) the tree database at path. It is opened
// NoSync: a write reaches the OS page cache (it survives kill -9 of the
// daemon) and is fdatasync'ed only by Sync (fsync, fsyncdir), so it may
// be lost in a power failure; KV cache files may vanish but never be
// corrupted, and a create must not cost a disk flush. A database another
// process holds is refused after one second.
func Open(path string) (*DB, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout:        time.Second,
		NoSync:         true,
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
	})
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("catalog: tree database %s is in use by another process", path)
		}
		return nil, fmt.Errorf("catalog: open tree database: %w", err)
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
		return nil, fmt.Errorf("catalog: init tree database: %w", err)
	}
	return &DB{db: db, path: path}, nil
}

// Path returns the file the database was opened from; the journal's log
// files are named after it.
func (d *DB) Path() string { return d.path }

// Sync fdatasyncs the database: what was written survives power loss.
func (d *DB) Sync() error { return d.db.Sync() }

// Close closes the database (without Sync).
func (d *DB) Close() error { return d.db.Close() }

// Write applies ops to the database in one transaction, bypassing the
// journal (for reconciliation at mount and for namespace records, which
// must be in the database before anything inside them is logged). Within
// one Write, a later op on the same key wins.
func (d *DB) Write(ops ...Op) error {
	b := newBatch()
	for _, o := range ops {
		b.add(o)
	}
	return d.db.Update(b.write)
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

// nsValue is the stored form of r.
func nsValue(r NSRecord) []byte {
	v, err := json.Marshal(r)
	if err != nil {
		panic(err) // strings and integers only
	}
	return v
}

// ErrNamespaceRecorded is returned (wrapped) by DB.AddNamespace when the
// database already records a namespace of that name.
var ErrNamespaceRecorded = errors.New("namespace already recorded")

// AddNamespace records a new namespace name (its identity and directory
// root) and fdatasyncs the database, so that it is durable before
// anything inside it is served or logged. Errors: ErrNamespaceRecorded
// (nothing written) when the name is recorded already, as by an earlier
// mount; database errors.
func (d *DB) AddNamespace(name string, id Identity, root Node) error {
	b := newBatch()
	b.add(PutNamespace(name, NSRecord{Ino: root.Ino(), Identity: id}))
	b.add(PutNode(root))
	err := d.db.Update(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketNS).Get([]byte(name)) != nil {
			return fmt.Errorf("namespace %q: %w", name, ErrNamespaceRecorded)
		}
		return b.write(tx)
	})
	if err != nil {
		return err
	}
	return d.db.Sync()
}
