package catalog

import (
	"encoding/binary"
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// Snapshot is the whole content of a tree database, read at mount to
// reconcile it with the store (a later version loads entries on demand
// instead).
type Snapshot struct {
	// NextIno is the recorded next inode number (0 if none); MaxIno the
	// largest inode number of a node record.
	NextIno, MaxIno uint64
	// Namespaces are the namespace records by name.
	Namespaces map[string]NSRecord
	// Nodes are the node records by inode number.
	Nodes map[uint64]Record
	// Children are each directory's entries by parent inode number, in
	// name (byte) order.
	Children map[uint64][]Child
	// Xattrs are the extended attributes by inode number and name.
	Xattrs map[uint64]map[string][]byte
}

// Child is one directory entry of a Snapshot.
type Child struct {
	Name string
	Ino  uint64
}

// Load reads the whole database. Errors: a namespace, node or entry
// record that does not parse.
func (d *DB) Load() (*Snapshot, error) {
	l := &Snapshot{
		Namespaces: map[string]NSRecord{},
		Nodes:      map[uint64]Record{},
		Children:   map[uint64][]Child{},
		Xattrs:     map[uint64]map[string][]byte{},
	}
	err := d.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketMeta).Get(keyNextIno); len(v) == 8 {
			l.NextIno = binary.BigEndian.Uint64(v)
		}
		err := tx.Bucket(bucketNS).ForEach(func(k, v []byte) error {
			var r NSRecord
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("namespace record %q: %w", k, err)
			}
			l.Namespaces[string(k)] = r
			return nil
		})
		if err != nil {
			return err
		}
		err = tx.Bucket(bucketNodes).ForEach(func(k, v []byte) error {
			r, err := DecodeRecord(v)
			if err != nil || len(k) != 8 {
				return fmt.Errorf("node record %x: %v", k, err)
			}
			ino := binary.BigEndian.Uint64(k)
			l.Nodes[ino] = r
			l.MaxIno = max(l.MaxIno, ino)
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
			l.Children[p] = append(l.Children[p], Child{string(k[8:]), binary.BigEndian.Uint64(v)})
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
			m := l.Xattrs[ino]
			if m == nil {
				m = map[string][]byte{}
				l.Xattrs[ino] = m
			}
			m[string(k[8:])] = append([]byte(nil), v...)
			return nil
		})
	})
	return l, err
}
