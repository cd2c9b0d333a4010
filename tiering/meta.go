package tiering

import (
	"encoding/binary"
	"fmt"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// Object records persist in a bbolt file (DataDir/meta.db), bucket
// "objects", key = object id (8 bytes big endian), value = objectRecord in
// the binary form of metarecord.go (JSON in earlier builds, still read).
// A record is written:
//   - never at Create: an object without a record does not survive a
//     crash, exactly as if it were recorded dirty;
//   - when a recorded-clean object becomes dirty (state dirty), before the
//     write, truncate or discard that dirtied it returns;
//   - when the object has had no dirty block for cleanDelay (state clean,
//     with the list of written blocks; many objects per commit), or at once
//     on Flush and Close;
//   - at Delete (removed) and SetPinned.
//
// On Open, a record still marked dirty means the process died with bytes
// that never reached G3/G4: a DurabilityCache object is dropped whole (KV
// cache may be lost, never served wrong); a DurabilityDevice object is
// rebuilt from the blocks of its generation found below G2
// (recoverDevice). A clean record lists every written block; each must be
// found in G3 or G4 or the object is lost. Unlisted blocks are holes.
// Where G3 and G4 both hold a block, G3's copy wins (it was written
// later), except for the blocks the record lists as G4-wins
// (objectRecord.G4Wins: written back to G4 while G3 was down or hung, the
// older G3 copy not yet deleted), which must be in G4, and whose G3 copy
// is deleted.
//
// The record carries the object's durability class by name
// ("durability": "cache" or "device"). A record written before classes
// existed has no such field: it is DurabilityDevice if its kind is "nbd"
// (such objects were never dropped then), DurabilityCache otherwise
// (recordDurability), and the next record written for the object names
// its class.
//
// The database runs with NoSync: records survive kill -9 (they are in the
// page cache) but not a power cut, which can lose recent records; recovery
// then drops objects whose blocks it cannot account for.

var (
	bucketObjects = []byte("objects")
	bucketMeta    = []byte("meta")
	keyNextID     = []byte("next_id")
)

// appendFill is the bbolt fill percent of the objects bucket: keys are
// object ids, handed out in increasing order, so records are appended and
// page splits at bbolt's default (half full) would leave the bucket's
// pages half empty.
const appendFill = 0.9

// idBatch is how many object ids one metadata write reserves.
const idBatch = 1024

const (
	stateClean = "clean"
	stateDirty = "dirty"
)

type objectRecord struct {
	Namespace string `json:"ns"`
	Kind      string `json:"kind,omitempty"`
	// Durability is the class's name (Durability.String); absent in
	// records of versions before classes existed (recordDurability).
	Durability string    `json:"durability,omitempty"`
	BlockSize  int       `json:"bs"`
	Size       int64     `json:"size"`
	Gen        uint64    `json:"gen"`
	Pinned     bool      `json:"pinned,omitempty"`
	Created    time.Time `json:"created"`
	State      string    `json:"state"`
	// Written lists written block indexes as [first, last] runs.
	Written [][2]uint32 `json:"written,omitempty"`
	// G4Wins lists, as [first, last] runs, the written blocks of a clean
	// record whose G3 copy is older than their G4 one (written back to G4
	// while G3 was down or hung, the old G3 copy not deleted yet): recovery
	// takes the G4 copy and deletes the G3 one instead of G3 winning.
	G4Wins [][2]uint32 `json:"g4wins,omitempty"`
}

func idKey(id ObjectID) []byte {
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], uint64(id))
	return k[:]
}

// toRuns compresses a set of block indexes into sorted [first,last] runs.
func toRuns(idx []uint32) [][2]uint32 {
	if len(idx) == 0 {
		return nil
	}
	sort.Slice(idx, func(i, j int) bool { return idx[i] < idx[j] })
	var runs [][2]uint32
	start, prev := idx[0], idx[0]
	for _, v := range idx[1:] {
		if v == prev+1 {
			prev = v
			continue
		}
		runs = append(runs, [2]uint32{start, prev})
		start, prev = v, v
	}
	return append(runs, [2]uint32{start, prev})
}

type metaDB struct {
	db *bolt.DB
}

func openMeta(path string) (*metaDB, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second, NoSync: true})
	if err != nil {
		return nil, fmt.Errorf("open metadata %s: %w (is another ctxmemd using this data dir?)", path, err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		if _, err := tx.CreateBucketIfNotExists(bucketMeta); err != nil {
			return err
		}
		_, err := tx.CreateBucketIfNotExists(bucketObjects)
		return err
	}); err != nil {
		db.Close()
		return nil, fmt.Errorf("init metadata %s: %w", path, err)
	}
	return &metaDB{db: db}, nil
}

func (m *metaDB) put(id ObjectID, rec *objectRecord) error {
	v, err := encodeObjectRecord(rec)
	if err != nil {
		return err
	}
	return m.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketObjects)
		b.FillPercent = appendFill
		return b.Put(idKey(id), v)
	})
}

// putMany writes several records in one transaction.
func (m *metaDB) putMany(recs map[ObjectID]*objectRecord) error {
	return m.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketObjects)
		b.FillPercent = appendFill
		for id, rec := range recs {
			v, err := encodeObjectRecord(rec)
			if err != nil {
				return err
			}
			if err := b.Put(idKey(id), v); err != nil {
				return err
			}
		}
		return nil
	})
}

func (m *metaDB) del(id ObjectID) error {
	return m.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketObjects).Delete(idKey(id))
	})
}

// load calls fn for every record; the highest id seen is returned.
func (m *metaDB) load(fn func(ObjectID, *objectRecord)) (ObjectID, error) {
	var maxID ObjectID
	err := m.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketObjects).ForEach(func(k, v []byte) error {
			if len(k) != 8 {
				return nil
			}
			id := ObjectID(binary.BigEndian.Uint64(k))
			if id > maxID {
				maxID = id
			}
			rec, err := decodeObjectRecord(v)
			if err != nil {
				// A record we cannot parse cannot be trusted: treat as lost.
				rec = objectRecord{State: "corrupt"}
			}
			fn(id, &rec)
			return nil
		})
	})
	return maxID, err
}

// decodeObjectRecord parses an objects-bucket value and checks what
// recovery relies on: a known state, a known durability class (or none,
// see recordDurability), a block size Create accepts, a
// non-negative size and written runs as toRuns makes them (first ≤ last,
// ascending, disjoint). Only a damaged or foreign value fails: put never
// writes one.
func decodeObjectRecord(v []byte) (objectRecord, error) {
	rec, err := parseObjectRecord(v)
	if err != nil {
		return objectRecord{}, err
	}
	bs := rec.BlockSize
	switch {
	case rec.State != stateClean && rec.State != stateDirty:
		return objectRecord{}, fmt.Errorf("object record: unknown state %q", rec.State)
	case bs < tier.MinBlockSize || bs > tier.MaxBlockSize || bs&(bs-1) != 0:
		return objectRecord{}, fmt.Errorf("object record: block size %d", bs)
	case rec.Size < 0:
		return objectRecord{}, fmt.Errorf("object record: size %d", rec.Size)
	}
	if rec.Durability != "" {
		if _, err := ParseDurability(rec.Durability); err != nil {
			return objectRecord{}, fmt.Errorf("object record: %w", err)
		}
	}
	for _, runs := range [...][][2]uint32{rec.Written, rec.G4Wins} {
		next := int64(0) // least index the next run may start at
		for _, r := range runs {
			if int64(r[0]) < next || r[0] > r[1] {
				return objectRecord{}, fmt.Errorf("object record: runs %v not ascending", runs)
			}
			next = int64(r[1]) + 1
		}
	}
	return rec, nil
}

func (m *metaDB) close() error { return m.db.Close() }

// reserveIDs persists a new high-water mark for object ids and returns the
// first id of the reserved range [first, first+idBatch). Ids are never
// reused, so blocks of a deleted object left in a tier can never be taken
// for blocks of a new one.
func (m *metaDB) reserveIDs(atLeast ObjectID) (ObjectID, error) {
	var first ObjectID
	err := m.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketMeta)
		next := ObjectID(1)
		if v := b.Get(keyNextID); len(v) == 8 {
			next = ObjectID(binary.BigEndian.Uint64(v))
		}
		if next < atLeast {
			next = atLeast
		}
		first = next
		return b.Put(keyNextID, idKey(next+idBatch))
	})
	return first, err
}
