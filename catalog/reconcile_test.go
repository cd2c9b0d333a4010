package catalog

import (
	"slices"
	"testing"

	"github.com/ctxmem/ctxmemd/tiering"
)

// TestReconcile plans a tree with one served namespace (a lost file, a
// hard link, a bad name, a second name of a directory, an unreachable
// record), one whose identity changed, and one no longer configured.
func TestReconcile(t *testing.T) {
	id := Identity{ModelID: "m", BlockSize: 4096}
	dir := Record{Kind: KindDir, Mode: 0o755}
	file := func(obj uint64) Record { return Record{Kind: KindFile, Mode: 0o644, Obj: obj} }
	l := &Snapshot{
		NextIno: 0, MaxIno: 40,
		Namespaces: map[string]NSRecord{
			"a":    {Ino: 10, Identity: id},
			"b":    {Ino: 20, Identity: Identity{ModelID: "old", BlockSize: 4096}},
			"gone": {Ino: 30, Identity: id},
		},
		Nodes: map[uint64]Record{
			10: dir, 11: dir, 12: file(100), 13: file(101), 14: file(102),
			20: dir, 21: file(200),
			30: dir, 31: file(300),
			40: file(400), // no entry reaches it
		},
		Children: map[uint64][]Child{
			10: {{"d", 11}, {"lost", 13}, {"x/y", 14}},
			11: {{"f", 12}, {"g", 12}, {"d2", 11}},
			20: {{"old", 21}},
			30: {{"kept", 31}},
		},
		Xattrs: map[uint64]map[string][]byte{12: {"user.k": []byte("v")}},
	}
	live := map[tiering.ObjectID]int64{100: 5, 102: 1, 200: 1, 300: 1, 400: 1, 999: 1}
	nss := []NamespaceConfig{{Name: "a", Identity: id, Mode: 0o777}, {Name: "b", Identity: id, Mode: 0o700}}
	p := Reconcile(l, live, nss, 7, testLogger())

	if !p.Roots[0].Reused || p.Roots[0].Ino != 10 || p.Roots[1].Reused || p.Roots[1].Ino != 41 || p.Roots[1].Mtime != 7 {
		t.Fatalf("roots %+v", p.Roots)
	}
	if p.NextIno != 42 {
		t.Errorf("next ino %d, want 42", p.NextIno)
	}
	var got []string
	for _, k := range p.Links {
		got = append(got, k.Name)
	}
	if want := []string{"d", "f", "g"}; !slices.Equal(got, want) {
		t.Errorf("links %v, want %v", got, want)
	}
	if p.Links[1].Xattrs == nil || p.Links[1].Ino != p.Links[2].Ino {
		t.Errorf("hard link or xattrs lost: %+v", p.Links)
	}
	if p.Removed != 1 {
		t.Errorf("removed %d, want 1 (the lost file)", p.Removed)
	}
	// Records dropped: 13 (lost), 14 (bad name), 20 and 21 (identity
	// changed), 40 (unreachable).
	if p.Dropped != 5 {
		t.Errorf("dropped %d records, want 5", p.Dropped)
	}
	orphans := slices.Sorted(slices.Values(p.Orphans))
	if want := []tiering.ObjectID{102, 200, 400, 999}; !slices.Equal(orphans, want) {
		t.Errorf("orphans %v, want %v", orphans, want)
	}

	// The plan's changes make a database that plans the same tree again.
	db, err := Open(t.TempDir() + "/tree.db")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Write(p.Ops...); err != nil {
		t.Fatal(err)
	}
	l2, err := db.Load()
	if err != nil {
		t.Fatal(err)
	}
	if r := l2.Namespaces["b"]; r.Ino != 41 || r.Identity != id {
		t.Errorf("namespace b recorded as %+v", r)
	}
	if rec := l2.Nodes[41]; rec.Kind != KindDir || rec.Mode != 0o700 || rec.Mtime != 7 {
		t.Errorf("namespace b directory recorded as %+v", rec)
	}
	if l2.NextIno != 42 {
		t.Errorf("next_ino %d recorded, want 42", l2.NextIno)
	}
}
