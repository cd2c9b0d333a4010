package workloads

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// pageSize is the O_DIRECT alignment the engines assume (buffer, offset and
// length multiples of 4096).
const pageSize = 4096

// alignedBuf maps n bytes (rounded up to pages) of anonymous memory, which
// is page aligned and off the Go heap, so its address can be handed to the
// kernel in AIO control blocks. free unmaps it.
func alignedBuf(n int) (buf []byte, free func(), err error) {
	size := (n + pageSize - 1) / pageSize * pageSize
	if size == 0 {
		size = pageSize
	}
	m, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, nil, fmt.Errorf("mmap %d bytes: %w", size, err)
	}
	return m[:n], func() { _ = unix.Munmap(m) }, nil
}

// errnoOf returns the errno inside err, or 0.
func errnoOf(err error) unix.Errno {
	var e unix.Errno
	if errors.As(err, &e) {
		return e
	}
	return 0
}

// isNotExist reports whether err is ENOENT.
func isNotExist(err error) bool { return errnoOf(err) == unix.ENOENT }

// retryEINTR calls f until it returns an error other than EINTR.
func retryEINTR(f func() error) error {
	for {
		if err := f(); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// open opens path with flags; with direct it adds O_DIRECT, and when the
// file system refuses O_DIRECT with EINVAL it falls back to buffered I/O
// (as LMCache and NIXL do) unless Params.RequireODirect makes that a failed
// check. It returns the descriptor and whether O_DIRECT is in effect.
func (r *run) open(path string, flags int, perm uint32, direct bool) (int, bool, error) {
	r.op(1)
	if direct {
		var fd int
		err := retryEINTR(func() (e error) { fd, e = unix.Open(path, flags|unix.O_DIRECT|unix.O_CLOEXEC, perm); return })
		if err == nil {
			return fd, true, nil
		}
		if errnoOf(err) != unix.EINVAL {
			return -1, false, err
		}
		r.noteOnce("odirect_open", "EINVAL (fell back to buffered)")
		r.check(!r.p.RequireODirect, "open(%s, O_DIRECT) = EINVAL; the file system must accept O_DIRECT", path)
		r.op(1)
	}
	var fd int
	err := retryEINTR(func() (e error) { fd, e = unix.Open(path, flags|unix.O_CLOEXEC, perm); return })
	return fd, false, err
}

// writeAt writes buf at off in one pwrite (off < 0: one write at the file
// position) and checks that the call was not short. It returns false on any
// error or short count (the failure is recorded).
func (r *run) writeAt(fd int, buf []byte, off int64, what string) bool {
	r.op(1)
	var n int
	err := retryEINTR(func() (e error) {
		if off < 0 {
			n, e = unix.Write(fd, buf)
		} else {
			n, e = unix.Pwrite(fd, buf, off)
		}
		return
	})
	if err != nil {
		r.failf("%s: write of %d bytes at %d: %v", what, len(buf), off, err)
		return false
	}
	r.written.Add(int64(n))
	return r.check(n == len(buf), "%s: single write returned %d of %d bytes (short write)", what, n, len(buf))
}

// readAt reads len(buf) bytes at off in one pread (off < 0: one read at the
// file position). It returns the count and the error; it does not judge.
func (r *run) readAt(fd int, buf []byte, off int64) (int, error) {
	r.op(1)
	var n int
	err := retryEINTR(func() (e error) {
		if off < 0 {
			n, e = unix.Read(fd, buf)
		} else {
			n, e = unix.Pread(fd, buf, off)
		}
		return
	})
	return n, err
}

// closeFD closes fd and records a failure if close reports an error
// (close is where FUSE reports a failed flush).
func (r *run) closeFD(fd int, what string) bool {
	r.op(1)
	err := unix.Close(fd)
	return r.check(err == nil, "%s: close: %v", what, err)
}

// stat stats path, counting the call.
func (r *run) stat(path string) (unix.Stat_t, error) {
	r.op(1)
	var st unix.Stat_t
	err := retryEINTR(func() error { return unix.Stat(path, &st) })
	return st, err
}

// mkdirAll creates dir and its parents one mkdir(2) at a time, tolerating
// EEXIST (another thread won the race) only when the existing entry is a
// directory — the behaviour of os.makedirs(exist_ok=True) that W3 relies on.
func (r *run) mkdirAll(dir string) bool {
	var todo []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if st, err := r.stat(d); err == nil {
			if st.Mode&unix.S_IFMT != unix.S_IFDIR {
				r.failf("mkdir -p %s: %s exists and is not a directory", dir, d)
				return false
			}
			break
		}
		todo = append(todo, d)
		if d == filepath.Dir(d) {
			break
		}
	}
	for i := len(todo) - 1; i >= 0; i-- {
		r.op(1)
		err := unix.Mkdir(todo[i], 0o755)
		if err == nil {
			continue
		}
		if errnoOf(err) != unix.EEXIST {
			r.failf("mkdir -p %s: mkdir %s: %v", dir, todo[i], err)
			return false
		}
		st, serr := r.stat(todo[i])
		if !r.check(serr == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR,
			"mkdir -p race %s: mkdir said EEXIST but stat gives mode %o err %v", todo[i], st.Mode, serr) {
			return false
		}
	}
	return true
}

// readDir returns the names in dir (one full readdir pass).
func (r *run) readDir(dir string) ([]string, error) {
	r.op(1)
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

// expectGone checks that path is absent for stat and for open (ENOENT),
// as every engine assumes right after its own unlink.
func (r *run) expectGone(path, why string) {
	_, err := r.stat(path)
	r.check(isNotExist(err), "%s: stat %s after unlink: err=%v, want ENOENT", why, path, err)
	r.op(1)
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err == nil {
		unix.Close(fd)
	}
	r.check(isNotExist(err), "%s: open %s after unlink: err=%v, want ENOENT", why, path, err)
}

// statfs is one statvfs sample in bytes.
type statfs struct {
	bsize, frsize      int64
	blocks, bfree, bav uint64
}

func (s statfs) free() int64 { return int64(s.bfree) * s.frsize }

// statvfs samples statvfs(dir), checks it is self-consistent (f_bsize and
// f_frsize positive, f_bavail <= f_bfree <= f_blocks, f_bsize == 4096 when
// Params.ExpectBsize4096) and notes f_bsize.
func (r *run) statvfs(dir, why string) (statfs, bool) {
	r.op(1)
	var st unix.Statfs_t
	if err := retryEINTR(func() error { return unix.Statfs(dir, &st) }); err != nil {
		r.failf("%s: statvfs %s: %v", why, dir, err)
		return statfs{}, false
	}
	s := statfs{bsize: st.Bsize, frsize: st.Frsize, blocks: st.Blocks, bfree: st.Bfree, bav: st.Bavail}
	if s.frsize == 0 {
		s.frsize = s.bsize
	}
	r.noteOnce("f_bsize", "%d", st.Bsize)
	r.noteOnce("f_frsize", "%d", st.Frsize)
	ok := r.check(st.Bsize > 0 && st.Frsize >= 0, "%s: statvfs f_bsize=%d f_frsize=%d", why, st.Bsize, st.Frsize)
	ok = r.check(st.Bavail <= st.Bfree && st.Bfree <= st.Blocks,
		"%s: statvfs inconsistent: f_bavail=%d f_bfree=%d f_blocks=%d", why, st.Bavail, st.Bfree, st.Blocks) && ok
	if r.p.ExpectBsize4096 {
		ok = r.check(st.Bsize == 4096, "%s: statvfs f_bsize=%d, want 4096 (gates O_DIRECT in LMCache)", why, st.Bsize) && ok
	}
	return s, ok
}

// expectFreeMove checks, when Params.StatfsTracksUsage, that statvfs free
// bytes of dir moved from before by at least half of delta in delta's
// direction (delta < 0: bytes were written, free space must fall; delta > 0:
// bytes were released). The file system may account lazily, so it syncs and
// re-samples for up to r.statfsWait before failing.
func (r *run) expectFreeMove(dir string, before statfs, delta int64, why string) {
	if !r.p.StatfsTracksUsage || delta == 0 {
		return
	}
	var moved int64
	for deadline := time.Now().Add(r.statfsWait); ; {
		if fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
			_ = unix.Syncfs(fd)
			unix.Close(fd)
		}
		now, ok := r.statvfs(dir, why)
		if !ok {
			return
		}
		moved = now.free() - before.free()
		if (delta < 0 && moved <= delta/2) || (delta > 0 && moved >= delta/2) {
			r.check(true, "")
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.failf("%s: statvfs free space moved by %d bytes, want at least half of %d", why, moved, delta)
}
