package pool

import (
	"github.com/ctxmem/ctxmemd/internal/directio"

	"context"
	"errors"
	"fmt"
	"io"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// Reader reads records from the pool on behalf of one host. It keeps no
// state about blocks (quarantine and index removal are the caller's) and
// is safe for concurrent use.
type Reader struct {
	p *Pool
}

// NewReader returns a Reader for pool p.
func NewReader(p *Pool) *Reader { return &Reader{p: p} }

// Get reads the block k at loc into dst and returns the number of bytes
// copied: min(len(dst), loc.Length). The whole record is read (O_DIRECT
// where the pool uses it) into an internal aligned buffer and verified,
// then the extent header is read and checked, and only then is a byte
// copied, so on any error dst is untouched. It costs two reads: the
// record, then the extent's 4 KiB header.
//
// Any mismatch is a miss, never bytes of another block:
//
//   - tier.ErrNotFound (wrapped) when the Location is stale: the extent
//     header names another epoch (the extent was leased again) or none
//     (Reclaim); or there is no record header at loc (never written, or
//     the middle of a newer record); or the record there is of another
//     pool, offset, extent, epoch, key (namespace, object, index,
//     generation) or length; or loc lies outside the pool. A record that
//     fails its CRC32C while the extent header names another epoch is
//     also ErrNotFound: it was torn by the extent's new holder.
//   - tier.ErrCorrupt (wrapped) when the record header, the payload or
//     the extent header fails its CRC32C (or is malformed) while the
//     extent is still stamped with loc.Epoch, or the device ends inside
//     the record: a torn or damaged write, or bit rot. The caller should
//     count it, quarantine the block and drop the index entry.
//
// Other errors are I/O errors, tier.ErrClosed and ctx.Err().
func (r *Reader) Get(ctx context.Context, k tier.Key, loc Location, dst []byte) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	sb := r.p.sb
	recLen := recordLen(int(loc.Length))
	if loc.Length == 0 || loc.Length > tier.MaxBlockSize || loc.Extent >= sb.ExtentCount ||
		loc.Offset%pageSize != 0 || loc.Offset < sb.ExtentOffset(loc.Extent)+pageSize ||
		loc.Offset+recLen > sb.ExtentOffset(loc.Extent)+sb.ExtentSize {
		return 0, fmt.Errorf("pool: get %v: location %v outside the pool or its extent: %w", k, loc, tier.ErrNotFound)
	}
	buf := r.p.bufs.Get(int(recLen))
	defer r.p.bufs.Put(buf)
	err := r.p.io(func(fd int) error { return directio.PreadFull(fd, buf, loc.Offset) })
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return 0, fmt.Errorf("pool: get %v at %v: device ends inside the record: %w", k, loc, tier.ErrCorrupt)
	}
	if err != nil {
		return 0, fmt.Errorf("pool: get %v at %v: %w", k, loc, err)
	}
	if err := r.verify(buf, k, loc); err != nil {
		// A checksum failure in an extent stamped with another epoch is
		// the new holder's writing, not rot: the Location is stale
		// (ErrNotFound rather than ErrCorrupt).
		if !errors.Is(err, tier.ErrCorrupt) {
			return 0, fmt.Errorf("pool: get %v at %v: %w", k, loc, err)
		}
		if serr := r.p.checkStamp(loc.Extent, loc.Epoch); errors.Is(serr, tier.ErrNotFound) {
			err = fmt.Errorf("%v; %w", err, serr)
		}
		return 0, fmt.Errorf("pool: get %v at %v: %w", k, loc, err)
	}
	// Read the extent header after the record: if it still holds our
	// epoch, no later holder had started writing the extent (a Writer
	// stamps before its first record) when the record read completed, so
	// the record was not torn by a reuse race.
	if err := r.p.checkStamp(loc.Extent, loc.Epoch); err != nil {
		return 0, fmt.Errorf("pool: get %v at %v: %w", k, loc, err)
	}
	return copy(dst, buf[headerSize:headerSize+int(loc.Length)]), nil
}

// verify checks the record read into buf against k and loc.
func (r *Reader) verify(buf []byte, k tier.Key, loc Location) error {
	h, err := decodeHeader(buf)
	switch {
	case errors.Is(err, errNotRecord):
		return fmt.Errorf("%v: %w", err, tier.ErrNotFound)
	case err != nil:
		return fmt.Errorf("%v: %w", err, tier.ErrCorrupt)
	}
	if why := mismatch(&h, r.p.sb, k, loc); why != "" {
		return fmt.Errorf("stale location: %s: %w", why, tier.ErrNotFound)
	}
	if got := tier.Checksum(buf[headerSize : headerSize+int(loc.Length)]); got != h.payloadCRC {
		return fmt.Errorf("payload CRC32C %08x, header says %08x: %w", got, h.payloadCRC, tier.ErrCorrupt)
	}
	return nil
}

// mismatch returns why header h is not the record of k at loc, or "".
func mismatch(h *recordHeader, sb Superblock, k tier.Key, loc Location) string {
	switch {
	case h.poolID != sb.PoolID:
		return "record of another pool"
	case h.offset != loc.Offset:
		return fmt.Sprintf("record of offset %d", h.offset)
	case h.extent != loc.Extent:
		return fmt.Sprintf("record of extent %d", h.extent)
	case h.epoch != loc.Epoch:
		return fmt.Sprintf("record of epoch %d (extent leased again)", h.epoch)
	case h.key != k:
		return fmt.Sprintf("record of %v", h.key)
	case h.length != loc.Length:
		return fmt.Sprintf("record of %d bytes", h.length)
	}
	return ""
}
