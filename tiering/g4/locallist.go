package g4

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// List implements ObjectStore.List. It walks only the directory of the
// prefix's complete segments ("a/b/c" walks a/b and keeps names starting
// with "a/b/c"), depth first with entries sorted by decoded name (a
// directory "x" sorting as "x/"), which yields names in ascending byte
// order as S3 lists them. Each listed object costs an open, fstat and an
// 8-byte read. Temporary files and entries that are not canonical
// encodings are skipped.
func (l *Local) List(ctx context.Context, prefix string, fn func(ObjectAttrs) bool) error {
	dirName := ""
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		dirName = prefix[:i+1]
	}
	dir := l.root
	if dirName != "" {
		// Every valid name under dirName has dirName's segments as its
		// directories; if they are not valid, nothing can match.
		p, err := objectPath(l.root, strings.TrimSuffix(dirName, "/"))
		if err != nil {
			return nil
		}
		dir = strings.TrimSuffix(p, objSuffix)
	}
	_, err := l.walk(ctx, dir, dirName, prefix, fn)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			if _, serr := os.Stat(l.root); serr == nil {
				return nil // the prefix's directory does not exist: no objects
			}
		}
		return l.fail("list", prefix, err)
	}
	return nil
}

// listEntry is one directory entry of a walk, keyed by decoded name.
type listEntry struct {
	key   string // decoded segment, plus "/" for a directory
	file  string // entry name on disk
	isDir bool
}

// walk lists dir, whose objects' names start with namePrefix, calling fn
// for objects whose names start with prefix. It returns false when fn
// asked to stop.
func (l *Local) walk(ctx context.Context, dir, namePrefix, prefix string, fn func(ObjectAttrs) bool) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	items := make([]listEntry, 0, len(ents))
	for _, e := range ents {
		n := e.Name()
		if strings.HasPrefix(n, ".") {
			continue // temporary file
		}
		switch {
		case e.IsDir():
			if seg, ok := decodeSegment(n); ok {
				items = append(items, listEntry{key: seg + "/", file: n, isDir: true})
			}
		case e.Type().IsRegular() && strings.HasSuffix(n, objSuffix):
			if seg, ok := decodeSegment(strings.TrimSuffix(n, objSuffix)); ok {
				items = append(items, listEntry{key: seg, file: n})
			}
		}
	}
	sort.Slice(items, func(i, j int) bool { return items[i].key < items[j].key })
	for _, it := range items {
		full := namePrefix + it.key
		path := filepath.Join(dir, it.file)
		if it.isDir {
			if !strings.HasPrefix(full, prefix) && !strings.HasPrefix(prefix, full) {
				continue
			}
			more, err := l.walk(ctx, path, full, prefix, fn)
			if err != nil && !errors.Is(err, fs.ErrNotExist) { // pruned meanwhile
				return false, err
			}
			if !more {
				return false, nil
			}
			continue
		}
		if !strings.HasPrefix(full, prefix) {
			continue
		}
		a, err := statObjectFile(path)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, errBadLocalFile) {
			continue // deleted meanwhile, or not an object file
		}
		if err != nil {
			return false, err
		}
		a.Name = full
		if !fn(a) {
			return false, nil
		}
	}
	return true, nil
}

// statObjectFile returns the size and mtime of the object file at path.
func statObjectFile(path string) (ObjectAttrs, error) {
	f, err := os.Open(path)
	if err != nil {
		return ObjectAttrs{}, err
	}
	defer f.Close()
	_, size, mtime, err := fileLayout(f)
	if err != nil {
		return ObjectAttrs{}, err
	}
	return ObjectAttrs{Size: size, ModTime: mtime}, nil
}

// RemoveStale deletes temporary files that a Put left behind when its
// process died, if they were last written before the given time, and
// returns how many it removed. Pass a time well before any Put still in
// progress could have started (the G4 tier passes ten minutes ago at the
// latest). It walks the whole tree.
func (l *Local) RemoveStale(ctx context.Context, before time.Time) (int, error) {
	removed := 0
	err := filepath.WalkDir(l.root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && path != l.root {
				return nil // pruned meanwhile
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.IsDir() || !strings.HasPrefix(d.Name(), tempPrefix) {
			return nil
		}
		fi, err := d.Info()
		if err != nil || !fi.ModTime().Before(before) {
			return nil
		}
		if os.Remove(path) == nil {
			removed++
		}
		return nil
	})
	return removed, l.fail("remove-stale", "", err)
}
