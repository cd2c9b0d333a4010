package fusefs

import (
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ctxmem/ctxmemd/catalog"
	"github.com/ctxmem/ctxmemd/tiering"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Lock order: tree.mu, then node.mu, then journal.mu. The data path (read,
// write) takes node.mu only, never tree.mu.

// nodeKind is the type of a node.
type nodeKind = catalog.Kind

const (
	kindDir     = catalog.KindDir
	kindFile    = catalog.KindFile
	kindSymlink = catalog.KindSymlink
)

// rootIno is the inode number (and FUSE node id) of the mount root.
const rootIno = fuse.FUSE_ROOT_ID

// The catalog's tree root is the mount root: reconciliation (which drops
// entries that point at it) and the tree must agree (checked at compile
// time: the index is out of range unless the two are equal).
var _ = [1]struct{}{}[rootIno-catalog.RootIno]

// namespace is a served namespace and its quota accounting
// (catalog.Quota: bytes of its live files, open-but-unlinked ones
// included, against QuotaBytes; the same rounded up to BlockSizeStatfs for
// statfs; live files, directories and symlinks, its own directory
// included).
type namespace struct {
	cfg  Namespace
	root *node
	*catalog.Quota
	// lk counts the namespace's KV lookups (lookups.go).
	lk lookupCounts
}

// newNamespace returns the accounting of namespace cfg, nothing used yet.
func newNamespace(cfg Namespace) *namespace {
	q := cfg.Quota
	if q == nil {
		q = &catalog.Quota{Limit: cfg.QuotaBytes}
	}
	return &namespace{cfg: cfg, Quota: q}
}

// allocBytes is the space a file of size bytes is charged in statfs: its
// size rounded up to BlockSizeStatfs.
func allocBytes(size int64) int64 {
	return (max(size, 0) + BlockSizeStatfs - 1) / BlockSizeStatfs * BlockSizeStatfs
}

// setReserved sets n.reserved to v and moves the namespace's statfs usage
// with it; n.mu held (or n not yet shared). The quota usage (ns.Used) is
// the caller's business, as before.
func (n *node) setReserved(v int64) {
	if d := allocBytes(v) - allocBytes(n.reserved); d != 0 && n.ns != nil {
		n.ns.AddAlloc(d)
	}
	n.reserved = v
}

// link is one name of a node.
type link struct {
	parent *node
	name   string
}

// node is a file, directory or symlink of the tree. The ino, kind, ns, obj
// and target fields never change.
type node struct {
	ino  uint64
	kind nodeKind
	// kflags are the kernel entry reclaim's bits (forget.go), guarded by
	// fsys.er.mu.
	kflags uint8
	ns     *namespace // nil for the mount root
	obj    tiering.ObjectID
	target string // symlink target

	// Guarded by tree.mu.
	links []link   // names; a directory has at most one
	dir   *dirData // directories only
	gone  bool     // removed from the tree for good

	// nlink is st_nlink, kept current under tree.mu and read without it.
	nlink atomic.Uint32

	mu       sync.Mutex // guards the fields below
	mode     uint32     // permission bits (07777)
	uid, gid uint32
	atime    int64 // unix ns
	mtime    int64
	ctime    int64
	// size is the file size in bytes as of the last completed write or
	// truncate; reserved (≥ size while writes are in flight) is what the
	// file counts against its namespace quota.
	size, reserved int64
	inflight       int // writes and truncates in progress
	opens, writers int // opens (with write access) not yet released
	// Of them: answered in cached mode (no FOPEN_DIRECT_IO), and by
	// passthrough (with write access); see passthrough.go. openMu
	// serialises the choice between them.
	cachedOpens, ptOpens, ptWriters int
	// releasing counts RELEASEs of handles served through the daemon
	// still inside go-fuse (releaseFence).
	releasing  int
	openMu     sync.Mutex
	released   bool // unreachable file: its space and inode are given back
	truncating int  // truncates in progress
	resync     bool // accounting must be re-read from Backend.Stat at quiescence
	lost       bool // the store lost the object
	xattrs     map[string][]byte
}

// Ino implements catalog.Node.
func (n *node) Ino() uint64 { return n.ino }

// Record implements catalog.Node: n's persistent attributes.
func (n *node) Record() catalog.Record {
	n.mu.Lock()
	defer n.mu.Unlock()
	return catalog.Record{Kind: n.kind, Mode: n.mode, UID: n.uid, GID: n.gid, Atime: n.atime, Mtime: n.mtime,
		Ctime: n.ctime, Obj: uint64(n.obj), Target: n.target}
}

// typeBits returns the S_IFMT bits of n.
func (n *node) typeBits() uint32 {
	switch n.kind {
	case kindDir:
		return syscall.S_IFDIR
	case kindSymlink:
		return syscall.S_IFLNK
	}
	return syscall.S_IFREG
}

// updateNlink recomputes st_nlink; the caller holds tree.mu for writing.
func (n *node) updateNlink() {
	switch {
	case n.gone && n.kind == kindDir:
		n.nlink.Store(0)
	case n.kind == kindDir:
		n.nlink.Store(uint32(2 + n.dir.Subdirs()))
	default:
		n.nlink.Store(uint32(len(n.links)))
	}
}

// removeLink drops the name (parent, name) from n.links; tree.mu held.
func (n *node) removeLink(parent *node, name string) {
	for i, l := range n.links {
		if l.parent == parent && l.name == name {
			n.links = append(n.links[:i], n.links[i+1:]...)
			break
		}
	}
	n.updateNlink()
}

// parent returns a directory's parent (the root for itself); tree.mu held.
func (n *node) parent() *node {
	if len(n.links) == 0 {
		return n
	}
	return n.links[0].parent
}

// fillAttr writes n's attributes into out.
func (n *node) fillAttr(out *fuse.Attr) {
	out.Ino = n.ino
	out.Nlink = n.nlink.Load()
	n.mu.Lock()
	out.Mode = n.typeBits() | n.mode
	out.Uid, out.Gid = n.uid, n.gid
	setTime(&out.Atime, &out.Atimensec, n.atime)
	setTime(&out.Mtime, &out.Mtimensec, n.mtime)
	setTime(&out.Ctime, &out.Ctimensec, n.ctime)
	switch n.kind {
	case kindFile:
		out.Size = uint64(n.size)
	case kindDir:
		out.Size = 4096
	case kindSymlink:
		out.Size = uint64(len(n.target))
	}
	n.mu.Unlock()
	out.Blksize = BlockSizeStatfs
	if n.ns != nil && n.kind == kindFile {
		out.Blksize = uint32(min(n.ns.cfg.BlockSize, DefaultMaxWrite))
	}
	out.Blocks = (out.Size + 4095) / 4096 * 8
}

func setTime(sec *uint64, nsec *uint32, t int64) {
	*sec = uint64(t / 1e9)
	*nsec = uint32(t % 1e9)
}

func now() int64 { return time.Now().UnixNano() }

// dirData holds a directory's entries (the listing cursor of catalog.Dir);
// guarded by tree.mu.
type dirData = catalog.Dir[*node]

func newDirData() *dirData { return catalog.NewDir[*node]() }

// IsDir implements catalog.DirChild.
func (n *node) IsDir() bool { return n.kind == kindDir }

// tree is the in-memory namespace tree.
type tree struct {
	mu      sync.RWMutex
	root    *node
	nextIno uint64
	byObj   map[tiering.ObjectID]*node
	// orphans are files with no name whose object is deleted when the
	// kernel forgets them (last close).
	orphans map[*node]struct{}
}

// allocIno returns a fresh inode number; tree.mu held for writing.
func (t *tree) allocIno() uint64 {
	ino := t.nextIno
	t.nextIno++
	return ino
}

// isAncestor reports whether a is d or one of d's ancestors; tree.mu held.
func isAncestor(a, d *node) bool {
	for n := d; ; n = n.parent() {
		if n == a {
			return true
		}
		if n.ino == rootIno || len(n.links) == 0 {
			return false
		}
	}
}
