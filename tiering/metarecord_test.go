package tiering

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// Object records are written in the binary form (about 30 bytes for a
// one-run record); a data directory whose records are JSON (earlier
// builds) opens with every object and its bytes, and a record rewritten
// after that is binary.
func TestObjectRecordsBinaryJSONStillRead(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	g3 := newMemTier("G3", 0)
	s := openTest(t, dir, g3, nil, 16<<20)
	id, err := s.Create("kv", 4096, "file")
	if err != nil {
		t.Fatal(err)
	}
	want := pattern(7, 3*4096)
	if _, err := s.WriteAt(ctx, id, want, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	raw := func() []byte { return recordOf(t, dir, id, nil) }
	v := raw()
	if len(v) == 0 || v[0] != recordV1 || len(v) > 40 {
		t.Fatalf("record written: %d bytes %x, want the binary form (<= 40 bytes)", len(v), v)
	}
	rec, err := decodeObjectRecord(v)
	if err != nil || rec.Namespace != "kv" || rec.Size != int64(len(want)) || rec.State != stateClean || len(rec.Written) != 1 || rec.Written[0] != [2]uint32{0, 2} {
		t.Fatalf("binary record decodes to %+v, %v", rec, err)
	}
	// As an earlier build wrote it: JSON.
	js, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("one-run record: %d bytes binary, %d bytes JSON", len(v), len(js))
	recordOf(t, dir, id, js)

	s = openTest(t, dir, g3, nil, 16<<20)
	got := make([]byte, len(want))
	if n, err := s.ReadAt(ctx, id, got, 0); err != nil || n != len(want) || !bytes.Equal(got, want) {
		t.Fatalf("object of a JSON record after restart: n=%d err=%v", n, err)
	}
	if _, err := s.WriteAt(ctx, id, pattern(8, 4096), 3*4096); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if v := raw(); len(v) == 0 || v[0] != recordV1 {
		t.Fatalf("rewritten record is not binary: %q", v)
	}
}

// A binary record damaged on disk (cut short, or an unknown format byte)
// makes its object lost at the next open: it is never served, and the
// other objects are.
func TestObjectRecordDamagedIsLost(t *testing.T) {
	dir := t.TempDir()
	g3 := newMemTier("G3", 0)
	s := openTest(t, dir, g3, nil, 16<<20)
	const n = 2 * recBS
	ids := []ObjectID{writeObject(t, s, "kv", "file", 9, n), writeObject(t, s, "kv", "file", 9, n), writeObject(t, s, "kv", "file", 9, n)}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	v := recordOf(t, dir, ids[0], nil)
	recordOf(t, dir, ids[0], v[:len(v)-3])                           // cut short
	recordOf(t, dir, ids[1], append([]byte{recordV1 + 1}, v[1:]...)) // a format this build does not know

	s = openTest(t, dir, g3, nil, 16<<20)
	defer s.Close()
	for _, id := range ids[:2] {
		if _, err := s.Stat(id); !errors.Is(err, ErrNotExist) {
			t.Fatalf("object %d of a damaged record: %v, want ErrNotExist", id, err)
		}
	}
	if got, err := readAll(s, ids[2], n); err != nil || !bytes.Equal(got, pattern(9, n)) {
		t.Fatalf("intact object beside damaged records: %d bytes, %v", len(got), err)
	}
}

// recordOf returns object id's raw record in dir's meta.db, after putting
// v there when v is not nil.
func recordOf(t *testing.T, dir string, id ObjectID, v []byte) []byte {
	t.Helper()
	db, err := bolt.Open(filepath.Join(dir, "meta.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var out []byte
	if err := db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketObjects)
		if v != nil {
			if err := b.Put(idKey(id), v); err != nil {
				return err
			}
		}
		out = bytes.Clone(b.Get(idKey(id)))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestObjectRecordG4WinsRoundTrip: the G4-wins runs (flag 8) survive the
// binary form, and a record without them is encoded as before (no flag,
// no trailing runs).
func TestObjectRecordG4WinsRoundTrip(t *testing.T) {
	rec := objectRecord{Namespace: "kv", Kind: "file", Durability: DurabilityCache.String(), BlockSize: 65536, Size: 10 << 20,
		Gen: 3, State: stateClean, Written: [][2]uint32{{0, 159}}, G4Wins: [][2]uint32{{2, 4}, {9, 9}, {100, 120}}}
	v, err := encodeObjectRecord(&rec)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeObjectRecord(v)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.G4Wins) != 3 || got.G4Wins[0] != [2]uint32{2, 4} || got.G4Wins[1] != [2]uint32{9, 9} || got.G4Wins[2] != [2]uint32{100, 120} ||
		len(got.Written) != 1 || got.Written[0] != [2]uint32{0, 159} {
		t.Fatalf("decoded %+v", got)
	}
	plain := rec
	plain.G4Wins = nil
	w, err := encodeObjectRecord(&plain)
	if err != nil {
		t.Fatal(err)
	}
	if len(w) >= len(v) {
		t.Fatalf("a record without G4-wins runs is %d bytes, with them %d", len(w), len(v))
	}
	if got, err := decodeObjectRecord(w); err != nil || got.G4Wins != nil {
		t.Fatalf("record without G4-wins runs decodes to %+v, %v", got, err)
	}
	bad := rec
	bad.G4Wins = [][2]uint32{{5, 6}, {6, 7}}
	if _, err := encodeObjectRecord(&bad); err == nil {
		t.Fatal("overlapping G4-wins runs encoded")
	}
}
