package tiering

import (
	"bytes"
	"context"
	"encoding/json"
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

	raw := func() []byte {
		db, err := bolt.Open(filepath.Join(dir, "meta.db"), 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var v []byte
		_ = db.View(func(tx *bolt.Tx) error {
			v = bytes.Clone(tx.Bucket(bucketObjects).Get(idKey(id)))
			return nil
		})
		return v
	}
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
	db, err := bolt.Open(filepath.Join(dir, "meta.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketObjects).Put(idKey(id), js) }); err != nil {
		t.Fatal(err)
	}
	db.Close()

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
