package catalog

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

// ExportFile is the name of the file, in the NBD state directory, that
// maps export names to the ids of their objects in the tiering core, so
// that a restart serves the same bytes under the same name.
//
// Format (JSON, version 1):
//
//	{"version": 1, "exports": {"NAME": {"id": 7, "namespace": "nbd", "created": "RFC 3339"}}}
//
// The file is replaced atomically (write to a temporary file in the same
// directory, fsync, rename, fsync the directory), so a crash leaves either
// the old or the new mapping. Entries of exports no longer configured are
// kept: configuring the name again serves its bytes again.
const ExportFile = "nbd-exports.json"

const exportMapVersion = 1

// ExportEntry is one export of an ExportMap: its object, the tiering
// namespace it was created in, and when.
type ExportEntry struct {
	ID        tiering.ObjectID `json:"id"`
	Namespace string           `json:"namespace"`
	Created   time.Time        `json:"created"`
}

// ExportMap is the NBD export table (ExportFile), by export name.
type ExportMap struct {
	Version int                    `json:"version"`
	Exports map[string]ExportEntry `json:"exports"`
}

// LoadExports reads dir/ExportFile; a missing file is an empty map.
// Errors: the file cannot be read, does not parse, or has another
// version.
func LoadExports(dir string) (ExportMap, error) {
	m := ExportMap{Version: exportMapVersion, Exports: map[string]ExportEntry{}}
	path := filepath.Join(dir, ExportFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return m, fmt.Errorf("catalog: read export map: %w", err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("catalog: parse export map %s: %w", path, err)
	}
	if m.Version != exportMapVersion {
		return m, fmt.Errorf("catalog: export map %s: version %d, want %d", path, m.Version, exportMapVersion)
	}
	if m.Exports == nil {
		m.Exports = map[string]ExportEntry{}
	}
	return m, nil
}

// Save writes m to dir/ExportFile (creating dir, mode 0700) atomically
// and durably: once it returns, the new map survives power loss.
func (m ExportMap) Save(dir string) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("catalog: state dir: %w", err)
	}
	f, err := os.CreateTemp(dir, ExportFile+".tmp*")
	if err != nil {
		return fmt.Errorf("catalog: write export map: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after the rename
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("catalog: write export map: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("catalog: fsync export map: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("catalog: write export map: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, ExportFile)); err != nil {
		return fmt.Errorf("catalog: install export map: %w", err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("catalog: fsync state dir: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("catalog: fsync state dir: %w", err)
	}
	return nil
}

// Orphans returns the objects among objs of the given kind that are
// empty (size 0) and that no entry of m names: left by a crash between
// creating an export's object and recording it.
func (m ExportMap) Orphans(objs []tiering.ObjectInfo, kind string) []tiering.ObjectID {
	named := make(map[tiering.ObjectID]bool, len(m.Exports))
	for _, ent := range m.Exports {
		named[ent.ID] = true
	}
	var out []tiering.ObjectID
	for _, info := range objs {
		if info.Kind == kind && info.Size == 0 && !named[info.ID] {
			out = append(out, info.ID)
		}
	}
	return out
}
