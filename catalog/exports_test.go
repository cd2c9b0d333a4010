package catalog

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ctxmem/ctxmemd/tiering"
)

// TestExportMapAtomicRoundTrip: a saved map loads back, the directory
// holds nothing but the map, and bad versions or JSON are refused.
func TestExportFileAtomicRoundTrip(t *testing.T) {
	dir := t.TempDir()
	doc, err := LoadExports(dir)
	if err != nil || len(doc.Exports) != 0 {
		t.Fatalf("empty dir: %+v %v", doc, err)
	}
	doc.Exports["x"] = ExportEntry{ID: 42, Namespace: "nbd"}
	if err := doc.Save(dir); err != nil {
		t.Fatal(err)
	}
	got, err := LoadExports(dir)
	if err != nil || got.Exports["x"].ID != 42 {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 || ents[0].Name() != ExportFile {
		t.Fatalf("directory holds %v, want only %s", ents, ExportFile)
	}
	if err := os.WriteFile(filepath.Join(dir, ExportFile), []byte(`{"version": 9}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadExports(dir); err == nil {
		t.Fatal("unknown version accepted")
	}
	if err := os.WriteFile(filepath.Join(dir, ExportFile), []byte(`{`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadExports(dir); err == nil {
		t.Fatal("corrupt file accepted")
	}
}

// TestExportOrphans: only empty objects of the kind that no entry names.
func TestExportOrphans(t *testing.T) {
	m := ExportMap{Exports: map[string]ExportEntry{"a": {ID: 1}}}
	objs := []tiering.ObjectInfo{
		{ID: 1, Kind: tiering.KindNBD},
		{ID: 2, Kind: tiering.KindNBD},
		{ID: 3, Kind: tiering.KindNBD, Size: 1},
		{ID: 4, Kind: "fusefs"},
	}
	if got := m.Orphans(objs, tiering.KindNBD); !slices.Equal(got, []tiering.ObjectID{2}) {
		t.Fatalf("orphans %v, want [2]", got)
	}
}
