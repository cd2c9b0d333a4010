package main

import (
	"context"
	"fmt"
	"io/fs"
	"sync"

	"github.com/ctxmem/ctxmemd/tiering"
)

// benchNS is the one namespace of the simulated hosts.
const benchNS = "bench"

// memFiles is the sidecar.Files of a simulated host: the names of its
// objects in one namespace, kept in two maps (the real one is the FUSE
// mount). Safe for concurrent use.
type memFiles struct {
	st     *tiering.Store
	mu     sync.RWMutex
	byID   map[tiering.ObjectID]string
	byPath map[string]tiering.ObjectID
}

func newMemFiles(st *tiering.Store, sizeHint int) *memFiles {
	return &memFiles{st: st, byID: make(map[tiering.ObjectID]string, sizeHint),
		byPath: make(map[string]tiering.ObjectID, sizeHint)}
}

// Path implements sidecar.Files.
func (f *memFiles) Path(id tiering.ObjectID) (string, string, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	p, ok := f.byID[id]
	return benchNS, p, ok
}

// Lookup implements sidecar.Files.
func (f *memFiles) Lookup(ns, path string) (tiering.ObjectID, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if id, ok := f.byPath[path]; ok && ns == benchNS {
		return id, nil
	}
	return 0, fmt.Errorf("%s/%s: %w", ns, path, fs.ErrNotExist)
}

// DropNamespace implements sidecar.Files.
func (f *memFiles) DropNamespace(ctx context.Context, ns string) (int, error) {
	if ns != benchNS {
		return 0, fmt.Errorf("namespace %s: %w", ns, fs.ErrNotExist)
	}
	f.mu.Lock()
	ids := f.byID
	f.byID, f.byPath = map[tiering.ObjectID]string{}, map[string]tiering.ObjectID{}
	f.mu.Unlock()
	for id := range ids {
		_ = f.st.Delete(ctx, id)
	}
	return len(ids), nil
}

// create makes the file path with data (one block when len(data) ≤ 4 KiB).
func (f *memFiles) create(ctx context.Context, path string, data []byte) (tiering.ObjectID, error) {
	id, err := f.st.Create(benchNS, 4096, "file")
	if err != nil {
		return 0, err
	}
	if _, err := f.st.WriteAt(ctx, id, data, 0); err != nil {
		_ = f.st.Delete(ctx, id)
		return 0, err
	}
	f.mu.Lock()
	f.byID[id], f.byPath[path] = path, id
	f.mu.Unlock()
	return id, nil
}

// remove deletes the file of id.
func (f *memFiles) remove(ctx context.Context, id tiering.ObjectID) {
	f.mu.Lock()
	p, ok := f.byID[id]
	delete(f.byID, id)
	delete(f.byPath, p)
	f.mu.Unlock()
	if ok {
		_ = f.st.Delete(ctx, id)
	}
}
