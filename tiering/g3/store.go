package g3

import (
	"github.com/ctxmem/ctxmemd/internal/directio"

	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// Store is the G3 tier: a log-structured block store on one directory. It
// implements tier.Tier and is safe for concurrent use.
//
// Lock order: rollMu before mu. mu guards the index, the segment list and
// the per-segment bookkeeping; rollMu serialises segment roll-over and
// reclaim (it is held while OnEvict runs). No I/O happens under mu.
type Store struct {
	opts Options
	// probeGate keeps probes of a hung device from piling up (Probe).
	probeGate tier.ProbeGate
	log       *slog.Logger
	direct    bool
	maxBlock  int
	lockFD    int
	bufs      directio.BufPool

	rollMu sync.Mutex
	// dirDirty is set when a segment file is created, renamed or removed
	// since the directory's last fsync (Sync).
	dirDirty atomic.Bool

	mu        sync.RWMutex
	drained   *sync.Cond // on mu; signalled when a segment's inflight drops to 0
	closed    bool
	index     map[ikey]entry    // by key: the newest record
	nsID      map[string]uint32 // namespace ids of the index keys (index.go)
	nsName    []string
	segs      []*segment // oldest first
	active    *segment   // the segment records are appended to; nil until needed
	spares    []*spare   // reclaimed segment files kept for reuse
	nextSeq   uint64
	nextSegID uint64
	used      int64 // bytes of live payload
	blocks    int64 // live blocks

	st counters

	// postpone is set by PostponeReclaim from inside OnEvict.
	postpone atomic.Bool
	// demoter is the core's port (SetDemoter); when set it takes the live
	// blocks of reclaimed segments instead of Options.OnEvict.
	demoter atomic.Pointer[tier.Demoter]

	// testHook, when set by a test before use, is called at named points
	// of internal sequences ("reclaim-evicted": OnEvict returned, the
	// segment is still in the log on disk).
	testHook func(point string)
}

// entry locates the newest record of a key. A tomb entry marks a key
// deleted (or quarantined) as of seq, so that a Put with an older sequence
// number still in flight cannot bring it back; it is dropped with its
// segment.
type entry struct {
	seg  *segment
	off  int64 // byte offset of the record in the segment
	seq  uint64
	plen uint32 // bytes of payload
	// hdrLen is the bytes of record header: at most 4 pages (decodeRecord
	// rejects more), so 16 bits; the fields are ordered so that an entry
	// is 32 B (issue 17: one per block stored).
	hdrLen uint16
	tomb   bool
	// quarantined marks a tomb entry set by a read that found the record
	// corrupt (corrupt): unlike a deleted key's, its record is still in
	// the log with no tombstone over it, so Delete writes one.
	quarantined bool
}

// A record header must fit entry.hdrLen.
const _ = uint16(4 * pageSize)

type counters struct {
	crcErrors, torn, damagedSegs, reclaims, evicted, noSpace atomic.Int64
	syncs, relocated, postponed                              atomic.Int64
	putBytes, compacted, compactedBytes                      atomic.Int64
}

// Stats are the store's counters since Open plus its current shape.
type Stats struct {
	// CRCErrors counts blocks quarantined because a read found a payload
	// checksum, header checksum or header field mismatch.
	CRCErrors int64
	// TornRecords counts records dropped by Open in the newest segment: a
	// header that fails its checks or a payload that fails its CRC32C (a
	// write cut short by a crash). A torn block record hides older copies
	// of its key (the key reads as not found).
	TornRecords int64
	// DamagedSegments counts segments dropped by Open because a segment or
	// record header in a sealed segment was damaged; every older segment is
	// dropped with it (see package doc).
	DamagedSegments int64
	// Reclaims counts segments reclaimed (watermark or ENOSPC).
	Reclaims int64
	// Evicted counts live blocks dropped by reclaim.
	Evicted int64
	// NoSpace counts ENOSPC/EDQUOT errors from the filesystem.
	NoSpace int64
	// Syncs counts segment fdatasyncs done by Sync (only segments written
	// since their last one are synced).
	Syncs int64
	// Relocated counts blocks Relocate kept through a reclaim.
	Relocated int64
	// Postponed counts reclaims given up because OnEvict called
	// PostponeReclaim.
	Postponed int64
	// PutBytes is the payload bytes written by Put; Compacted and
	// CompactedBytes count the live blocks (and their payload bytes)
	// reclaim copied forward (Options.CompactLive). Write amplification
	// of the cleaner is (PutBytes + CompactedBytes) / PutBytes.
	PutBytes, Compacted, CompactedBytes int64
	// Segments is the number of segments in the log; SegmentBytes the
	// bytes of all segment files, spares (reclaimed files kept for reuse)
	// included.
	Segments     int
	SegmentBytes int64
	// Direct reports whether segment I/O uses O_DIRECT.
	Direct bool
}

var _ tier.Tier = (*Store)(nil)

// Open opens (creating if needed) the store in opts.Dir, rebuilding the
// index from the segment files (see package doc for recovery rules). Only
// one Store may have a directory open at a time (an flock on Dir/LOCK);
// a second Open fails.
func Open(opts Options) (*Store, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("g3: %w", err)
	}
	lockFD, err := unix.Open(filepath.Join(o.Dir, "LOCK"), unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, ioErr("open lock", o.Dir, err)
	}
	if err := unix.Flock(lockFD, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		unix.Close(lockFD)
		return nil, fmt.Errorf("g3: %s is in use by another store: %w", o.Dir, err)
	}
	s := &Store{opts: o, log: o.Logger.With("tier", "G3", "dir", o.Dir), lockFD: lockFD, index: map[ikey]entry{}, nsID: map[string]uint32{}, nextSeq: 1, nextSegID: 1}
	s.drained = sync.NewCond(&s.mu)
	s.maxBlock = maxBlockFor(o.SegmentBytes)
	if !o.NoDirect {
		if s.direct, err = probeDirect(o.Dir); err != nil {
			unix.Close(lockFD)
			return nil, err
		}
	}
	if err := s.recover(); err != nil {
		for _, sp := range s.spares {
			sp.seg.release()
		}
		unix.Close(lockFD)
		return nil, err
	}
	s.log.Info("G3 open", "segments", len(s.segs), "blocks", s.blocks, "used_bytes", s.used,
		"direct", s.direct, "torn", s.st.torn.Load(), "damaged_segments", s.st.damagedSegs.Load())
	return s, nil
}

// maxBlockFor returns the largest payload in bytes (a multiple of 4096, at
// most tier.MaxBlockSize) whose record fits in a segment of segBytes for any
// namespace.
func maxBlockFor(segBytes int64) int {
	longNS := strings.Repeat("x", maxNamespace)
	for n := tier.MaxBlockSize; n > 0; n -= pageSize {
		if int64(recordLen(longNS, n)) <= segBytes-segHeaderLen {
			return n
		}
	}
	return 0
}

// Name returns "G3".
func (s *Store) Name() string { return "G3" }

// MaxBlock returns the largest block in bytes Put accepts:
// tier.MaxBlockSize unless SegmentBytes is below 4 MiB + 12 KiB.
func (s *Store) MaxBlock() int { return s.maxBlock }

// Direct reports whether the store does O_DIRECT I/O.
func (s *Store) Direct() bool { return s.direct }

// Put appends data as the newest copy of block k. It returns once the
// record is written to the segment file (it survives a kill -9, not a power
// cut: see Sync). Errors: tier.ErrTooLarge above MaxBlock, tier.ErrNoSpace
// when the filesystem is full and no segment can be reclaimed,
// tier.ErrClosed, ctx's error, or a wrapped I/O error.
func (s *Store) Put(ctx context.Context, k tier.Key, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(data) > s.maxBlock {
		return fmt.Errorf("g3: put %v: %d bytes > %d: %w", k, len(data), s.maxBlock, tier.ErrTooLarge)
	}
	if len(k.Namespace) > maxNamespace {
		return fmt.Errorf("g3: put %v: namespace longer than %d bytes", k, maxNamespace)
	}
	if err := s.appendBlock(ctx, k, data, 0); err != nil {
		return fmt.Errorf("g3: put %v: %w", k, err)
	}
	return nil
}

// appendBlock writes data as a block record of k: with a new sequence
// number at the end of the active segment (rolling over as needed) when
// seq is 0, else with sequence number seq in the active segment as it is,
// without rolling (Relocate; tier.ErrNoSpace when it has no room).
func (s *Store) appendBlock(ctx context.Context, k tier.Key, data []byte, seq uint64) error {
	hl, rl := headerLen(k.Namespace, len(data)), recordLen(k.Namespace, len(data))
	// The record goes out as header + payload pages + a zero-padded last
	// page. With O_DIRECT every buffer must be page-aligned: a caller's
	// buffer that is (Go allocates large slices page-aligned) is written
	// in place; otherwise the payload is copied into an aligned buffer.
	full := len(data) &^ (pageSize - 1)
	inPlace := full > 0 && (!s.direct || directio.IsAligned(data))
	var hdr []byte
	var iovs [][]byte
	if inPlace {
		hdr = s.bufs.Get(hl + pageSize)
		defer s.bufs.Put(hdr)
		clear(hdr)
		iovs = [][]byte{hdr[:hl], data[:full]}
		if tail := data[full:]; len(tail) > 0 {
			iovs = append(iovs, hdr[hl:hl+pageSize])
			copy(hdr[hl:], tail)
		}
		hdr = hdr[:hl]
	} else {
		buf := s.bufs.Get(rl)
		defer s.bufs.Put(buf)
		clear(buf[:hl])
		copy(buf[hl:], data)
		clear(buf[hl+len(data):])
		hdr, iovs = buf[:hl], [][]byte{buf}
	}
	var seg *segment
	var off int64
	var err error
	if seq == 0 {
		seg, off, seq, err = s.reserve(ctx, rl)
		if err == nil {
			s.st.putBytes.Add(int64(len(data)))
		}
	} else {
		seg, off, err = s.reserveInActive(rl)
	}
	if err != nil {
		return err
	}
	if inPlace {
		encodeHeader(hdr, recBlock, k, data, seg.salt, seq)
	} else {
		encodeRecord(iovs[0], recBlock, k, len(data), seg.salt, seq)
	}
	err = s.writeRecord(seg, iovs, rl, off)
	s.publish(seg, k, entry{seg: seg, off: off, hdrLen: uint16(hl), plen: uint32(len(data)), seq: seq}, err)
	return err
}

// reserveInActive allocates n bytes at the end of the active segment, with
// no roll-over: tier.ErrNoSpace when there is no active segment or it has
// no room. The caller must call publish for the reservation.
func (s *Store) reserveInActive(n int) (*segment, int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, 0, tier.ErrClosed
	}
	a, off, ok := s.takeLocked(n)
	if !ok {
		return nil, 0, fmt.Errorf("g3: no room in the active segment: %w", tier.ErrNoSpace)
	}
	return a, off, nil
}

// takeLocked reserves n bytes at the end of the active segment if it has
// room (its writes in flight counted). Caller holds mu for writing.
func (s *Store) takeLocked(n int) (*segment, int64, bool) {
	a := s.active
	if a == nil || a.writeOff+int64(n) > a.size {
		return a, 0, false
	}
	off := a.writeOff
	a.writeOff += int64(n)
	a.inflight++
	return a, off, true
}

// SetDemoter implements tier.Reclaimer: from now on d.Demote, not
// Options.OnEvict, is called with the live blocks of every segment about
// to be reclaimed (with the same guarantees and limits as OnEvict). The
// tiering core calls it when it opens, before it puts a block here.
func (s *Store) SetDemoter(d tier.Demoter) { s.demoter.Store(&d) }

// PostponeReclaim, called from inside OnEvict, gives up the reclaim that
// called it once OnEvict returns: the segment and every block in it stay
// (blocks OnEvict already copied elsewhere are the caller's to supersede
// or delete), and the next roll-over tries that segment again. For blocks
// that have no safe place right now (their only durable copy is here and
// a write of the key is in flight); when Relocate had no room either. A
// roll-over whose reclaim was needed to stay within CapacityBytes then
// goes over it by a segment until a later reclaim succeeds.
func (s *Store) PostponeReclaim() { s.postpone.Store(true) }

// Relocate keeps block k through the reclaim of the segment holding it:
// called from OnEvict for a key it was given, it copies the block's record
// into the active segment with the same sequence number, so that any newer
// Put or Delete of k (in flight or later) still wins, in memory and at the
// next Open, and a crash at any point leaves either copy of the same
// record. A log-structured cleaner's relocation of a live record (LFS,
// Rosenblum and Ousterhout, SOSP '91), asked for by the caller per key,
// for blocks that have no other safe place while the segment goes.
//
// It returns nil also when k was overwritten or deleted meanwhile (nothing
// to keep). Errors: tier.ErrNoSpace when the active segment has no room
// (Relocate never rolls over: it runs inside one), tier.ErrNotFound when k
// is not in the store, ErrCorrupt or an I/O error from reading it.
func (s *Store) Relocate(ctx context.Context, k tier.Key) error {
	if _, err := s.copyForward(ctx, k); err != nil {
		return err
	}
	s.st.relocated.Add(1)
	return nil
}

// copyForward is Relocate without its count: it returns the payload bytes
// copied (0 when k was superseded meanwhile).
func (s *Store) copyForward(ctx context.Context, k tier.Key) (int, error) {
	s.mu.RLock()
	e, ok := s.entryLocked(k)
	s.mu.RUnlock()
	if !ok || e.tomb {
		return 0, fmt.Errorf("g3: relocate %v: %w", k, tier.ErrNotFound)
	}
	buf := s.bufs.Get(int(e.plen))
	defer s.bufs.Put(buf)
	data := buf[:e.plen]
	n, err := s.Get(ctx, k, data, 0)
	if err != nil {
		return 0, fmt.Errorf("g3: relocate %v: %w", k, err)
	}
	s.mu.RLock()
	cur, ok := s.entryLocked(k)
	s.mu.RUnlock()
	if !ok || cur.seq != e.seq {
		return 0, nil // superseded while it was read: the newer state stands
	}
	if n != len(data) {
		return 0, fmt.Errorf("g3: relocate %v: read %d of %d bytes", k, n, len(data))
	}
	if err := s.appendBlock(ctx, k, data, e.seq); err != nil {
		return 0, fmt.Errorf("g3: relocate %v: %w", k, err)
	}
	return len(data), nil
}

// Delete writes a tombstone for k so that it stays deleted across restarts.
// Deleting a missing key is a no-op; deleting a key quarantined by a read
// (its record failed its checks and reads as missing) writes the tombstone
// too, so the corrupt record does not come back at the next Open. Errors
// as for Put.
func (s *Store) Delete(ctx context.Context, k tier.Key) error {
	s.mu.RLock()
	closed := s.closed
	e, ok := s.entryLocked(k)
	s.mu.RUnlock()
	if closed {
		return tier.ErrClosed
	}
	if !ok || (e.tomb && !e.quarantined) {
		return nil
	}
	buf := s.bufs.Get(pageSize)
	defer s.bufs.Put(buf)
	clear(buf)
	seg, off, seq, err := s.reserve(ctx, pageSize)
	if err != nil {
		return fmt.Errorf("g3: delete %v: %w", k, err)
	}
	encodeRecord(buf, recTomb, k, 0, seg.salt, seq)
	err = s.writeRecord(seg, [][]byte{buf}, pageSize, off)
	s.publish(seg, k, entry{seg: seg, off: off, hdrLen: pageSize, seq: seq, tomb: true}, err)
	if err != nil {
		return fmt.Errorf("g3: delete %v: %w", k, err)
	}
	return nil
}

// reserve allocates n bytes (a record) at the end of the active segment,
// rolling over to a new segment when it does not fit, and assigns the next
// sequence number. The caller must call publish for the reservation.
func (s *Store) reserve(ctx context.Context, n int) (*segment, int64, uint64, error) {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, 0, 0, tier.ErrClosed
		}
		a, off, ok := s.takeLocked(n)
		if ok {
			seq := s.nextSeq
			s.nextSeq++
			s.mu.Unlock()
			return a, off, seq, nil
		}
		s.mu.Unlock()
		if a != nil && int64(n) > a.size-segHeaderLen {
			return nil, 0, 0, tier.ErrTooLarge // would not fit a fresh segment either
		}
		if err := s.roll(ctx, a); err != nil {
			return nil, 0, 0, err
		}
	}
}

// writeRecord writes a reserved record of recLen bytes held in iovs. On
// failure it tries to overwrite
// the record's first page with a pad header, so that a scan at Open skips
// the region instead of finding a half-written record.
func (s *Store) writeRecord(seg *segment, iovs [][]byte, recLen int, off int64) error {
	err := directio.PwritevFull(seg.fd, iovs, off)
	seg.unsynced.Store(true)
	if err == nil {
		return nil
	}
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		s.st.noSpace.Add(1)
	}
	pad := s.bufs.Get(pageSize)
	defer s.bufs.Put(pad)
	encodePad(pad, recLen, seg.salt, 0)
	if perr := directio.PwriteFull(seg.fd, pad, off); perr != nil {
		s.log.Error("G3 write failed and the pad over it too", "segment", seg.path, "off", off, "err", err, "pad_err", perr)
	}
	return ioErr("write", seg.path, err)
}

// publish ends a reservation: on success it makes e the index entry of k
// unless a newer sequence number got there first.
func (s *Store) publish(seg *segment, k tier.Key, e entry, writeErr error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	seg.inflight--
	if seg.inflight == 0 {
		s.drained.Broadcast()
	}
	if writeErr != nil {
		return
	}
	ik := s.internLocked(k)
	cur, ok := s.index[ik]
	if ok && cur.seq > e.seq {
		return
	}
	if ok && !cur.tomb {
		s.used -= int64(cur.plen)
		s.blocks--
	}
	if !e.tomb {
		s.used += int64(e.plen)
		s.blocks++
	}
	s.index[ik] = e
	seg.keys = append(seg.keys, ik)
}

// Get reads up to len(p) bytes of block k from byte off (see tier.Tier).
// It reads the record header and only the 4 KiB payload pages the range
// touches, checks the header (checksum, key, sequence number, length) and
// the CRC32C of the whole payload for whole-block reads or of every page
// read for partial reads. A mismatch quarantines k and returns
// tier.ErrCorrupt; I/O errors come back wrapped. On any error p holds no
// bytes of the block (it may have been zeroed).
func (s *Store) Get(ctx context.Context, k tier.Key, p []byte, off int64) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, fmt.Errorf("g3: get %v: negative offset %d", k, off)
	}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return 0, tier.ErrClosed
	}
	e, ok := s.entryLocked(k)
	if !ok || e.tomb {
		s.mu.RUnlock()
		return 0, fmt.Errorf("g3: get %v: %w", k, tier.ErrNotFound)
	}
	e.seg.acquire()
	s.mu.RUnlock()
	defer e.seg.release()

	plen := int64(e.plen)
	if off >= plen || len(p) == 0 {
		return 0, nil
	}
	n := int(min(int64(len(p)), plen-off))
	p0 := int(off / pageSize)
	p1 := pagesOf(int(off) + n)
	hl := int(e.hdrLen)
	hdr := s.bufs.Get(hl)
	defer s.bufs.Put(hdr)
	// a holds payload pages from p0 on; b, if set, the payload bytes of the
	// page after a. When the range starts on a page and p can take O_DIRECT
	// I/O, whole pages are read straight into p (a aliases p) and only a
	// partial last page goes through a pooled buffer (b).
	var a, b []byte
	inPlace := off%pageSize == 0 && n >= pageSize && (!s.direct || directio.IsAligned(p))
	var iovs [][]byte
	if inPlace {
		m := n / pageSize
		a = p[:m*pageSize]
		iovs = [][]byte{a}
		if n > len(a) {
			tail := s.bufs.Get(pageSize)
			defer s.bufs.Put(tail)
			iovs = append(iovs, tail)
			b = tail[:min(pageSize, int(plen)-(p0+m)*pageSize)]
		}
	} else {
		pages := s.bufs.Get((p1 - p0) * pageSize)
		defer s.bufs.Put(pages)
		iovs = [][]byte{pages}
		a = pages[:min(p1*pageSize, int(plen))-p0*pageSize]
	}
	fail := func(f func() (int, error)) (int, error) {
		if inPlace {
			clear(p[:n]) // never leave unverified bytes in p
		}
		return f()
	}
	var err error
	if p0 == 0 {
		err = s.readvAt(e.seg, append([][]byte{hdr}, iovs...), e.off)
	} else if err = s.readvAt(e.seg, [][]byte{hdr}, e.off); err == nil {
		err = s.readvAt(e.seg, iovs, e.off+int64(hl)+int64(p0)*pageSize)
	}
	if err != nil {
		return fail(func() (int, error) { return s.readFailed(k, e, err) })
	}
	r, c, _ := decodeRecord(hdr, e.seg.salt)
	if c != hdrOK || r.typ != recBlock || r.key != k || r.seq != e.seq || r.payloadLen != e.plen || r.hdrLen != uint32(e.hdrLen) {
		return fail(func() (int, error) { return s.corrupt(k, e, "header mismatch") })
	}
	if p0 == 0 && n == int(plen) {
		if tier.UpdateChecksum(tier.Checksum(a), b) != r.payloadCRC {
			return fail(func() (int, error) { return s.corrupt(k, e, "payload CRC32C mismatch") })
		}
	} else if !r.verifyPages(a, p0) || (b != nil && !r.verifyPages(b, p0+len(a)/pageSize)) {
		return fail(func() (int, error) { return s.corrupt(k, e, "page CRC32C mismatch") })
	}
	if inPlace {
		copy(p[len(a):n], b)
		return n, nil
	}
	return copy(p[:n], a[int(off)-p0*pageSize:]), nil
}

// readAt reads len(b) bytes of seg at off.
func (s *Store) readAt(seg *segment, b []byte, off int64) error {
	return s.readvAt(seg, [][]byte{b}, off)
}

// readvAt fills the buffers from contiguous bytes of seg at off.
func (s *Store) readvAt(seg *segment, iovs [][]byte, off int64) error {
	var n int64
	for _, b := range iovs {
		n += int64(len(b))
	}
	if off+n > seg.size {
		return errShortSegment
	}
	if len(iovs) == 1 {
		return directio.PreadFull(seg.fd, iovs[0], off)
	}
	return directio.PreadvFull(seg.fd, iovs, off)
}

var errShortSegment = errors.New("g3: record runs past the end of its segment")

// readFailed turns a read error into Get's result: a file shorter than the
// index says is corruption; anything else is an I/O error (the block stays
// indexed: the disk may recover).
func (s *Store) readFailed(k tier.Key, e entry, err error) (int, error) {
	if errors.Is(err, errShortSegment) || errors.Is(err, io.ErrUnexpectedEOF) {
		return s.corrupt(k, e, err.Error())
	}
	return 0, ioErr("read", e.seg.path, err)
}

// corrupt quarantines k (if e is still its entry) and returns ErrCorrupt.
func (s *Store) corrupt(k tier.Key, e entry, why string) (int, error) {
	s.mu.Lock()
	if cur, ok := s.entryLocked(k); ok && !cur.tomb && cur.seq == e.seq {
		s.index[s.internLocked(k)] = entry{seg: e.seg, seq: e.seq, tomb: true, quarantined: true}
		s.used -= int64(e.plen)
		s.blocks--
		s.st.crcErrors.Add(1)
		s.log.Warn("G3 block corrupt, quarantined", "key", k.String(), "segment", e.seg.path, "off", e.off, "why", why)
	}
	s.mu.Unlock()
	return 0, fmt.Errorf("g3: get %v: %s: %w", k, why, tier.ErrCorrupt)
}

// Stat returns the length in bytes of block k or tier.ErrNotFound, from
// the in-memory index (ctx is not consulted: nothing blocks).
func (s *Store) Stat(_ context.Context, k tier.Key) (int64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return 0, tier.ErrClosed
	}
	e, ok := s.entryLocked(k)
	if !ok || e.tomb {
		return 0, fmt.Errorf("g3: stat %v: %w", k, tier.ErrNotFound)
	}
	return int64(e.plen), nil
}

// Range calls fn for every live block (in no order) until fn returns false
// or ctx is done (then it returns ctx.Err()). It walks a snapshot taken at
// the call, so fn may call the store.
func (s *Store) Range(ctx context.Context, fn func(k tier.Key, length int64) bool) error {
	type kl struct {
		k tier.Key
		n int64
	}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return tier.ErrClosed
	}
	snap := make([]kl, 0, s.blocks)
	for ik, e := range s.index {
		if !e.tomb {
			snap = append(snap, kl{s.tierKey(ik), int64(e.plen)})
		}
	}
	s.mu.RUnlock()
	for _, x := range snap {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !fn(x.k, x.n) {
			break
		}
	}
	return nil
}

// Usage reports live payload bytes and blocks; CapacityBytes is
// Options.CapacityBytes.
func (s *Store) Usage() tier.Usage {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return tier.Usage{UsedBytes: s.used, CapacityBytes: s.opts.CapacityBytes, Blocks: s.blocks}
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	s.mu.RLock()
	n := len(s.segs)
	var b int64
	for _, seg := range s.segs {
		b += seg.size
	}
	for _, sp := range s.spares {
		b += sp.seg.size
	}
	s.mu.RUnlock()
	return Stats{
		CRCErrors: s.st.crcErrors.Load(), TornRecords: s.st.torn.Load(), DamagedSegments: s.st.damagedSegs.Load(),
		Reclaims: s.st.reclaims.Load(), Evicted: s.st.evicted.Load(), NoSpace: s.st.noSpace.Load(),
		Syncs: s.st.syncs.Load(), Relocated: s.st.relocated.Load(), Postponed: s.st.postponed.Load(),
		PutBytes: s.st.putBytes.Load(), Compacted: s.st.compacted.Load(), CompactedBytes: s.st.compactedBytes.Load(),
		Segments: n, SegmentBytes: b, Direct: s.direct,
	}
}

// Compaction implements tier.Compactor (see Stats).
func (s *Store) Compaction() (putBytes, compactedBlocks, compactedBytes int64) {
	return s.st.putBytes.Load(), s.st.compacted.Load(), s.st.compactedBytes.Load()
}

// Sync makes every acknowledged Put and Delete durable against power loss:
// fdatasync on every segment file, then fsync of the directory. Put alone
// survives a process crash but not a power cut.
func (s *Store) Sync(ctx context.Context) error {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return tier.ErrClosed
	}
	segs := append([]*segment(nil), s.segs...)
	for _, seg := range segs {
		seg.acquire()
	}
	s.mu.RUnlock()
	defer func() {
		for _, seg := range segs {
			seg.release()
		}
	}()
	for _, seg := range segs {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !seg.unsynced.Swap(false) {
			continue // nothing written since its last fdatasync
		}
		if err := unix.Fdatasync(seg.fd); err != nil {
			seg.unsynced.Store(true)
			return ioErr("fdatasync", seg.path, err)
		}
		s.st.syncs.Add(1)
	}
	if !s.dirDirty.Swap(false) {
		return nil
	}
	d, err := os.Open(s.opts.Dir)
	if err != nil {
		s.dirDirty.Store(true)
		return fmt.Errorf("g3: sync: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		s.dirDirty.Store(true)
		return fmt.Errorf("g3: sync %s: %w", s.opts.Dir, err)
	}
	return nil
}

// Close waits for writes in flight, then releases the segment files and
// the directory lock. Reads in flight finish on their own references.
// Closing twice returns nil.
func (s *Store) Close() error {
	s.rollMu.Lock()
	defer s.rollMu.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for _, seg := range s.segs {
		for seg.inflight > 0 {
			s.drained.Wait()
		}
	}
	segs, spares := s.segs, s.spares
	s.segs, s.active, s.spares = nil, nil, nil
	s.mu.Unlock()
	for _, seg := range segs {
		seg.release()
	}
	for _, sp := range spares {
		sp.seg.release()
	}
	return unix.Close(s.lockFD)
}
