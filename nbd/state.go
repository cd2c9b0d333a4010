package nbd

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/ctxmem/ctxmemd/tiering"
)

// StateFile is the name of the file, in Options.StateDir, that maps export
// names to the ids of their objects in the tiering core, so that a restart
// serves the same bytes under the same name.
//
// Format (JSON, version 1):
//
//	{"version": 1, "exports": {"NAME": {"id": 7, "namespace": "nbd", "created": "RFC 3339"}}}
//
// The file is replaced atomically (write to a temporary file in the same
// directory, fsync, rename, fsync the directory), so a crash leaves either
// the old or the new mapping. Entries of exports no longer configured are
// kept: configuring the name again serves its bytes again.
const StateFile = "nbd-exports.json"

const stateVersion = 1

type stateEntry struct {
	ID        tiering.ObjectID `json:"id"`
	Namespace string           `json:"namespace"`
	Created   time.Time        `json:"created"`
}

type stateDoc struct {
	Version int                   `json:"version"`
	Exports map[string]stateEntry `json:"exports"`
}

// loadState reads dir/StateFile; a missing file is an empty mapping.
func loadState(dir string) (stateDoc, error) {
	doc := stateDoc{Version: stateVersion, Exports: map[string]stateEntry{}}
	b, err := os.ReadFile(filepath.Join(dir, StateFile))
	if errors.Is(err, fs.ErrNotExist) {
		return doc, nil
	}
	if err != nil {
		return doc, fmt.Errorf("nbd: read export map: %w", err)
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return doc, fmt.Errorf("nbd: parse export map %s: %w", filepath.Join(dir, StateFile), err)
	}
	if doc.Version != stateVersion {
		return doc, fmt.Errorf("nbd: export map %s: version %d, want %d", filepath.Join(dir, StateFile), doc.Version, stateVersion)
	}
	if doc.Exports == nil {
		doc.Exports = map[string]stateEntry{}
	}
	return doc, nil
}

// saveState writes doc to dir/StateFile atomically and durably.
func saveState(dir string, doc stateDoc) error {
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("nbd: state dir: %w", err)
	}
	f, err := os.CreateTemp(dir, StateFile+".tmp*")
	if err != nil {
		return fmt.Errorf("nbd: write export map: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after the rename
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("nbd: write export map: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("nbd: fsync export map: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("nbd: write export map: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, StateFile)); err != nil {
		return fmt.Errorf("nbd: install export map: %w", err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("nbd: fsync state dir: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("nbd: fsync state dir: %w", err)
	}
	return nil
}
