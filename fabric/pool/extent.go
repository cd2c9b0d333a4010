package pool

import (
	"github.com/ctxmem/ctxmemd/internal/directio"

	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// Extent header layout: the first 4 KiB sector of every extent (records
// start after it). A Writer stamps it with its lease when it takes the
// extent, before writing any record there; Reclaim and Format zero it.
// Little-endian, format of this project's own design; bytes from ehUsed to
// 4096 are zero:
//
//	off size field
//	  0    4 magic        "CMXE"
//	  4    2 version      recVersion
//	  6    2 reserved     0
//	  8    4 CRC          CRC32C of bytes [0, ehUsed) with this field zero
//	 12    4 extent       extent number
//	 16   16 pool id      Superblock.PoolID
//	 32    8 epoch        lease epoch of the current holder
//	 40    8 stamped      Unix ns on the holder's clock (diagnostics only)
//	 48    1 host length  ≤ MaxHost
//	 49   64 host         holder host name, zero-padded
const (
	ehMagic = "CMXE"
	ehUsed  = 113
)

// extentHeader is a decoded extent header.
type extentHeader struct {
	extent  uint32
	poolID  [16]byte
	epoch   uint64
	stamped time.Time
	host    string
}

func encodeExtentHeader(buf []byte, h *extentHeader) {
	clear(buf[:pageSize])
	le := binary.LittleEndian
	copy(buf[0:4], ehMagic)
	le.PutUint16(buf[4:], recVersion)
	le.PutUint32(buf[12:], h.extent)
	copy(buf[16:32], h.poolID[:])
	le.PutUint64(buf[32:], h.epoch)
	le.PutUint64(buf[40:], uint64(h.stamped.UnixNano()))
	buf[48] = byte(len(h.host))
	copy(buf[49:49+MaxHost], h.host)
	le.PutUint32(buf[8:], tier.Checksum(buf[:ehUsed]))
}

// decodeExtentHeader parses the extent header page buf. Errors wrap
// errNotRecord (no header: zeroed by Reclaim or Format) or errHeaderCRC.
func decodeExtentHeader(buf []byte) (extentHeader, error) {
	var h extentHeader
	le := binary.LittleEndian
	if len(buf) < pageSize || string(buf[0:4]) != ehMagic || le.Uint16(buf[4:]) != recVersion {
		return h, fmt.Errorf("%w: no extent header", errNotRecord)
	}
	want := le.Uint32(buf[8:])
	le.PutUint32(buf[8:], 0)
	got := tier.Checksum(buf[:ehUsed])
	le.PutUint32(buf[8:], want)
	if got != want || buf[48] > MaxHost {
		return h, fmt.Errorf("%w: extent header CRC32C %08x, stored %08x", errHeaderCRC, got, want)
	}
	h.extent = le.Uint32(buf[12:])
	copy(h.poolID[:], buf[16:32])
	h.epoch = le.Uint64(buf[32:])
	h.stamped = time.Unix(0, int64(le.Uint64(buf[40:])))
	h.host = string(buf[49 : 49+int(buf[48])])
	return h, nil
}

// stampExtent writes the extent header for lease l (held by host) and
// reads it back. The caller holds l.
func (p *Pool) stampExtent(l Lease, host string, now time.Time) error {
	buf := p.bufs.Get(pageSize)
	defer p.bufs.Put(buf)
	encodeExtentHeader(buf, &extentHeader{extent: l.Extent, poolID: p.sb.PoolID, epoch: l.Epoch, stamped: now, host: host})
	back := p.bufs.Get(pageSize)
	defer p.bufs.Put(back)
	off := p.ExtentOffset(l.Extent)
	return p.io(func(fd int) error {
		if err := directio.PwriteFull(fd, buf, off); err != nil {
			return fmt.Errorf("pool: stamp %v: %w", l, err)
		}
		if err := directio.PreadFull(fd, back, off); err != nil {
			return fmt.Errorf("pool: read back stamp of %v: %w", l, err)
		}
		if !bytes.Equal(back, buf) {
			return fmt.Errorf("pool: stamp of %v reads back different: %w", l, tier.ErrCorrupt)
		}
		return nil
	})
}

// checkStamp reads extent e's header and returns nil when it names this
// pool, extent e and epoch, an error wrapping tier.ErrNotFound when the
// extent holds another epoch or none (leased again, reclaimed), and one
// wrapping tier.ErrCorrupt when the header is damaged.
func (p *Pool) checkStamp(e uint32, epoch uint64) error {
	buf := p.bufs.Get(pageSize)
	defer p.bufs.Put(buf)
	if err := p.io(func(fd int) error { return directio.PreadFull(fd, buf, p.ExtentOffset(e)) }); err != nil {
		return err
	}
	h, err := decodeExtentHeader(buf)
	switch {
	case errors.Is(err, errNotRecord):
		return fmt.Errorf("%v (extent reclaimed): %w", err, tier.ErrNotFound)
	case err != nil:
		return fmt.Errorf("%v: %w", err, tier.ErrCorrupt)
	case h.poolID != p.sb.PoolID || h.extent != e:
		return fmt.Errorf("extent header of another pool or extent: %w", tier.ErrNotFound)
	case h.epoch != epoch:
		return fmt.Errorf("extent %d is held under epoch %d by %q now: %w", e, h.epoch, h.host, tier.ErrNotFound)
	}
	return nil
}
