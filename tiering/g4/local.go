package g4

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// Local is an ObjectStore on a local directory: the embedded default
// backend of G4 when no S3 endpoint is configured, and the stand-in for one
// in tests. Names map to paths as described in localpath.go, each object is
// one file in the format of localfile.go, and Put is atomic and durable: the
// bytes go to a temporary file in the target directory, which is fsynced,
// renamed over the target, and the directory fsynced.
//
// Context: ctx is checked before every step (create, copy, sync, rename)
// and by the readers Get returns on every Read; a system call already in
// the kernel cannot be interrupted, so a file system that hangs (a dead
// NFS server) can hold a call past its deadline. A root directory that has
// vanished, turned read-only or fails with EIO gives tier.ErrUnavailable;
// a full file system gives tier.ErrNoSpace.
//
// Local is safe for concurrent use, also by several processes sharing the
// directory. It keeps no state besides the root path.
type Local struct {
	root string
}

var _ ObjectStore = (*Local)(nil)

// NewLocal opens (creating it if needed, mode 0700) the directory dir as a
// Local store. It fails if dir cannot be created or is not a directory.
func NewLocal(dir string) (*Local, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("g4 local: %w", err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("g4 local: %w", err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("g4 local: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("g4 local: %s is not a directory", abs)
	}
	return &Local{root: abs}, nil
}

// Root returns the absolute path of the store's directory.
func (l *Local) Root() string { return l.root }

// Path returns the file that holds object name (it may not exist), or an
// error wrapping ErrInvalid. Tests use it to damage stored objects.
func (l *Local) Path(name string) (string, error) { return objectPath(l.root, name) }

// String describes the store, e.g. "local:/var/lib/ctxmemd/g4".
func (l *Local) String() string { return "local:" + l.root }

// fail wraps a file-system error of op on name: ENOENT becomes ErrNotExist
// while the root exists and tier.ErrUnavailable when it does not; errors
// that say the disk or its mount is unusable become tier.ErrUnavailable;
// ENOSPC and EDQUOT become tier.ErrNoSpace.
func (l *Local) fail(op, name string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("g4 local %s %q: %w", op, name, err)
	}
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Stat(l.root); serr != nil {
			return fmt.Errorf("g4 local %s %q: root %s: %w: %w", op, name, l.root, tier.ErrUnavailable, serr)
		}
		return fmt.Errorf("g4 local %s %q: %w", op, name, ErrNotExist)
	}
	var en syscall.Errno
	if errors.As(err, &en) {
		switch en {
		case syscall.ENOSPC, syscall.EDQUOT:
			return fmt.Errorf("g4 local %s %q: %w: %w", op, name, tier.ErrNoSpace, err)
		case syscall.EROFS, syscall.EACCES, syscall.EPERM, syscall.EIO, syscall.ENOTDIR,
			syscall.ENOTCONN, syscall.ESTALE, syscall.ENODEV, syscall.ENXIO, syscall.EHOSTDOWN,
			syscall.ESHUTDOWN, syscall.ETIMEDOUT:
			return fmt.Errorf("g4 local %s %q: %w: %w", op, name, tier.ErrUnavailable, err)
		}
	}
	return fmt.Errorf("g4 local %s %q: %w", op, name, err)
}

// Put implements ObjectStore.Put.
func (l *Local) Put(ctx context.Context, name string, r io.Reader, size int64, meta map[string]string) error {
	p, err := objectPath(l.root, name)
	if err != nil {
		return err
	}
	if err := ValidateMeta(meta); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return l.fail("put", name, err)
	}
	dir := filepath.Dir(p)
	var f *os.File
	var created []string
	// A concurrent Delete may prune a directory between its creation and
	// the creation of the temporary file in it: retry a few times.
	for attempt := 0; ; attempt++ {
		c, err := l.mkdirs(dir)
		created = append(created, c...)
		if err == nil {
			f, err = os.CreateTemp(dir, tempPrefix+"*")
		}
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrNotExist) || attempt == 4 {
			return l.fail("put", name, err)
		}
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if _, err := f.Write(encodeLocalMeta(meta)); err != nil {
		return l.fail("put", name, err)
	}
	n, err := io.Copy(f, r)
	if err != nil {
		return l.fail("put", name, err)
	}
	if size >= 0 && n != size {
		return fmt.Errorf("g4 local put %q: %w: reader gave %d bytes, size says %d", name, ErrInvalid, n, size)
	}
	if err := ctx.Err(); err != nil {
		return l.fail("put", name, err)
	}
	if err := f.Sync(); err != nil {
		return l.fail("put", name, err)
	}
	if err := f.Close(); err != nil {
		return l.fail("put", name, err)
	}
	if err := ctx.Err(); err != nil {
		return l.fail("put", name, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return l.fail("put", name, err)
	}
	ok = true
	// Make the rename and any new directories durable.
	if err := syncDir(dir); err != nil {
		return l.fail("put", name, err)
	}
	for _, d := range created {
		if err := syncDir(filepath.Dir(d)); err != nil {
			return l.fail("put", name, err)
		}
	}
	return nil
}

// mkdirs creates the directories from just below the root down to dir
// and returns those it created. It never creates the root itself, so a
// vanished root fails with ENOENT instead of being silently recreated.
func (l *Local) mkdirs(dir string) ([]string, error) {
	rel, err := filepath.Rel(l.root, dir)
	if err != nil {
		return nil, err
	}
	if rel == "." {
		_, err := os.Stat(l.root)
		return nil, err
	}
	var created []string
	cur := l.root
	for seg := range strings.SplitSeq(rel, string(filepath.Separator)) {
		cur = filepath.Join(cur, seg)
		err := os.Mkdir(cur, 0o700)
		switch {
		case err == nil:
			created = append(created, cur)
		case errors.Is(err, fs.ErrExist):
		default:
			return created, err
		}
	}
	return created, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// open opens object name and returns the file, its data offset and size
// in bytes, and its modification time.
func (l *Local) open(ctx context.Context, op, name string) (f *os.File, off, size int64, mtime time.Time, err error) {
	p, err := objectPath(l.root, name)
	if err != nil {
		return nil, 0, 0, time.Time{}, err
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, 0, time.Time{}, l.fail(op, name, err)
	}
	f, err = os.Open(p)
	if err != nil {
		return nil, 0, 0, time.Time{}, l.fail(op, name, err)
	}
	off, size, mtime, err = fileLayout(f)
	if err != nil {
		_ = f.Close()
		return nil, 0, 0, time.Time{}, l.fail(op, name, err)
	}
	return f, off, size, mtime, nil
}

// fileLayout returns the data offset and size and the mtime of an open
// object file.
func fileLayout(f *os.File) (off, size int64, mtime time.Time, err error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, 0, time.Time{}, err
	}
	m, err := readLocalPreamble(f)
	if err != nil {
		return 0, 0, time.Time{}, err
	}
	off = localPreLen + m
	if fi.Size() < off {
		return 0, 0, time.Time{}, fmt.Errorf("%w: %d bytes, data offset %d", errBadLocalFile, fi.Size(), off)
	}
	return off, fi.Size() - off, fi.ModTime(), nil
}

// Get implements ObjectStore.Get.
func (l *Local) Get(ctx context.Context, name string) (io.ReadCloser, map[string]string, error) {
	f, off, size, _, err := l.open(ctx, "get", name)
	if err != nil {
		return nil, nil, err
	}
	meta, err := readLocalMeta(f, off-localPreLen)
	if err != nil {
		_ = f.Close()
		return nil, nil, l.fail("get", name, err)
	}
	return &fileReader{ctx: ctx, r: io.NewSectionReader(f, off, size), f: f, l: l, name: name}, meta, nil
}

// GetRange implements ObjectStore.GetRange.
func (l *Local) GetRange(ctx context.Context, name string, off, length int64) (io.ReadCloser, error) {
	if off < 0 {
		return nil, fmt.Errorf("g4 local get %q: %w: offset %d", name, ErrInvalid, off)
	}
	f, doff, size, _, err := l.open(ctx, "get", name)
	if err != nil {
		return nil, err
	}
	if off > size {
		_ = f.Close()
		return nil, fmt.Errorf("g4 local get %q: %w: offset %d beyond size %d", name, ErrInvalid, off, size)
	}
	if length < 0 || length > size-off {
		length = size - off
	}
	return &fileReader{ctx: ctx, r: io.NewSectionReader(f, doff+off, length), f: f, l: l, name: name}, nil
}

// fileReader reads a section of an object file and checks ctx on every
// Read, as an HTTP body does; read errors are classified like the others
// (EIO → tier.ErrUnavailable).
type fileReader struct {
	ctx  context.Context
	r    *io.SectionReader
	f    *os.File
	l    *Local
	name string
}

func (r *fileReader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		err = r.l.fail("read", r.name, err)
	}
	return n, err
}

func (r *fileReader) Close() error { return r.f.Close() }

// Head implements ObjectStore.Head.
func (l *Local) Head(ctx context.Context, name string) (ObjectAttrs, error) {
	f, off, size, mtime, err := l.open(ctx, "head", name)
	if err != nil {
		return ObjectAttrs{}, err
	}
	defer f.Close()
	meta, err := readLocalMeta(f, off-localPreLen)
	if err != nil {
		return ObjectAttrs{}, l.fail("head", name, err)
	}
	return ObjectAttrs{Name: name, Size: size, ModTime: mtime, Meta: meta}, nil
}

// Delete implements ObjectStore.Delete. Directories left empty are
// removed, up to (not including) the root.
func (l *Local) Delete(ctx context.Context, name string) error {
	p, err := objectPath(l.root, name)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return l.fail("delete", name, err)
	}
	if err := os.Remove(p); err != nil {
		err = l.fail("delete", name, err)
		if errors.Is(err, ErrNotExist) {
			return nil
		}
		return err
	}
	for d := filepath.Dir(p); d != l.root && len(d) > len(l.root); d = filepath.Dir(d) {
		if os.Remove(d) != nil { // not empty (or raced with a Put): stop
			break
		}
	}
	return nil
}
