package main

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/ctxmem/ctxmemd/config"
	"github.com/ctxmem/ctxmemd/tiering/g4"
)

// TestG4AutoLeavesRoomForG3: g4_size auto is 80% of a local G4's
// filesystem less g3_size when G3 is on the same filesystem (before, G4's
// bound ignored G3: on a small disk the disk filled below it, G4 never
// evicted, and G3's reclaim dropped the newest files), at least a tenth
// of the filesystem, and the whole 80% when G3 is absent.
func TestG4AutoLeavesRoomForG3(t *testing.T) {
	dir := t.TempDir()
	g3dir, g4dir := filepath.Join(dir, "g3"), filepath.Join(dir, "g4")
	for _, p := range []string{g3dir, g4dir} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	full, fsSize, err := g4.AutoCapacity(g4dir)
	if err != nil {
		t.Fatal(err)
	}
	capFor := func(g3 int64) int64 {
		t.Helper()
		d := &daemon{cfg: config.Config{G4: "file://" + g4dir, G4Size: config.G4SizeAuto, G3Dir: g3dir, G3Size: g3},
			log: slog.New(slog.NewTextHandler(io.Discard, nil))}
		n, err := d.g4Capacity()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if got := capFor(0); got != full {
		t.Errorf("no G3: g4_size auto = %d; want 80%% of the filesystem, %d", got, full)
	}
	g3 := full / 4
	if got := capFor(g3); got != full-g3 {
		t.Errorf("G3 of %d on the same filesystem: g4_size auto = %d; want %d", g3, got, full-g3)
	}
	if got := capFor(full); got != fsSize/10 {
		t.Errorf("G3 as large as G4's share: g4_size auto = %d; want a tenth of the filesystem, %d", got, fsSize/10)
	}
}
