package fusefs

import (
	"errors"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/ctxmem/ctxmemd/catalog"
	"github.com/ctxmem/ctxmemd/mrc"
	"github.com/ctxmem/ctxmemd/tiering"
)

// Defaults applied by Mount to zero-valued Options fields.
const (
	// DefaultNamespace is the name of the one namespace served when
	// Options.Namespaces is empty. It is owned by uid 0, gid 0 with mode
	// 01777 (world-writable and sticky, like /tmp): engines running as any
	// user can store files, and only a file's owner (or root) can delete
	// or rename it.
	DefaultNamespace = "default"
	// DefaultNamespaceMode is the mode of DefaultNamespace.
	DefaultNamespaceMode = 0o1777
	// DefaultMode is the mode of a configured namespace whose Mode is 0.
	DefaultMode = 0o755
	// DefaultBlockSize is the block size (bytes) of a namespace whose
	// BlockSize is 0 (DESIGN.md: 256 KiB).
	DefaultBlockSize = 256 << 10
	// DefaultTimeout is the kernel's entry, attribute and negative-entry
	// cache timeout when the Options field is 0.
	DefaultTimeout = time.Hour
	// DefaultMaxWrite is the largest READ/WRITE request (bytes) the kernel
	// sends, the kernel's own limit being 1 MiB with 4 KiB pages.
	DefaultMaxWrite = 1 << 20
	// DefaultMaxBackground is the number of asynchronous requests
	// (readahead, O_DIRECT aio) the kernel keeps in flight.
	DefaultMaxBackground = 64
	// DefaultCommitInterval bounds how long a change of times alone (the
	// mtime of a write) waits before it is written to the tree database.
	DefaultCommitInterval = time.Second
	// BlockSizeStatfs is f_bsize and f_frsize of statfs: the size that
	// engines align O_DIRECT I/O to.
	BlockSizeStatfs = 4096
	// maxNameLen is the longest name (bytes) of a directory entry.
	maxNameLen = catalog.MaxNameLen
	// minBlockSize and maxBlockSize bound Namespace.BlockSize (bytes);
	// the tier contract limits blocks to 4 MiB.
	minBlockSize = 4 << 10
	maxBlockSize = 4 << 20
)

// Namespace is one top-level directory of the mount (DESIGN.md "Data
// model"). The identity fields (ModelID … Tenant) say which KV bytes the
// namespace holds; a namespace whose identity differs from the one recorded
// in the tree database at the previous mount is started empty (its old
// files and objects are deleted), never silently reused.
type Namespace struct {
	// Name is the directory name: 1–255 bytes, no '/', not "." or "..".
	Name string
	// UID and GID own the namespace directory.
	UID, GID uint32
	// Mode holds the permission bits of the directory (07777 mask:
	// setgid and sticky allowed). 0 means DefaultMode. The kernel enforces
	// them (default_permissions): another uid without access gets EACCES.
	Mode uint32
	// QuotaBytes caps the sum of the sizes (bytes) of the namespace's
	// files, open-but-unlinked ones included; a write or extension past it
	// fails with EDQUOT. 0 means no quota.
	QuotaBytes int64
	// Quota is the namespace's usage accounting when it is shared with
	// another front end (NBD exports counted in the namespace reserve
	// their size in it); its Limit must be QuotaBytes. nil: the mount
	// keeps its own.
	Quota *catalog.Quota
	// BlockSize is the object block size in bytes: a power of two from
	// 4 KiB to 4 MiB; 0 means DefaultBlockSize.
	BlockSize int
	// ModelID, ModelRevision, TokenizerRevision, KVDType, LayoutVersion
	// and Tenant make up the namespace identity.
	ModelID           string
	ModelRevision     string
	TokenizerRevision string
	KVDType           string
	LayoutVersion     string
	Tenant            string
}

// SameIdentity reports whether n and o agree on the fields that must
// match between mounts (model_id, model_revision, tokenizer_revision,
// kv_dtype, layout_version, tenant, block_size): a namespace mounted with
// other ones starts empty, its old files deleted.
func (n Namespace) SameIdentity(o Namespace) bool { return n.identity() == o.identity() }

// identity is the part of n that must match between mounts.
func (n Namespace) identity() catalog.Identity {
	return catalog.Identity{ModelID: n.ModelID, ModelRevision: n.ModelRevision, TokenizerRevision: n.TokenizerRevision,
		KVDType: n.KVDType, LayoutVersion: n.LayoutVersion, Tenant: n.Tenant, BlockSize: n.BlockSize}
}

// CacheMode says whether the kernel page cache holds file data.
type CacheMode int

const (
	// CacheKeep (the default) lets the kernel page cache keep file data
	// across opens (FOPEN_KEEP_CACHE), so a cached read costs the OPEN
	// request and nothing else. A read-only open of a file that is open
	// for writing gets FOPEN_DIRECT_IO instead (a tail reader must never
	// see st_size S and then read less than S; see fileNode.Open). G2 and
	// the page cache may hold the same bytes; opens with O_DIRECT (or
	// F_SETFL O_DIRECT) bypass the page cache through the kernel's
	// direct_IO path.
	CacheKeep CacheMode = iota
	// CacheDirect answers every OPEN with FOPEN_DIRECT_IO: the page cache
	// never holds file data (G2 is the only DRAM copy) and every read and
	// write is a request. Shared mmap still works (the kernel is asked to
	// allow mmap on direct-I/O files).
	CacheDirect
)

// Options configure Mount. The zero value serves one namespace "default".
type Options struct {
	// Namespaces are the top-level directories; empty means one
	// namespace DefaultNamespace (uid 0, gid 0, mode DefaultNamespaceMode).
	Namespaces []Namespace
	// TreePath is the bbolt file holding the namespace tree (required).
	TreePath string
	// Logger receives the package's logs (default slog.Default()).
	Logger *slog.Logger

	// EntryTimeout, AttrTimeout and NegativeTimeout are how long the
	// kernel caches names, attributes and failed lookups. 0 means
	// DefaultTimeout; a negative value disables that cache.
	// NegativeTimeout applies at the mount root only: a failed lookup
	// inside a namespace is a KV miss, counted each time (lookups.go),
	// and never cached.
	EntryTimeout, AttrTimeout, NegativeTimeout time.Duration
	// StatfsCapacity is f_blocks × f_bsize that statfs reports for a
	// namespace without a quota (and for the mount root), in bytes. 0
	// means the store's capacity (Backend.Capacity: G2 + G3). Set it when
	// an unbounded G4 should let engines keep more than the fast tiers
	// hold. See fsys.statfs.
	StatfsCapacity int64
	// Cache chooses what the page cache holds (default CacheKeep).
	Cache CacheMode
	// WritebackCache enables FUSE writeback-cache mode: write(2) lands in
	// the page cache and reaches the store later (at close, fsync, or
	// memory pressure), so write errors such as EDQUOT surface at close or
	// fsync instead of at write. Off by default.
	WritebackCache bool
	// NoPassthrough turns FUSE passthrough off (see passthrough.go): every
	// READ and WRITE then goes through the daemon. Passthrough is also off
	// without root, with WritebackCache, or on a kernel that does not
	// offer it (Server.Passthrough says why).
	NoPassthrough bool
	// PassthroughWrites serves opens for writing (and CREATE) by
	// passthrough too: writes then never reach the daemon, but land in
	// memory unchecked by the dirty bound and the G2 budget until the
	// writer's fsync or close (the file's size is bounded only at open,
	// by the backend). Off by default.
	PassthroughWrites bool
	// MaxWrite is the largest READ/WRITE request in bytes (default
	// DefaultMaxWrite, capped by the kernel).
	MaxWrite int
	// ReadAhead is the kernel readahead window in bytes for buffered
	// reads (default MaxWrite: sequential reads then reach the daemon as
	// 1 MiB requests). FUSE INIT cannot negotiate more than 128 KiB, so
	// the mount's read_ahead_kb in /sys/class/bdi is set after mounting
	// (needs root; on failure the kernel's 128 KiB stays).
	ReadAhead int
	// KernelFiles bounds how many files the kernel keeps looked up (their
	// dentries and inodes there, and go-fuse's Inode here): past it, the
	// least recently used files that are not open have their entries
	// invalidated so the kernel forgets them (forget.go). 0: no bound.
	KernelFiles int
	// MaxBackground is the kernel's limit of asynchronous requests
	// (default DefaultMaxBackground).
	MaxBackground int
	// CommitInterval bounds how long changes of times alone, which are not
	// logged, wait for a commit (default DefaultCommitInterval).
	CommitInterval time.Duration
	// Debug logs every FUSE request (go-fuse debug output).
	Debug bool
	// ObserveLatency, when set, is called once per FUSE request the
	// daemon answers, with its op ("lookup", "open", "create", "read",
	// "write", "flush", "fsync", "release", "getattr", "setattr",
	// "unlink", "rename", "mkdir") and the time the daemon spent on it.
	// It must be safe for concurrent use and fast (it runs on the request
	// path). Passthrough reads and writes never reach the daemon.
	ObserveLatency func(op string, d time.Duration)
	// Curves, when set, gets every KV lookup (hit or miss) as a reference
	// for the online miss-ratio curves (curves.go, package mrc).
	Curves *mrc.Set
	// RestoreBudget, when set, returns how long an open for reading in
	// namespace ns may take to bring its file up from lower tiers (0: no
	// limit). An open whose Backend.RestoreEstimate exceeds it is answered
	// ENOENT at once, as a miss (the engine recomputes), and the file is
	// prestaged in the background so that the next open finds it in G2
	// (restore.go). Must be fast and safe for concurrent use.
	RestoreBudget func(ns string) time.Duration
	// Remote, when set, resolves names a namespace does not hold locally:
	// a lookup of a missing name inside a namespace asks it and links
	// what it shares as a local directory or file (see Remote). Failed
	// lookups inside namespaces are never cached by the kernel in any
	// case (see NegativeTimeout). nil: off.
	Remote Remote
	// OnChange, when set, is called with the object id of a regular file
	// whose names or completeness may have changed: after the release of
	// its last writer, a rename of it or over it, an unlink, a link, and
	// when the store lost it. It is a hint (look the file up with
	// catalog.Names.Path on Server.Tree, and Server.Writing, later, off
	// this call): it may come more than once, and
	// may be called with the tree lock held, so it must be fast, must not
	// block and must not call back into the Server.
	OnChange func(id tiering.ObjectID)

	// readdirPlusAlways (tests only) makes the kernel use READDIRPLUS for
	// every directory read instead of only when stat calls follow.
	readdirPlusAlways bool
	// commitGap (tests only) overrides catalog.DefaultCommitGap.
	commitGap time.Duration
	// debugLog (tests only) receives go-fuse's request log, as Debug
	// does, so that tests can count the requests an operation costs.
	debugLog *log.Logger
}

// withDefaults validates o and returns a copy with defaults applied.
func (o Options) withDefaults() (Options, error) {
	if o.TreePath == "" {
		return o, errors.New("fusefs: Options.TreePath is required")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	o.EntryTimeout = timeoutDefault(o.EntryTimeout)
	o.AttrTimeout = timeoutDefault(o.AttrTimeout)
	o.NegativeTimeout = timeoutDefault(o.NegativeTimeout)
	if o.MaxWrite <= 0 {
		o.MaxWrite = DefaultMaxWrite
	}
	if o.ReadAhead <= 0 {
		o.ReadAhead = o.MaxWrite
	}
	if o.MaxBackground <= 0 {
		o.MaxBackground = DefaultMaxBackground
	}
	if o.CommitInterval <= 0 {
		o.CommitInterval = DefaultCommitInterval
	}
	if o.commitGap <= 0 {
		o.commitGap = catalog.DefaultCommitGap
	}
	if o.StatfsCapacity < 0 {
		return o, errors.New("fusefs: negative StatfsCapacity")
	}
	if o.Cache != CacheKeep && o.Cache != CacheDirect {
		return o, fmt.Errorf("fusefs: unknown cache mode %d", o.Cache)
	}
	if len(o.Namespaces) == 0 {
		o.Namespaces = []Namespace{{Name: DefaultNamespace, Mode: DefaultNamespaceMode}}
	}
	nss := make([]Namespace, len(o.Namespaces))
	seen := map[string]bool{}
	for i, ns := range o.Namespaces {
		if err := catalog.ValidName(ns.Name); err != nil {
			return o, fmt.Errorf("fusefs: namespace %q: %w", ns.Name, err)
		}
		if seen[ns.Name] {
			return o, fmt.Errorf("fusefs: namespace %q declared twice", ns.Name)
		}
		seen[ns.Name] = true
		if ns.Mode == 0 {
			ns.Mode = DefaultMode
		}
		if ns.Mode&^0o7777 != 0 {
			return o, fmt.Errorf("fusefs: namespace %q: mode %o has bits outside 07777", ns.Name, ns.Mode)
		}
		if ns.BlockSize == 0 {
			ns.BlockSize = DefaultBlockSize
		}
		if ns.BlockSize < minBlockSize || ns.BlockSize > maxBlockSize || ns.BlockSize&(ns.BlockSize-1) != 0 {
			return o, fmt.Errorf("fusefs: namespace %q: block size %d is not a power of two in [4 KiB, 4 MiB]", ns.Name, ns.BlockSize)
		}
		if ns.QuotaBytes < 0 {
			return o, fmt.Errorf("fusefs: namespace %q: negative quota", ns.Name)
		}
		nss[i] = ns
	}
	o.Namespaces = nss
	return o, nil
}

func timeoutDefault(d time.Duration) time.Duration {
	switch {
	case d == 0:
		return DefaultTimeout
	case d < 0:
		return 0
	}
	return d
}
