package g3

import (
	"errors"
	"fmt"
	"io"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// probeDirect reports whether dir's filesystem takes O_DIRECT I/O: it
// creates a scratch file with O_DIRECT, writes and reads back one aligned
// page. Filesystems that refuse O_DIRECT fail the open or the I/O with
// EINVAL; those are served with buffered I/O, as is a filesystem too full
// to take the probe page. Any other error is returned.
func probeDirect(dir string) (bool, error) {
	name := filepath.Join(dir, ".direct-probe")
	defer os.Remove(name)
	fd, err := unix.Open(name, unix.O_RDWR|unix.O_CREAT|unix.O_TRUNC|unix.O_DIRECT|unix.O_CLOEXEC, 0o600)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSPC) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("g3: probe O_DIRECT in %s: %w", dir, err)
	}
	defer unix.Close(fd)
	buf := alignedAlloc(pageSize)
	for i := range buf {
		buf[i] = byte(i)
	}
	if err := pwriteFull(fd, buf, 0); err != nil {
		// EINVAL: O_DIRECT refused. ENOSPC/EDQUOT: cannot tell on a full
		// filesystem; buffered I/O is always correct.
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
			return false, nil
		}
		return false, fmt.Errorf("g3: probe O_DIRECT write in %s: %w", dir, err)
	}
	clear(buf)
	if err := preadFull(fd, buf, 0); err != nil {
		if errors.Is(err, unix.EINVAL) {
			return false, nil
		}
		return false, fmt.Errorf("g3: probe O_DIRECT read in %s: %w", dir, err)
	}
	for i := range buf {
		if buf[i] != byte(i) {
			return false, nil
		}
	}
	return true, nil
}

// alignedAlloc returns a zeroed n-byte slice whose first byte sits on a
// pageSize boundary, as O_DIRECT requires (over-allocate and slice).
func alignedAlloc(n int) []byte {
	b := make([]byte, n+pageSize)
	a := int(uintptr(unsafe.Pointer(unsafe.SliceData(b))) & (pageSize - 1))
	off := 0
	if a != 0 {
		off = pageSize - a
	}
	return b[off : off+n : off+n]
}

// bufPool hands out page-aligned buffers in power-of-two size classes from
// one page to maxClass bytes; larger requests are allocated directly.
type bufPool struct {
	classes [maxClassShift - pageShift + 1]sync.Pool
}

const (
	pageShift     = 12
	maxClassShift = 24 // 16 MiB: a 4 MiB block with its header fits in 8 MiB
)

func classOf(n int) int {
	if n <= pageSize {
		return 0
	}
	return bits.Len(uint(n-1)) - pageShift
}

// get returns a page-aligned buffer of exactly n bytes (contents undefined).
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

// put returns b (from get) to the pool.
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

// preadFull reads exactly len(b) bytes at off; a read past the end of the
// file returns io.ErrUnexpectedEOF.
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

// pwritevFull writes the buffers in order, contiguously from off,
// retrying short writes and EINTR.
func pwritevFull(fd int, iovs [][]byte, off int64) error {
	return vecFull(fd, iovs, off, unix.Pwritev, io.ErrShortWrite)
}

// preadvFull fills the buffers in order from contiguous bytes at off; a
// read past the end of the file returns io.ErrUnexpectedEOF.
func preadvFull(fd int, iovs [][]byte, off int64) error {
	return vecFull(fd, iovs, off, unix.Preadv, io.ErrUnexpectedEOF)
}

func vecFull(fd int, iovs [][]byte, off int64, op func(int, [][]byte, int64) (int, error), short error) error {
	iovs = slices.Clone(iovs)
	for len(iovs) > 0 {
		n, err := op(fd, iovs, off)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return short
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

// isAligned reports whether b starts on a pageSize boundary.
func isAligned(b []byte) bool {
	return len(b) > 0 && uintptr(unsafe.Pointer(unsafe.SliceData(b)))&(pageSize-1) == 0
}
