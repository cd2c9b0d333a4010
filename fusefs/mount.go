package fusefs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ctxmem/ctxmemd/catalog"
	"github.com/ctxmem/ctxmemd/tiering"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// ErrBusy is returned (wrapped) by Mount when something is already mounted
// on the mount point.
var ErrBusy = errors.New("mount point busy")

// Server is a mounted ctxmemd file system.
type Server struct {
	mountpoint string
	fsys       *fsys
	srv        *fuse.Server
	db         *catalog.DB
	cancel     context.CancelFunc
	stopWatch  chan struct{}

	once    sync.Once
	done    chan struct{}
	served  chan struct{}
	closeMu sync.Mutex
}

// Mount serves be at mountpoint. It opens the tree database
// (opts.TreePath), reconciles it with be.Objects() (see reconcile),
// registers be.OnLost, mounts with default_permissions, allow_other,
// fsname "ctxmemd" and subtype "ctxmemd", and serves until Unmount, an
// external unmount, or the cancellation of ctx.
//
// A mount point that is already a mount is refused with an error wrapping
// ErrBusy. A stale FUSE mount left by a crashed daemon (statfs fails with
// ENOTCONN, "transport endpoint is not connected") is lazily unmounted
// first (umount2 MNT_DETACH, falling back to fusermount3 -uz).
func Mount(ctx context.Context, mountpoint string, be Backend, opts Options) (*Server, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	mnt, err := filepath.Abs(mountpoint)
	if err != nil {
		return nil, err
	}
	if err := prepareMountpoint(mnt, o); err != nil {
		return nil, err
	}
	db, err := catalog.Open(o.TreePath)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	f := &fsys{be: be, opts: o, log: o.Logger, ctx: sctx}
	f.t.byObj = map[tiering.ObjectID]*node{}
	f.t.orphans = map[*node]struct{}{}
	for _, ns := range o.Namespaces {
		f.nss = append(f.nss, newNamespace(ns))
	}
	fail := func(err error) (*Server, error) {
		cancel()
		db.Close()
		return nil, err
	}
	seq, err := db.Replay(o.Logger)
	if err != nil {
		return fail(fmt.Errorf("fusefs: %w", err))
	}
	if err := f.reconcile(ctx, db); err != nil {
		return fail(err)
	}
	f.j, err = db.OpenJournal(catalog.JournalConfig{Seq: seq, Logger: o.Logger, Interval: o.CommitInterval,
		Gap: o.commitGap, NextIno: func() uint64 {
			f.t.mu.RLock()
			defer f.t.mu.RUnlock()
			return f.t.nextIno
		}})
	if err != nil {
		return fail(err)
	}
	f.notes = newNotifier()
	f.er = newEntryReclaim(f, o.KernelFiles)
	be.OnLost(f.onLost)

	root := &dirNode{fsys: f, n: f.t.root}
	fsOpts := &fs.Options{
		MountOptions:   f.mountOptions(),
		RootStableAttr: &fs.StableAttr{Ino: rootIno},
		ExternalNodeID: true,
		// Zero permission bits are real (a file may be mode 000).
		NullPermissions: true,
		EntryTimeout:    &o.EntryTimeout,
		AttrTimeout:     &o.AttrTimeout,
	}
	if o.NegativeTimeout > 0 {
		fsOpts.NegativeTimeout = &o.NegativeTimeout
	}
	f.fence = newReleaseFence(fs.NewNodeFS(root, fsOpts))
	srv, err := fuse.NewServer(f.fence, mnt, &fsOpts.MountOptions)
	if err != nil {
		f.notes.close()
		f.j.Close()
		return fail(fmt.Errorf("fusefs: mount %s: %w", mnt, err))
	}
	s := &Server{mountpoint: mnt, fsys: f, srv: srv, db: db, cancel: cancel,
		stopWatch: make(chan struct{}), done: make(chan struct{}), served: make(chan struct{})}
	go func() {
		srv.Serve()
		close(s.served)
	}()
	if err := srv.WaitMount(); err != nil {
		srv.Unmount()
		s.shutdown()
		return nil, fmt.Errorf("fusefs: mount %s: %w", mnt, err)
	}
	f.notes.setServer(srv)
	f.er.start()
	f.initPassthrough(srv)
	if err := setReadAhead(mnt, o.ReadAhead); err != nil {
		o.Logger.Warn("fusefs: cannot set readahead; the kernel default applies", "err", err)
	}
	go s.watch(ctx)
	o.Logger.Info("fusefs: mounted", "mountpoint", mnt, "namespaces", len(f.nss), "cache", o.Cache,
		"writeback_cache", o.WritebackCache, "passthrough", f.pt.on.Load())
	return s, nil
}

// mountOptions are the go-fuse mount options for f.
func (f *fsys) mountOptions() fuse.MountOptions {
	o := f.opts
	mo := fuse.MountOptions{
		AllowOther:           true,
		Options:              []string{"default_permissions"},
		FsName:               "ctxmemd",
		Name:                 "ctxmemd",
		MaxWrite:             o.MaxWrite,
		MaxBackground:        o.MaxBackground,
		IgnoreSecurityLabels: true,
		// Replies carry data from the store, never a file descriptor:
		// go-fuse's splice path would only add syscalls per READ.
		DisableSplice:            true,
		ExplicitDataCacheControl: true,
		DirectMount:              os.Geteuid() == 0,
		Debug:                    o.Debug,
		// HANDLE_KILLPRIV_V2: we clear setuid/setgid ourselves (see
		// killPriv), which lets the kernel mark inodes S_NOSEC and skip
		// the GETXATTR security.capability it otherwise sends before
		// every write(2).
		//
		// ATOMIC_O_TRUNC: open(O_TRUNC) of an existing file truncates in
		// the OPEN (fileNode.Open) instead of a SETATTR after it.
		ExtraCapabilities: fuse.CAP_ASYNC_DIO | fuse.CAP_HANDLE_KILLPRIV_V2 | fuse.CAP_READDIRPLUS_AUTO |
			fuse.CAP_ATOMIC_O_TRUNC,
	}
	if o.debugLog != nil {
		mo.Debug, mo.Logger = true, o.debugLog
	}
	if o.readdirPlusAlways {
		mo.ExtraCapabilities &^= fuse.CAP_READDIRPLUS_AUTO
	}
	if o.WritebackCache {
		mo.ExtraCapabilities |= fuse.CAP_WRITEBACK_CACHE
	}
	// Shared mmap must work on direct-I/O opens: every open in
	// CacheDirect mode, tail readers in CacheKeep mode (see Open).
	mo.ExtraCapabilities |= fuse.CAP_DIRECT_IO_ALLOW_MMAP
	return mo
}

// watch unmounts when ctx is cancelled.
func (s *Server) watch(ctx context.Context) {
	select {
	case <-ctx.Done():
		if err := s.Unmount(); err != nil {
			s.fsys.log.Error("fusefs: unmount on cancel", "err", err)
		}
	case <-s.served:
	case <-s.stopWatch:
	}
}

// Mountpoint returns the absolute mount point.
func (s *Server) Mountpoint() string { return s.mountpoint }

// Unmount unmounts the file system (EBUSY while files are open) and waits
// until serving has stopped and the tree database is closed.
func (s *Server) Unmount() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	select {
	case <-s.done:
		return nil
	case <-s.served: // unmounted from outside
		s.shutdown()
		return nil
	default:
	}
	if err := s.srv.Unmount(); err != nil {
		// Busy (a process has its working directory or a file open in
		// the mount): detach it lazily so no new lookup can enter, serve
		// what is in flight for a moment, and stop. Processes still inside
		// then get ENOTCONN instead of a mount left behind.
		if derr := syscall.Unmount(s.mountpoint, syscall.MNT_DETACH); derr != nil {
			return fmt.Errorf("fusefs: unmount %s: %w (lazy detach: %v)", s.mountpoint, err, derr)
		}
		s.fsys.log.Warn("fusefs: mount busy at stop; detached lazily", "mountpoint", s.mountpoint, "err", err)
		select {
		case <-s.served:
		case <-time.After(2 * time.Second):
		}
		s.shutdown()
		return nil
	}
	<-s.served
	s.shutdown()
	return nil
}

// Wait blocks until the file system is unmounted (by Unmount or from
// outside, e.g. fusermount3 -u) and cleaned up.
func (s *Server) Wait() {
	<-s.served
	s.once.Do(s.cleanup)
}

func (s *Server) shutdown() { s.once.Do(s.cleanup) }

// cleanup runs once serving has stopped: nameless files (open at unmount)
// lose their objects, the journal commits, and the database closes.
func (s *Server) cleanup() {
	defer close(s.done)
	close(s.stopWatch)
	f := s.fsys
	f.er.close()
	f.notes.close()
	f.t.mu.Lock()
	var orphans []*node
	for n := range f.t.orphans {
		orphans = append(orphans, n)
		n.gone = true
		delete(f.t.byObj, n.obj)
	}
	clear(f.t.orphans)
	f.t.mu.Unlock()
	for _, n := range orphans {
		f.deleteObject(n)
	}
	f.j.Close()
	s.cancel()
	if err := s.db.Sync(); err != nil {
		f.log.Error("fusefs: sync tree database", "err", err)
	}
	if err := s.db.Close(); err != nil {
		f.log.Error("fusefs: close tree database", "err", err)
	}
	f.log.Info("fusefs: unmounted", "mountpoint", s.mountpoint)
}

// prepareMountpoint refuses a live mount at mnt and clears a stale one. A
// FUSE mount whose daemon died answers statfs (never cached by the kernel,
// unlike stat) with ENOTCONN.
func prepareMountpoint(mnt string, o Options) error {
	stale := false
	var st syscall.Stat_t
	if err := syscall.Stat(mnt, &st); errors.Is(err, syscall.ENOTCONN) {
		stale = true
	} else if fstype, ok := mountedAt(mnt); ok {
		if !strings.HasPrefix(fstype, "fuse") {
			return fmt.Errorf("fusefs: %s already has a %s file system mounted: %w", mnt, fstype, ErrBusy)
		}
		answered, serr := statfsTimeout(mnt, statfsProbeTimeout)
		switch {
		case !answered:
			return fmt.Errorf("fusefs: %s is served by a FUSE daemon that does not answer (abort it: umount -l, or write 1 to /sys/fs/fuse/connections/<dev minor>/abort): %w", mnt, ErrBusy)
		case !errors.Is(serr, syscall.ENOTCONN) && !errors.Is(serr, syscall.ECONNABORTED):
			return fmt.Errorf("fusefs: %s already has a %s file system mounted: %w", mnt, fstype, ErrBusy)
		}
		stale = true
	}
	if stale {
		o.Logger.Warn("fusefs: stale mount (transport endpoint is not connected); detaching", "mountpoint", mnt)
		if err := lazyUnmount(mnt); err != nil {
			return fmt.Errorf("fusefs: clear stale mount at %s: %w", mnt, err)
		}
		if fstype, ok := mountedAt(mnt); ok {
			return fmt.Errorf("fusefs: %s still has a %s file system mounted after detaching a stale one: %w", mnt, fstype, ErrBusy)
		}
	}
	if err := syscall.Stat(mnt, &st); err != nil {
		return fmt.Errorf("fusefs: mount point %s: %w", mnt, err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return fmt.Errorf("fusefs: mount point %s is not a directory", mnt)
	}
	return nil
}

// statfsProbeTimeout bounds the wait for a FUSE daemon already mounted at
// the mount point to answer statfs.
const statfsProbeTimeout = 5 * time.Second

// statfsTimeout runs statfs(path) and reports its error, or answered =
// false if it did not return within d. A daemon stuck in the kernel (for
// example one killed while it had a request to itself in flight) never
// answers; the goroutine making the call then stays blocked in the
// syscall, which cannot be cancelled, until that connection is aborted.
func statfsTimeout(path string, d time.Duration) (answered bool, err error) {
	done := make(chan error, 1)
	go func() {
		var st syscall.Statfs_t
		done <- syscall.Statfs(path, &st)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case err := <-done:
		return true, err
	case <-t.C:
		return false, nil
	}
}

// setReadAhead sets the readahead window (bytes) of the FUSE mount at mnt
// through its backing device info in sysfs.
func setReadAhead(mnt string, bytes int) error {
	var st syscall.Stat_t
	if err := syscall.Stat(mnt, &st); err != nil {
		return err
	}
	path := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev))
	return os.WriteFile(path, []byte(strconv.Itoa(max(bytes>>10, 4))), 0)
}

// lazyUnmount detaches the mount at mnt.
func lazyUnmount(mnt string) error {
	err := syscall.Unmount(mnt, syscall.MNT_DETACH)
	if err == nil {
		return nil
	}
	for _, bin := range []string{"fusermount3", "fusermount"} {
		path, lerr := exec.LookPath(bin)
		if lerr != nil {
			continue
		}
		out, cerr := exec.Command(path, "-uz", mnt).CombinedOutput()
		if cerr == nil {
			return nil
		}
		err = fmt.Errorf("%s -uz: %v: %s", bin, cerr, strings.TrimSpace(string(out)))
	}
	return err
}

// mountedAt reports whether mnt is a mount point, with its fs type, from
// /proc/self/mountinfo.
func mountedAt(mnt string) (string, bool) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint opts [optional...] - fstype source superopts
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 || unescapeMountinfo(fields[4]) != mnt {
			continue
		}
		fstype := "unknown"
		for i, fld := range fields {
			if fld == "-" && i+1 < len(fields) {
				fstype = fields[i+1]
			}
		}
		return fstype, true
	}
	return "", false
}

// unescapeMountinfo undoes the octal escapes (\040 etc.) of mountinfo.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			ok := true
			for _, c := range s[i+1 : i+4] {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + byte(c-'0')
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
