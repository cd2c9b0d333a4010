package pool

import (
	"errors"
	"fmt"
	"io"
	"math/bits"
	"sync"
	"unsafe"

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

const (
	pageSize  = 4096
	pageShift = 12
	// maxClassShift bounds pooled buffers at 8 MiB: the largest record
	// (4 KiB header + 4 MiB payload) rounds up to it.
	maxClassShift = 23
)

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
			buf := alignedAlloc(pageSize)
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

// alignedAlloc returns a zeroed n-byte slice starting on a pageSize
// boundary, as O_DIRECT requires (over-allocate and slice).
func alignedAlloc(n int) []byte {
	b := make([]byte, n+pageSize)
	off := 0
	if a := int(uintptr(unsafe.Pointer(unsafe.SliceData(b))) & (pageSize - 1)); a != 0 {
		off = pageSize - a
	}
	return b[off : off+n : off+n]
}

// isAligned reports whether b is non-empty and starts on a pageSize
// boundary.
func isAligned(b []byte) bool {
	return len(b) > 0 && uintptr(unsafe.Pointer(unsafe.SliceData(b)))&(pageSize-1) == 0
}

// bufPool hands out page-aligned buffers in power-of-two size classes from
// 4 KiB to 8 MiB; larger requests are allocated directly. The zero value
// is ready to use.
type bufPool struct {
	classes [maxClassShift - pageShift + 1]sync.Pool
}

func classOf(n int) int {
	if n <= pageSize {
		return 0
	}
	return bits.Len(uint(n-1)) - pageShift
}

// get returns a page-aligned buffer of exactly n bytes; its contents are
// undefined.
func (p *bufPool) get(n int) []byte {
	c := classOf(n)
	if c >= len(p.classes) {
		return alignedAlloc(n)
	}
	if b, ok := p.classes[c].Get().(*[]byte); ok {
		return (*b)[:n]
	}
	return alignedAlloc(1 << (c + pageShift))[:n]
}

// put returns b, obtained from get, for reuse.
func (p *bufPool) put(b []byte) {
	c := classOf(cap(b))
	if c >= len(p.classes) || cap(b) != 1<<(c+pageShift) {
		return
	}
	b = b[:cap(b)]
	p.classes[c].Put(&b)
}

// pwriteFull writes all of b at off, retrying short writes and EINTR.
func pwriteFull(fd int, b []byte, off int64) error {
	for len(b) > 0 {
		n, err := unix.Pwrite(fd, b, off)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrShortWrite
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}

// pwritevFull writes the buffers contiguously from off, retrying short
// writes and EINTR.
func pwritevFull(fd int, iovs [][]byte, off int64) error {
	iovs = append([][]byte(nil), iovs...)
	for len(iovs) > 0 {
		n, err := unix.Pwritev(fd, iovs, off)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrShortWrite
		}
		off += int64(n)
		for n > 0 {
			m := min(n, len(iovs[0]))
			iovs[0] = iovs[0][m:]
			n -= m
			if len(iovs[0]) == 0 {
				iovs = iovs[1:]
			}
		}
		for len(iovs) > 0 && len(iovs[0]) == 0 {
			iovs = iovs[1:]
		}
	}
	return nil
}

// preadFull reads exactly len(b) bytes at off; reading past the end of the
// device returns io.ErrUnexpectedEOF.
func preadFull(fd int, b []byte, off int64) error {
	for len(b) > 0 {
		n, err := unix.Pread(fd, b, off)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrUnexpectedEOF
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}
