// Package directio holds the helpers O_DIRECT file I/O needs, shared by
// the G3 segment store and the G3.5 pool: page-aligned buffers (a pool of
// them in power-of-two size classes), and positional reads and writes that
// retry short transfers and EINTR.
package directio

import (
	"errors"
	"io"
	"math/bits"
	"slices"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// PageSize is the alignment O_DIRECT needs here (bytes).
const PageSize = 4096

const (
	pageShift     = 12
	maxClassShift = 24 // 16 MiB: a 4 MiB block with its header fits in 8 MiB
)

// AlignedAlloc returns a zeroed n-byte slice whose first byte sits on a
// PageSize boundary (over-allocate and slice).
func AlignedAlloc(n int) []byte {
	b := make([]byte, n+PageSize)
	off := 0
	if a := int(uintptr(unsafe.Pointer(unsafe.SliceData(b))) & (PageSize - 1)); a != 0 {
		off = PageSize - a
	}
	return b[off : off+n : off+n]
}

// IsAligned reports whether b is non-empty and starts on a PageSize
// boundary.
func IsAligned(b []byte) bool {
	return len(b) > 0 && uintptr(unsafe.Pointer(unsafe.SliceData(b)))&(PageSize-1) == 0
}

// BufPool hands out page-aligned buffers in power-of-two size classes from
// one page to 16 MiB; larger requests are allocated directly. The zero
// value is ready to use.
type BufPool struct {
	classes [maxClassShift - pageShift + 1]sync.Pool
}

func classOf(n int) int {
	if n <= PageSize {
		return 0
	}
	return bits.Len(uint(n-1)) - pageShift
}

// Get returns a page-aligned buffer of exactly n bytes (contents undefined).
func (p *BufPool) Get(n int) []byte {
	c := classOf(n)
	if c >= len(p.classes) {
		return AlignedAlloc(n)
	}
	if b, ok := p.classes[c].Get().(*[]byte); ok {
		return (*b)[:n]
	}
	return AlignedAlloc(1 << (c + pageShift))[:n]
}

// Put returns b, obtained from Get, for reuse.
func (p *BufPool) Put(b []byte) {
	c := classOf(cap(b))
	if c >= len(p.classes) || cap(b) != 1<<(c+pageShift) {
		return
	}
	b = b[:cap(b)]
	p.classes[c].Put(&b)
}

// PwriteFull writes all of b at off, retrying short writes and EINTR.
func PwriteFull(fd int, b []byte, off int64) error {
	return full(fd, b, off, unix.Pwrite, io.ErrShortWrite)
}

// PreadFull reads exactly len(b) bytes at off; a read past the end of the
// file returns io.ErrUnexpectedEOF.
func PreadFull(fd int, b []byte, off int64) error {
	return full(fd, b, off, unix.Pread, io.ErrUnexpectedEOF)
}

func full(fd int, b []byte, off int64, op func(int, []byte, int64) (int, error), short error) error {
	for len(b) > 0 {
		n, err := op(fd, b, off)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return short
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}

// PwritevFull writes the buffers in order, contiguously from off,
// retrying short writes and EINTR.
func PwritevFull(fd int, iovs [][]byte, off int64) error {
	return vecFull(fd, iovs, off, unix.Pwritev, io.ErrShortWrite)
}

// PreadvFull fills the buffers in order from contiguous bytes at off; a
// read past the end of the file returns io.ErrUnexpectedEOF.
func PreadvFull(fd int, iovs [][]byte, off int64) error {
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
