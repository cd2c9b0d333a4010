// Package fusefs is the FUSE front end of ctxmemd: a thin translator from
// kernel file-system requests to the tiering core (Backend, satisfied by
// *tiering.Store), built on go-fuse's fs API (one small interface per
// operation, each returning syscall.Errno).
//
// # Layout
//
// The mount root is read-only and lists one directory per configured
// Namespace (uid, gid and mode from the configuration, enforced by the
// kernel with default_permissions; allow_other lets every user in).
// Inside a namespace is an ordinary tree: regular files, directories,
// symbolic links and hard links (files only, same namespace; EXDEV across
// namespaces, like any cross-namespace rename). Each regular file is one
// Backend object of kind ObjectKind; devices, FIFOs and sockets are EPERM.
// A file created with O_TMPFILE is supported (and can be named with
// linkat). POSIX and flock locks are kept by the kernel, which is exact
// because every access goes through this one mount.
//
// The tree (names → inode → object id, mode, owner, times, symlink
// targets, user.* xattrs) lives in memory and persists in a bbolt file
// (Options.TreePath) owned by package catalog (schema, write-ahead log,
// loading); sizes come from the store. Inode numbers are
// persistent (a file keeps its number across remounts), never reused
// within a mount, and double as FUSE node ids.
//
// # Kernel caching and timeouts
//
// Every change to the tree and to file data reaches the store through this
// one kernel mount, so what the kernel caches can only go stale when the
// store loses an object. The mount therefore caches aggressively:
//
//   - Names, attributes and failed lookups at the root are cached for an
//     hour by default (Options.EntryTimeout, AttrTimeout,
//     NegativeTimeout); a failed lookup inside a namespace is a KV miss,
//     counted (Server.Lookups) and never cached. When
//     the store loses an object (Backend.OnLost), its names are removed
//     and the kernel is told (FUSE notify delete + inode invalidation), so
//     the next lookup is ENOENT and readers holding it open get EIO.
//   - File data (Options.Cache): with CacheKeep (default) files are opened
//     with FOPEN_KEEP_CACHE, so the page cache is kept across opens and a
//     cached open+read+close costs one OPEN request and no READ. Every
//     OPEN is answered (no FUSE no_open) so that the daemon knows which
//     files are open for writing: a read-only open of such a file gets
//     FOPEN_DIRECT_IO instead, because a cached reader could otherwise see
//     st_size S and then read less than S while the file grows (see
//     fileNode.Open). FLUSH is answered ENOSYS once, after which close(2)
//     sends nothing but the asynchronous RELEASE.
//     The page cache and G2 may then hold the same bytes: the page cache
//     is the tier above G2, and its hits are invisible to the store's hit
//     counters. Data cache invalidation is explicit
//     (FUSE_EXPLICIT_INVAL_DATA): an mtime change seen in a GETATTR does
//     not throw pages away. CacheDirect instead answers every OPEN with
//     FOPEN_DIRECT_IO so only G2 holds file data in DRAM.
//   - Writes are write-through by default: write(2) returns once the store
//     has the bytes (visible to every reader, quota errors reported right
//     there), and the written pages stay cached for later reads.
//     Options.WritebackCache switches to FUSE writeback-cache mode, where
//     writes are buffered by the kernel and reach the store at close,
//     fsync or memory pressure — errors such as EDQUOT then surface at
//     close or fsync.
//   - Sequential buffered reads use a 1 MiB readahead window
//     (Options.ReadAhead, set on the mount's bdi), so a cold 256 KiB read
//     is one READ request.
//   - Directory listings are not cached. READDIRPLUS is used adaptively
//     (only when stat calls follow a listing).
//   - The mount negotiates FUSE_HANDLE_KILLPRIV_V2 and clears
//     setuid/setgid itself, so the kernel can skip the GETXATTR
//     security.capability it would otherwise send before every write(2).
//   - It negotiates FUSE_ATOMIC_O_TRUNC: open(O_TRUNC) of an existing file
//     truncates in the OPEN (fileNode.Open), with no SETATTR after it.
//
// # O_DIRECT
//
// O_DIRECT is accepted at open and with fcntl(F_SETFL). Such I/O bypasses
// the page cache through the kernel's direct_IO path (in CacheKeep mode,
// where opens get FOPEN_KEEP_CACHE) and is split into requests of at most
// Options.MaxWrite bytes (1 MiB), sent concurrently (FUSE async DIO, also
// for io_submit). Alignment is not enforced: statfs reports f_bsize =
// f_frsize = 4096, the unit engines align to, but misaligned O_DIRECT I/O
// works too (it is never bounced through cached pages).
//
// # Reads and writes
//
// A read(2) or write(2) of a regular file is never short except at end of
// file, whatever its size (32 MiB single calls are tested): the kernel
// splits it into requests and the daemon completes each one whole.
// Concurrent writes to different ranges of one file proceed in parallel.
// Quota (Namespace.QuotaBytes) counts the sum of file sizes, unlinked
// files still open included; a write, truncate or fallocate growing past
// it fails with EDQUOT. fallocate mode 0 extends the size and is refused
// with ENOSPC when statfs shows too little room; every other mode is
// EOPNOTSUPP. Holes read as zeros. atime follows relatime at the release
// of each open for reading (reads themselves often never reach the
// daemon), and utimensat.
//
// # Unlink, rename and directory listings
//
// Rename is atomic and may replace an existing file; RENAME_NOREPLACE and
// RENAME_EXCHANGE are supported. A file that loses its last name while
// open (unlink, rename over it) stays readable through the open
// descriptors; its object is deleted when the kernel forgets the inode,
// which is after the last close. A directory listing is a cursor over
// entries ordered by a per-directory sequence number that never changes
// while the entry exists, so listings of 100,000+ entries are complete
// and free of duplicates while other processes create, rename and unlink:
// every entry that exists throughout appears exactly once.
//
// # fsync and durability
//
// Every tree change (create, mkdir, rename, unlink, link, chmod, chown,
// xattr) is appended to a write-ahead log next to the tree database
// (TreePath.wal.*) before the operation returns: one write(2), no fsync.
// An acknowledged change therefore survives kill -9 of the daemon (it is
// in the OS page cache) but not a power failure, and a create never waits
// for a disk flush. A committer goroutine copies the changes into the
// bbolt database (opened NoSync) in batches at most every 2 ms; the log is
// replayed at the next mount if the daemon died first. Changes of times
// alone (the mtime of a write, utimensat, a truncate) are not logged and
// reach the database within Options.CommitInterval.
//
// fsync(2) and fdatasync(2) call Backend.Flush (every dirty block of the
// file written below G2, to G3 or G4) and then commit the whole tree and
// fdatasync the database: once fsync returns, the file's bytes and its
// current name survive kill -9 and power loss (as far as the store's Flush
// guarantees). fsync on a directory makes the tree durable the same way.
// If neither the log nor the database can be written, the operation fails
// with EIO (the change stays in effect in memory and is retried).
//
// At mount, the tree is reconciled with Backend.Objects(): entries whose
// object is gone are removed (ENOENT), objects of kind ObjectKind that no
// entry references (e.g. files unlinked while open at a crash) are
// deleted, a namespace whose identity (model, revision, tokenizer, dtype,
// layout, tenant, block size) changed starts empty, and the subtrees of
// namespaces no longer configured are kept but not served. A stale mount
// left by a crashed daemon is detached before mounting; a live one is
// refused (ErrBusy).
//
// # Interrupts
//
// The kernel sends FUSE INTERRUPT for any signal the caller receives —
// including SIGURG, which the Go runtime uses for preemption in every Go
// program. Honouring it while bytes are copied would turn large reads and
// writes into short or failed ones, so reads and the copy of a write run
// to completion on a context that ends only when the mount shuts down.
// Waits are different: a write(2) waiting for G2 room or for the dirty
// bound, and an fsync(2) waiting for write-back, end with EINTR when the
// request is interrupted (opCtx). Without that, a caller killed while the
// tiers below G2 are stuck would sit in D state until they answer (the
// kernel waits uninterruptibly for a request it has sent). Such waits are
// also bounded by the core's write timeout (ENOSPC or EIO).
//
// # Extended attributes
//
// Regular files expose user.ctxmem.tier, .heat, .pin and .prestage (see
// XattrTier and the others). Other user.* attributes are stored on files
// and directories (64 KiB per value, 64 per node); other namespaces are
// ENOTSUP.
package fusefs
