package g3

import (
	"github.com/ctxmem/ctxmemd/internal/directio"

	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// segment is one open segment file. Fields other than the atomics are set
// before the segment is shared and then only read, except as noted.
type segment struct {
	id    uint64
	salt  uint64
	size  int64 // file size in bytes
	path  string
	fd    int
	store *Store

	// refs counts holders of fd: the store itself (1 while the segment is
	// in Store.segs) plus readers in Get. The holder that drops it to zero
	// closes fd, so a reader never reads a closed or reused descriptor.
	refs atomic.Int64
	// unsynced is set by every write to the file since its last
	// fdatasync (Sync syncs only such segments).
	unsynced atomic.Bool

	// Guarded by Store.mu.
	writeOff int64  // next free byte (active segment only)
	inflight int    // reserved records not yet written and published
	keys     []ikey // keys of block and tombstone records written here
}

// segName returns the file name of segment id: 16 hex digits + ".seg", so
// names sort in id order.
func segName(id uint64) string { return fmt.Sprintf("%016x.seg", id) }

// parseSegName returns the id in a segment file name.
func parseSegName(name string) (uint64, bool) {
	hex, ok := strings.CutSuffix(name, ".seg")
	if !ok || len(hex) != 16 {
		return 0, false
	}
	id, err := strconv.ParseUint(hex, 16, 64)
	return id, err == nil
}

// openFlags returns the open(2) flags for segment files.
func (s *Store) openFlags() int {
	f := unix.O_RDWR | unix.O_CLOEXEC
	if s.direct {
		f |= unix.O_DIRECT
	}
	return f
}

// createSegment creates, preallocates and stamps segment id. On any error
// the file is removed; ENOSPC comes back as an error wrapping both
// unix.ENOSPC and tier.ErrNoSpace.
func (s *Store) createSegment(id uint64) (*segment, error) {
	path := filepath.Join(s.opts.Dir, segName(id))
	fd, err := unix.Open(path, s.openFlags()|unix.O_CREAT|unix.O_EXCL, 0o600)
	if err != nil {
		return nil, ioErr("create segment", path, err)
	}
	fail := func(op string, err error) (*segment, error) {
		unix.Close(fd)
		os.Remove(path)
		return nil, ioErr(op, path, err)
	}
	// Preallocate so that record writes never meet ENOSPC half-way; fall
	// back to a sparse file where fallocate is unsupported.
	if err := unix.Fallocate(fd, 0, 0, s.opts.SegmentBytes); err != nil {
		if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.ENOSYS) {
			return fail("preallocate segment", err)
		}
		if err := unix.Ftruncate(fd, s.opts.SegmentBytes); err != nil {
			return fail("size segment", err)
		}
	}
	h, err := s.stampHeader(fd, id, s.opts.SegmentBytes)
	if err != nil {
		return fail("write segment header", err)
	}
	seg := &segment{id: id, salt: h.salt, size: s.opts.SegmentBytes, path: path, fd: fd, store: s, writeOff: segHeaderLen}
	seg.refs.Store(1)
	s.dirDirty.Store(true)
	seg.unsynced.Store(true)
	return seg, nil
}

// spare is a reclaimed segment file kept open for reuse, named
// "<id>.spare" so that Open does not read it as part of the log.
type spare struct {
	seg  *segment // its previous life; seg.fd is reused
	path string
}

func spareName(id uint64) string { return fmt.Sprintf("%016x.spare", id) }

// reuseSegment renames spare sp to segment id and stamps a new header. A
// crash between the two leaves a newest segment whose header names another
// id, which Open removes.
func (s *Store) reuseSegment(sp *spare, id uint64) (*segment, error) {
	path := filepath.Join(s.opts.Dir, segName(id))
	if err := os.Rename(sp.path, path); err != nil {
		return nil, err
	}
	s.dirDirty.Store(true)
	sp.seg.unsynced.Store(true)
	sp.path = path
	h, err := s.stampHeader(sp.seg.fd, id, sp.seg.size)
	if err != nil {
		return nil, ioErr("write segment header", path, err)
	}
	seg := &segment{id: id, salt: h.salt, size: sp.seg.size, path: path, fd: sp.seg.fd, store: s, writeOff: segHeaderLen}
	seg.refs.Store(1)
	return seg, nil
}

// stampHeader writes a new segment header with a random salt at offset 0.
func (s *Store) stampHeader(fd int, id uint64, size int64) (segHeader, error) {
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return segHeader{}, err
	}
	h := segHeader{id: id, salt: binary.LittleEndian.Uint64(rnd[:]), segBytes: uint64(size), created: uint64(time.Now().UnixNano())}
	buf := s.bufs.Get(segHeaderLen)
	defer s.bufs.Put(buf)
	encodeSegHeader(buf, h)
	return h, directio.PwriteFull(fd, buf, 0)
}

// openSpare opens a spare file left by an earlier run.
func (s *Store) openSpare(path string) (*spare, error) {
	fd, err := unix.Open(path, s.openFlags(), 0)
	if err != nil {
		return nil, ioErr("open spare", path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, ioErr("stat spare", path, err)
	}
	if st.Size != s.opts.SegmentBytes {
		unix.Close(fd)
		return nil, fmt.Errorf("g3: spare %s has size %d, segments now have %d", path, st.Size, s.opts.SegmentBytes)
	}
	seg := &segment{size: st.Size, path: path, fd: fd, store: s}
	seg.refs.Store(1)
	return &spare{seg: seg, path: path}, nil
}

// openSegment opens an existing segment file and checks its header.
// A bad header returns errBadSegment.
func (s *Store) openSegment(id uint64) (*segment, error) {
	path := filepath.Join(s.opts.Dir, segName(id))
	fd, err := unix.Open(path, s.openFlags(), 0)
	if err != nil {
		return nil, ioErr("open segment", path, err)
	}
	buf := s.bufs.Get(segHeaderLen)
	defer s.bufs.Put(buf)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, ioErr("stat segment", path, err)
	}
	err = directio.PreadFull(fd, buf, 0)
	h, ok := decodeSegHeader(buf)
	if err != nil || !ok || h.id != id || int64(h.segBytes) > st.Size {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: %s (read error %v)", errBadSegment, path, err)
	}
	seg := &segment{id: id, salt: h.salt, size: int64(h.segBytes), path: path, fd: fd, store: s}
	seg.refs.Store(1)
	return seg, nil
}

var errBadSegment = errors.New("g3: bad segment header")

// acquire takes a reference on seg's descriptor. The caller must know the
// segment is still referenced by the store (it found it under Store.mu).
func (seg *segment) acquire() { seg.refs.Add(1) }

// release drops a reference and closes the descriptor on the last one.
func (seg *segment) release() {
	if seg.refs.Add(-1) == 0 {
		unix.Close(seg.fd)
	}
}

// ioErr wraps a filesystem error with the operation and path; ENOSPC and
// EDQUOT also match tier.ErrNoSpace.
func ioErr(op, path string, err error) error {
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		return fmt.Errorf("g3: %s %s: %w (%w)", op, path, tier.ErrNoSpace, err)
	}
	return fmt.Errorf("g3: %s %s: %w", op, path, err)
}
