package fusefs

import (
	"context"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// dirHandle is an open directory stream. Its position is the offset (seq)
// of the last entry returned: entries are listed in seq order and a seq
// never changes while its entry exists, so a listing that runs while other
// processes create, rename and unlink returns every entry that exists for
// its whole duration exactly once (changed entries may or may not appear,
// as POSIX allows). Offsets 1 and 2 are "." and "..". Each entry is read
// under tree.mu, so nothing is buffered that could go stale between two
// getdents calls.
type dirHandle struct {
	d *dirNode

	mu  sync.Mutex
	pos uint64
}

var (
	_ fs.FileReaddirenter = (*dirHandle)(nil)
	_ fs.FileSeekdirer    = (*dirHandle)(nil)
	_ fs.FileLookuper     = (*dirHandle)(nil)
	_ fs.FileFsyncdirer   = (*dirHandle)(nil)
)

// Readdirent returns the next entry, or nil at the end.
func (h *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := &h.d.fsys.t
	switch h.pos {
	case 0:
		h.pos = 1
		return &fuse.DirEntry{Name: ".", Mode: syscall.S_IFDIR, Ino: h.d.n.ino, Off: 1}, 0
	case 1:
		h.pos = 2
		t.mu.RLock()
		p := h.d.n.parent()
		t.mu.RUnlock()
		return &fuse.DirEntry{Name: "..", Mode: syscall.S_IFDIR, Ino: p.ino, Off: 2}, 0
	}
	t.mu.RLock()
	e, ok := h.d.n.dir.Next(h.pos)
	var de *fuse.DirEntry
	if ok {
		de = &fuse.DirEntry{Name: e.Name, Mode: e.Child.typeBits(), Ino: e.Child.ino, Off: e.Seq}
		h.pos = e.Seq
	}
	t.mu.RUnlock()
	return de, 0
}

// Seekdir moves the stream to just after offset off (0 = the start).
func (h *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	h.mu.Lock()
	h.pos = off
	h.mu.Unlock()
	return 0
}

// Lookup answers the lookup half of READDIRPLUS for the entry just read.
// The kernel holds the directory lock shared for the whole request, so no
// entry of this mount changes between Readdirent and this call.
func (h *dirHandle) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return h.d.Lookup(ctx, name, out)
}

// Fsyncdir makes the tree durable (see dirNode.Fsync).
func (h *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	return h.d.Fsync(ctx, nil, flags)
}
