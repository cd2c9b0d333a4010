package tiering

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// TestLegacyRecordsLoadByKind: a data dir written before durability
// classes existed has records with a kind and no durability field. After
// the upgrade an "nbd" object is DurabilityDevice (a clean one keeps its
// class, a dirty one is rebuilt from its blocks below G2 instead of
// dropped, as the old code did for exports) and any other kind is
// DurabilityCache (a dirty one is dropped). The next record written names
// the class, which then wins over the kind.
func TestLegacyRecordsLoadByKind(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	g3 := newMemTier("G3", 0)
	put := func(obj uint64, idx uint32, seed uint64) {
		k := tier.Key{Namespace: "vol", Object: obj, Index: idx, Gen: 1}
		if err := g3.Put(ctx, k, pattern(seed, 4096)); err != nil {
			t.Fatal(err)
		}
	}
	put(1, 0, 1)
	put(1, 1, 2)
	put(2, 0, 3)
	put(3, 0, 4)
	put(4, 0, 5)
	// The records exactly as the previous version wrote them (no
	// "durability" field).
	const created = `"created":"2026-01-02T03:04:05.000000006Z"`
	old := map[ObjectID]string{
		1: `{"ns":"vol","kind":"nbd","bs":4096,"size":8192,"gen":1,` + created + `,"state":"clean","written":[[0,1]]}`,
		2: `{"ns":"vol","kind":"file","bs":4096,"size":4096,"gen":1,` + created + `,"state":"clean","written":[[0,0]]}`,
		3: `{"ns":"vol","kind":"nbd","bs":4096,"size":4096,"gen":1,` + created + `,"state":"dirty"}`,
		4: `{"ns":"vol","kind":"file","bs":4096,"size":4096,"gen":1,` + created + `,"state":"dirty"}`,
	}
	m, err := openMeta(filepath.Join(dir, "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.db.Update(func(tx *bolt.Tx) error {
		for id, v := range old {
			if err := tx.Bucket(bucketObjects).Put(idKey(id), []byte(v)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	m.close()

	s := openTest(t, dir, g3, nil, 16<<20)
	for id, want := range map[ObjectID]Durability{1: DurabilityDevice, 2: DurabilityCache, 3: DurabilityDevice} {
		info, err := s.Stat(id)
		if err != nil || info.Durability != want {
			t.Fatalf("object %d after upgrade: %+v %v, want class %v", id, info, err, want)
		}
	}
	if _, err := s.Stat(4); !errors.Is(err, ErrNotExist) {
		t.Fatalf("dirty legacy file survived: %v", err)
	}
	got := make([]byte, 4096)
	if n, err := s.ReadAt(ctx, 3, got, 0); err != nil || n != 4096 || !bytes.Equal(got, pattern(4, 4096)) {
		t.Fatalf("dirty legacy export rebuilt: n=%d err=%v", n, err)
	}
	for _, c := range []struct {
		k    tier.Key
		want Durability
	}{
		{tier.Key{Namespace: "vol", Object: 1, Index: 1, Gen: 1}, DurabilityDevice},
		{tier.Key{Namespace: "vol", Object: 1, Index: 1, Gen: 2}, DurabilityCache},   // not its generation
		{tier.Key{Namespace: "other", Object: 1, Index: 1, Gen: 1}, DurabilityCache}, // not its namespace
		{tier.Key{Namespace: "vol", Object: 2, Index: 0, Gen: 1}, DurabilityCache},   // a file
		{tier.Key{Namespace: "vol", Object: 99, Index: 0, Gen: 1}, DurabilityCache},  // no such object
		{tier.Key{Namespace: "vol", Object: 3, Index: 0, Gen: 1}, DurabilityDevice},  // rebuilt export
	} {
		if got := s.KeyDurability(c.k); got != c.want {
			t.Errorf("KeyDurability(%v) = %v, want %v", c.k, got, c.want)
		}
	}
	// The classes act: with G3 failing every put, the legacy file is lost
	// at its first failed write-back while the legacy export's write-back
	// is retried until G3 takes it.
	g3.mu.Lock()
	g3.failPut = errors.New("disk dead")
	g3.mu.Unlock()
	s.WriteAt(ctx, 2, pattern(8, 4096), 0)
	s.WriteAt(ctx, 1, pattern(9, 4096), 4096)
	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		if _, err := s.Stat(2); errors.Is(err, ErrNotExist) {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatal("legacy file survived a dead G3")
		}
	}
	time.Sleep(300 * time.Millisecond) // a few retries of the export's block
	if _, err := s.Stat(1); err != nil {
		t.Fatalf("legacy export dropped by a failing write-back: %v", err)
	}
	g3.mu.Lock()
	g3.failPut = nil
	g3.mu.Unlock()
	if err := s.Flush(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if n, err := s.ReadAt(ctx, 1, got, 4096); err != nil || n != 4096 || !bytes.Equal(got, pattern(9, 4096)) {
		t.Fatalf("export after the retried write-back: n=%d err=%v", n, err)
	}

	// New code: a cache-class object labelled "nbd" stays cache across a
	// restart (the field wins over the legacy rule).
	label, err := s.Create("vol", 4096, KindNBD)
	if err != nil {
		t.Fatal(err)
	}
	s.WriteAt(ctx, label, pattern(6, 4096), 0)
	// A legacy record stays as it is until the object's record is next
	// written (object 1 was rewritten above: its write made it dirty, the
	// flush recorded it clean).
	for _, id := range []ObjectID{1, 3, label} {
		if err := s.Flush(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	m, err = openMeta(filepath.Join(dir, "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	recs := map[ObjectID]string{}
	if _, err := m.load(func(id ObjectID, r *objectRecord) { recs[id] = r.Durability }); err != nil {
		t.Fatal(err)
	}
	m.close()
	if recs[1] != "device" || recs[3] != "device" || recs[label] != "cache" {
		t.Fatalf("durability in records after the upgrade: %v", recs)
	}
	s = openTest(t, dir, g3, nil, 16<<20)
	defer s.Close()
	for id, want := range map[ObjectID]Durability{1: DurabilityDevice, 3: DurabilityDevice, label: DurabilityCache} {
		if info, err := s.Stat(id); err != nil || info.Durability != want {
			t.Fatalf("object %d after a second restart: %+v %v, want class %v", id, info, err, want)
		}
	}
}

// TestDurabilityClass: the class is fixed at CreateWith and reported by
// Stat, Objects and Residency; an unknown class is refused at create and
// in a record.
func TestDurabilityClass(t *testing.T) {
	s := openTest(t, t.TempDir(), newMemTier("G3", 0), nil, 16<<20)
	defer s.Close()
	dev, err := s.CreateWith("vol", 4096, CreateOptions{Kind: "x", Durability: DurabilityDevice})
	if err != nil {
		t.Fatal(err)
	}
	kv, _ := s.Create("kv", 4096, "file")
	if info, _ := s.Stat(dev); info.Durability != DurabilityDevice || info.Kind != "x" {
		t.Fatalf("device object: %+v", info)
	}
	if r, _ := s.Residency(dev); r.Durability != DurabilityDevice {
		t.Fatalf("device residency: %+v", r)
	}
	for _, o := range s.Objects() {
		if o.ID == kv && o.Durability != DurabilityCache {
			t.Fatalf("Create made %v", o.Durability)
		}
	}
	if _, err := s.CreateWith("vol", 4096, CreateOptions{Durability: DurabilityDevice + 1}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("unknown class: %v", err)
	}
	for _, name := range []string{"cache", "device"} {
		d, err := ParseDurability(name)
		if err != nil || d.String() != name {
			t.Fatalf("ParseDurability(%q) = %v, %v", name, d, err)
		}
	}
	v, _ := json.Marshal(objectRecord{Namespace: "a", BlockSize: 4096, State: stateClean, Durability: "tape"})
	if _, err := decodeObjectRecord(v); err == nil {
		t.Fatal("record of an unknown class accepted")
	}
}
