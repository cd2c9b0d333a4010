package pool

import (
	"github.com/ctxmem/ctxmemd/internal/directio"

	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// FormatOptions configures Format.
type FormatOptions struct {
	// ExtentSize is the extent size in bytes: a power of two ≥ 1 MiB;
	// 0 means DefaultExtentSize (64 MiB).
	ExtentSize int64
	// Size is the number of bytes of the device to use. A regular file
	// is created or grown (fallocate, else ftruncate) to at least Size; a
	// block device must be at least Size bytes. 0 means the current size.
	// The pool holds floor((Size-DataStart)/ExtentSize) extents; the tail
	// is unused.
	Size int64
	// Force formats over a valid superblock, destroying that pool.
	Force bool
	// Buffered forces buffered I/O instead of O_DIRECT.
	Buffered bool
	// Now is the creation time to record; zero means time.Now().
	Now time.Time

	open openFunc // test hook: replaces unix.Open
}

// OpenOptions configures Open. The zero value opens with O_DIRECT where
// the file system takes it.
type OpenOptions struct {
	// Buffered forces buffered I/O (ModeBuffered) instead of O_DIRECT.
	Buffered bool

	open openFunc // test hook: replaces unix.Open
}

// Pool is one host's handle on a formatted shared pool device. It is safe
// for concurrent use; Readers and Writers on it do their I/O through one
// file descriptor. Each simulated host in a test opens its own Pool.
type Pool struct {
	path string
	sb   Superblock
	mode IOMode
	bufs directio.BufPool

	mu     sync.RWMutex // read-held during I/O, write-held by Close
	fd     int
	closed bool
}

// Format writes a new superblock to the device or file at path and zeroes
// the first 4 KiB of every extent, then fdatasyncs. It refuses (ErrFormatted)
// a device that already holds a valid superblock unless opts.Force is set;
// a damaged or foreign first page is overwritten. It returns the new
// superblock; errors are invalid options (extent size, a size too small for
// one extent) and I/O errors.
func Format(path string, opts FormatOptions) (Superblock, error) {
	es := opts.ExtentSize
	if es == 0 {
		es = DefaultExtentSize
	}
	if es < MinExtentSize || es&(es-1) != 0 {
		return Superblock{}, fmt.Errorf("pool: extent size %d is not a power of two ≥ %d", es, MinExtentSize)
	}
	if opts.Size < 0 {
		return Superblock{}, fmt.Errorf("pool: negative size %d", opts.Size)
	}
	fd, _, err := openDevice(path, unix.O_CREAT, opts.Buffered, opts.open)
	if err != nil {
		return Superblock{}, err
	}
	defer unix.Close(fd)
	size, err := prepareSize(fd, opts.Size)
	if err != nil {
		return Superblock{}, fmt.Errorf("pool: size %s: %w", path, err)
	}
	buf := directio.AlignedAlloc(pageSize)
	if size >= pageSize {
		if err := directio.PreadFull(fd, buf, 0); err != nil {
			return Superblock{}, fmt.Errorf("pool: read superblock of %s: %w", path, err)
		}
		if old, err := decodeSuperblock(buf); err == nil && !opts.Force {
			return Superblock{}, fmt.Errorf("%w: %s holds pool %s (format with force to replace it: ctxmemd pool format --force)", ErrFormatted, path, old.UUID())
		}
	}
	s := Superblock{Version: FormatVersion, ExtentSize: es, DataStart: DataStart, DeviceSize: size, Created: opts.Now}
	if s.Created.IsZero() {
		s.Created = time.Now()
	}
	if size > DataStart {
		n := (size - DataStart) / es
		if n > 1<<32-1 {
			n = 1<<32 - 1
		}
		s.ExtentCount = uint32(n)
	}
	if s.ExtentCount == 0 {
		return Superblock{}, fmt.Errorf("pool: %s: %d bytes hold no %d-byte extent after the %d-byte superblock area", path, size, es, DataStart)
	}
	if _, err := rand.Read(s.PoolID[:]); err != nil {
		return Superblock{}, err
	}
	s.PoolID[6] = s.PoolID[6]&0x0f | 0x40 // RFC 9562 version 4 (random)
	s.PoolID[8] = s.PoolID[8]&0x3f | 0x80 // RFC 9562 variant
	// Zero each extent's first page so a scan of an old layout finds
	// nothing; records of an earlier format fail the pool-id check anyway.
	clear(buf)
	for e := range s.ExtentCount {
		if err := directio.PwriteFull(fd, buf, s.ExtentOffset(e)); err != nil {
			return Superblock{}, fmt.Errorf("pool: wipe extent %d of %s: %w", e, path, err)
		}
	}
	encodeSuperblock(buf, s)
	if err := directio.PwriteFull(fd, buf, 0); err != nil {
		return Superblock{}, fmt.Errorf("pool: write superblock of %s: %w", path, err)
	}
	if err := unix.Fdatasync(fd); err != nil {
		return Superblock{}, fmt.Errorf("pool: sync %s: %w", path, err)
	}
	return s, nil
}

// prepareSize returns the byte size to format over: a regular file is
// grown to want first (fallocate, falling back to ftruncate where the file
// system lacks fallocate); a block device must already be that large.
func prepareSize(fd int, want int64) (int64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, err
	}
	cur, err := deviceSize(fd)
	if err != nil {
		return 0, err
	}
	if want == 0 {
		return cur, nil
	}
	if st.Mode&unix.S_IFMT == unix.S_IFREG && cur < want {
		err := unix.Fallocate(fd, 0, 0, want)
		if errors.Is(err, unix.EOPNOTSUPP) {
			err = unix.Ftruncate(fd, want)
		}
		if err != nil {
			return 0, err
		}
		cur = want
	}
	if cur < want {
		return 0, fmt.Errorf("device has %d bytes, want %d", cur, want)
	}
	return want, nil
}

// deviceSize returns the size in bytes of the open file or block device
// (lseek to the end works for both).
func deviceSize(fd int) (int64, error) {
	return unix.Seek(fd, 0, unix.SEEK_END)
}

// Open opens the pool on the device or file at path: it reads and
// validates the superblock and checks the device size. Errors wrap
// ErrNoSuperblock, ErrUnknownVersion, ErrBadSuperblock, ErrSizeMismatch or
// the I/O error. A device larger than at format time is accepted (the
// extra bytes are unused).
func Open(path string, opts OpenOptions) (*Pool, error) {
	fd, mode, err := openDevice(path, 0, opts.Buffered, opts.open)
	if err != nil {
		return nil, err
	}
	p, err := openFD(path, fd, mode)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return p, nil
}

func openFD(path string, fd int, mode IOMode) (*Pool, error) {
	size, err := deviceSize(fd)
	if err != nil {
		return nil, fmt.Errorf("pool: size of %s: %w", path, err)
	}
	if size < pageSize {
		return nil, fmt.Errorf("%w: %s is %d bytes", ErrNoSuperblock, path, size)
	}
	buf := directio.AlignedAlloc(pageSize)
	if err := directio.PreadFull(fd, buf, 0); err != nil {
		return nil, fmt.Errorf("pool: read superblock of %s: %w", path, err)
	}
	sb, err := decodeSuperblock(buf)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if size < sb.DeviceSize {
		return nil, fmt.Errorf("%w: %s is %d bytes, pool %s was formatted over %d", ErrSizeMismatch, path, size, sb.UUID(), sb.DeviceSize)
	}
	return &Pool{path: path, sb: sb, mode: mode, fd: fd}, nil
}

// Superblock returns the pool's superblock.
func (p *Pool) Superblock() Superblock { return p.sb }

// Mode returns the I/O mode in use (shown by status and checked by tests).
func (p *Pool) Mode() IOMode { return p.mode }

// Path returns the device path the pool was opened from.
func (p *Pool) Path() string { return p.path }

// ExtentOffset returns the byte offset of extent e from the device start.
func (p *Pool) ExtentOffset(e uint32) int64 { return p.sb.ExtentOffset(e) }

// Close closes the device. It waits for I/O in progress; later calls on
// the pool, its Readers and Writers return tier.ErrClosed. Close Writers
// first.
func (p *Pool) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	return unix.Close(p.fd)
}

// io runs fn with the descriptor held open.
func (p *Pool) io(fn func(fd int) error) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return tier.ErrClosed
	}
	return fn(p.fd)
}

// Reclaim zeroes the extent header of l.Extent (its first 4 KiB sector),
// so that every reader holding a Location in the extent misses at once
// (tier.ErrNotFound), whether or not the record it points to is still
// intact, and anything walking the extent from its start finds nothing.
//
// Call it while holding the lease l and before releasing it, and only
// after every global-index entry pointing into the extent has been removed
// (so no reader is sent there any more; the wipe only turns away readers
// that looked the index up before). Correctness does not depend on the
// wipe: the next holder stamps the extent with a new epoch before writing,
// which turns stale Locations away just the same. Writer.Reclaim does
// this and releases the lease.
func (p *Pool) Reclaim(ctx context.Context, l Lease) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if l.Extent >= p.sb.ExtentCount {
		return fmt.Errorf("pool: reclaim extent %d of %d", l.Extent, p.sb.ExtentCount)
	}
	buf := p.bufs.Get(pageSize)
	defer p.bufs.Put(buf)
	clear(buf)
	return p.io(func(fd int) error {
		if err := directio.PwriteFull(fd, buf, p.ExtentOffset(l.Extent)); err != nil {
			return fmt.Errorf("pool: wipe extent %d: %w", l.Extent, err)
		}
		return nil
	})
}

// String describes the pool for logs: path, id, geometry and I/O mode.
func (p *Pool) String() string {
	return fmt.Sprintf("pool %s on %s: %d × %d MiB extents, %s I/O", p.sb.UUID(), p.path, p.sb.ExtentCount, p.sb.ExtentSize>>20, p.mode)
}
