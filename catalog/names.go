package catalog

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"strings"

	"github.com/ctxmem/ctxmemd/tiering"
)

// Entry is what the name service sees of a tree node.
type Entry struct {
	// Ino is the node's inode number.
	Ino  uint64
	Kind Kind
	// NS names the namespace the node belongs to ("" for the mount root).
	NS string
	// Obj is a file's object id (0 for other kinds).
	Obj tiering.ObjectID
	// Ref is the Tree implementation's handle of the node; callers pass
	// the Entry back to the same View unchanged.
	Ref any
}

// View is a consistent, read-only view of a namespace tree, made by
// Tree.View and valid only during that call. Its methods are entry
// operations (one directory entry, one parent, one name at a time), so an
// implementation need not hold the whole tree in memory.
type View interface {
	// Namespace returns the directory of the served namespace ns.
	Namespace(ns string) (Entry, bool)
	// Child returns the entry name of directory dir.
	Child(dir Entry, name string) (Entry, bool)
	// Parent returns the parent of directory dir: the mount root for a
	// namespace directory, dir itself for the mount root.
	Parent(dir Entry) Entry
	// File returns the file whose object is id, named or open but
	// unlinked; false once it is removed.
	File(id tiering.ObjectID) (Entry, bool)
	// Name returns the first name of e: its directory and the name in it.
	// ok is false when e has no name (an open but unlinked file).
	Name(e Entry) (dir Entry, name string, ok bool)
	// Files returns the objects of every file of namespace ns.
	Files(ns string) []tiering.ObjectID
}

// Tree is a namespace tree the name service reads and removes files from
// (implemented by the FUSE front end's tree, fusefs.Server.Tree).
type Tree interface {
	// View calls fn with a consistent view of the tree.
	View(fn func(View))
	// RemoveFile removes every name of the file whose object is id, makes
	// its open handles fail (EIO), releases its quota and tells whoever
	// caches names (the kernel); why is logged. The object itself is
	// left to the caller. It reports whether the file was there.
	RemoveFile(id tiering.ObjectID, why string) bool
}

// Deleter deletes objects from every tier (satisfied by *tiering.Store).
type Deleter interface {
	Delete(ctx context.Context, id tiering.ObjectID) error
}

// Names is the name service: object id ↔ namespace and path, and
// dropping a namespace. The sidecar, admin and the daemon's event and
// fsck reports use it instead of the mount. Safe for concurrent use.
type Names struct {
	tree Tree
	objs Deleter
	log  *slog.Logger
}

// NewNames returns the name service of tree; DropNamespace deletes
// objects through objs.
func NewNames(tree Tree, objs Deleter, log *slog.Logger) *Names {
	return &Names{tree: tree, objs: objs, log: log}
}

// Path returns the namespace and the path inside it ("a/b/c", no leading
// slash) of the file whose object is id; a file with several names
// reports its first. ok is false when no file has that object (never
// existed, removed, or open but unlinked).
func (s *Names) Path(id tiering.ObjectID) (ns, path string, ok bool) {
	s.tree.View(func(v View) {
		e, found := v.File(id)
		if !found || e.NS == "" {
			return
		}
		root, found := v.Namespace(e.NS)
		if !found {
			return
		}
		var parts []string
		for c := e; c.Ino != root.Ino; {
			dir, name, named := v.Name(c)
			if !named {
				return
			}
			parts = append(parts, name)
			c = dir
		}
		slices.Reverse(parts)
		ns, path, ok = e.NS, strings.Join(parts, "/"), true
	})
	return ns, path, ok
}

// Lookup resolves path ("a/b/c"; a leading slash is ignored) in namespace
// ns to the object of the regular file it names. Errors wrap
// fs.ErrNotExist (no such namespace or name) or fs.ErrInvalid (a path
// component is not a directory, the name is not a regular file, or ".."
// would leave the namespace: names come from the control bus and admin
// clients, and one namespace's command must never reach another's files).
func (s *Names) Lookup(ns, path string) (id tiering.ObjectID, err error) {
	s.tree.View(func(v View) { id, err = lookup(v, ns, path) })
	return id, err
}

func lookup(v View, ns, path string) (tiering.ObjectID, error) {
	cur, ok := v.Namespace(ns)
	if !ok {
		return 0, fmt.Errorf("namespace %q: %w", ns, fs.ErrNotExist)
	}
	depth := 0 // below the namespace root: ".." never leaves the namespace
	for _, name := range strings.Split(strings.Trim(path, "/"), "/") {
		if name == "" || name == "." {
			continue
		}
		if cur.Kind != KindDir {
			return 0, fmt.Errorf("%s/%s: not a directory: %w", ns, path, fs.ErrInvalid)
		}
		if name == ".." {
			if depth == 0 {
				return 0, fmt.Errorf("%s/%s: leaves the namespace: %w", ns, path, fs.ErrInvalid)
			}
			cur, depth = v.Parent(cur), depth-1
			continue
		}
		next, ok := v.Child(cur, name)
		if !ok {
			return 0, fmt.Errorf("%s/%s: %w", ns, path, fs.ErrNotExist)
		}
		cur, depth = next, depth+1
	}
	if cur.Kind != KindFile {
		return 0, fmt.Errorf("%s/%s: not a regular file: %w", ns, path, fs.ErrInvalid)
	}
	return cur.Obj, nil
}

// DropNamespace removes every file of namespace ns (the scheduler's "drop
// namespace" command): each file loses its names, handles still open on
// it get EIO, and its object is deleted from every tier. Directories are
// kept, so the namespace and its layout stay usable. It returns the
// number of files removed. Errors: fs.ErrNotExist for an unknown
// namespace; ctx's error (files not reached yet stay); the first Delete
// error (the remaining files are still removed).
func (s *Names) DropNamespace(ctx context.Context, ns string) (int, error) {
	var (
		ids   []tiering.ObjectID
		found bool
	)
	s.tree.View(func(v View) {
		if _, found = v.Namespace(ns); found {
			ids = v.Files(ns)
		}
	})
	if !found {
		return 0, fmt.Errorf("namespace %q: %w", ns, fs.ErrNotExist)
	}
	var firstErr error
	count := 0
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return count, err
		}
		if !s.tree.RemoveFile(id, "namespace dropped") {
			continue
		}
		count++
		if err := s.objs.Delete(ctx, id); err != nil && !errors.Is(err, tiering.ErrNotExist) && firstErr == nil {
			firstErr = fmt.Errorf("drop namespace %q: delete object %d: %w", ns, id, err)
		}
	}
	s.log.Info("catalog: namespace dropped", "namespace", ns, "files", count)
	return count, firstErr
}
