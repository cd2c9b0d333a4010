package pool

import (
	"github.com/ctxmem/ctxmemd/internal/directio"

	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// IOMode is how a Pool does its I/O on the device.
type IOMode int

const (
	// ModeDirect is O_DIRECT I/O with 4 KiB-aligned buffers, offsets and
	// lengths: the only mode that is correct on a block device shared by
	// several hosts (each host's page cache would otherwise serve stale
	// bytes).
	ModeDirect IOMode = iota + 1
	// ModeBuffered is ordinary page-cache I/O, used when the file system
	// refuses O_DIRECT or when asked for (OpenOptions.Buffered). It is
	// for tests and single-host pools on a plain file: every process on
	// one machine shares that machine's page cache.
	ModeBuffered
)

// String returns "direct" or "buffered".
func (m IOMode) String() string {
	switch m {
	case ModeDirect:
		return "direct"
	case ModeBuffered:
		return "buffered"
	}
	return fmt.Sprintf("IOMode(%d)", int(m))
}

// pageSize is the O_DIRECT alignment (bytes).
const pageSize = directio.PageSize

// openFunc opens a file like unix.Open; tests replace it to make O_DIRECT
// fail the way a file system that refuses it does.
type openFunc func(path string, flags int, perm uint32) (int, error)

// openDevice opens path read-write (flags may add O_CREAT), with O_DIRECT
// unless buffered is set or the file system refuses it, and returns the
// mode it got. Refusal is EINVAL (or EOPNOTSUPP) from open, or EINVAL from
// an aligned 4 KiB read at offset 0 (some file systems accept the flag at
// open and fail the I/O). Any other error is returned.
func openDevice(path string, flags int, buffered bool, open openFunc) (int, IOMode, error) {
	if open == nil {
		open = unix.Open
	}
	flags |= unix.O_RDWR | unix.O_CLOEXEC
	if !buffered {
		fd, err := open(path, flags|unix.O_DIRECT, 0o600)
		switch {
		case err == nil:
			buf := directio.AlignedAlloc(pageSize)
			_, err = unix.Pread(fd, buf, 0)
			if err == nil {
				return fd, ModeDirect, nil
			}
			unix.Close(fd)
			if !errors.Is(err, unix.EINVAL) {
				return -1, 0, fmt.Errorf("pool: probe O_DIRECT read of %s: %w", path, err)
			}
		case errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP):
		default:
			return -1, 0, fmt.Errorf("pool: open %s: %w", path, err)
		}
	}
	fd, err := open(path, flags, 0o600)
	if err != nil {
		return -1, 0, fmt.Errorf("pool: open %s: %w", path, err)
	}
	return fd, ModeBuffered, nil
}
