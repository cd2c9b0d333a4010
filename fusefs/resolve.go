package fusefs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/ctxmem/ctxmemd/tiering"
)

// Path returns the namespace and the path inside it ("a/b/c", no leading
// slash) of the file whose object is id; a file with several names
// reports its first. ok is false when no file has that object (never
// existed, removed, or open but unlinked).
func (s *Server) Path(id tiering.ObjectID) (ns, path string, ok bool) {
	t := &s.fsys.t
	t.mu.RLock()
	defer t.mu.RUnlock()
	n := t.byObj[id]
	if n == nil || n.gone || len(n.links) == 0 || n.ns == nil {
		return "", "", false
	}
	var parts []string
	for c := n; c != n.ns.root; {
		if len(c.links) == 0 {
			return "", "", false
		}
		l := c.links[0]
		parts = append(parts, l.name)
		c = l.parent
	}
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	return n.ns.cfg.Name, strings.Join(parts, "/"), true
}

// Lookup resolves path ("a/b/c"; a leading slash is ignored) in namespace
// ns to the object of the regular file it names. Errors wrap
// fs.ErrNotExist (no such namespace or name) or fs.ErrInvalid (a path
// component is not a directory, or the name is not a regular file).
func (s *Server) Lookup(ns, path string) (tiering.ObjectID, error) {
	f := s.fsys
	t := &f.t
	t.mu.RLock()
	defer t.mu.RUnlock()
	var root *node
	for _, n := range f.nss { // f.nss grows under t.mu (AddNamespace)
		if n.cfg.Name == ns {
			root = n.root
		}
	}
	if root == nil {
		return 0, fmt.Errorf("namespace %q: %w", ns, fs.ErrNotExist)
	}
	cur := root
	for _, name := range strings.Split(strings.Trim(path, "/"), "/") {
		if name == "" || name == "." {
			continue
		}
		if cur.kind != kindDir {
			return 0, fmt.Errorf("%s/%s: not a directory: %w", ns, path, fs.ErrInvalid)
		}
		if name == ".." {
			cur = cur.parent()
			continue
		}
		next := cur.dir.get(name)
		if next == nil {
			return 0, fmt.Errorf("%s/%s: %w", ns, path, fs.ErrNotExist)
		}
		cur = next
	}
	if cur.kind != kindFile {
		return 0, fmt.Errorf("%s/%s: not a regular file: %w", ns, path, fs.ErrInvalid)
	}
	return cur.obj, nil
}

// DropNamespace removes every file of namespace ns (the scheduler's "drop
// namespace" command): each file loses its names, handles still open on
// it get EIO, and its object is deleted from every tier. Directories are
// kept, so the namespace and its layout stay usable. It returns the
// number of files removed. Errors: fs.ErrNotExist for an unknown
// namespace; the first Backend.Delete error (the remaining files are
// still removed).
func (s *Server) DropNamespace(ctx context.Context, ns string) (int, error) {
	f := s.fsys
	t := &f.t
	t.mu.RLock()
	found := false
	for _, n := range f.nss {
		found = found || n.cfg.Name == ns
	}
	if !found {
		t.mu.RUnlock()
		return 0, fmt.Errorf("namespace %q: %w", ns, fs.ErrNotExist)
	}
	var ids []tiering.ObjectID
	for id, n := range t.byObj {
		if n.ns != nil && n.ns.cfg.Name == ns {
			ids = append(ids, id)
		}
	}
	t.mu.RUnlock()
	var firstErr error
	count := 0
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return count, err
		}
		if !f.removeFile(id, "namespace dropped") {
			continue
		}
		count++
		if err := f.be.Delete(ctx, id); err != nil && !errors.Is(err, tiering.ErrNotExist) && firstErr == nil {
			firstErr = fmt.Errorf("drop namespace %q: delete object %d: %w", ns, id, err)
		}
	}
	f.log.Info("fusefs: namespace dropped", "namespace", ns, "files", count)
	return count, firstErr
}

// LookupMisses is the number of KV lookup misses since mount: names an
// engine asked for in a namespace that the mount does not hold, the
// kernel's own lookups before creating a name excluded (see Lookups).
func (s *Server) LookupMisses() int64 { c, _ := s.Lookups(); return c.Misses }
