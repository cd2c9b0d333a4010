package g3

import (
	"github.com/ctxmem/ctxmemd/internal/directio"

	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// scanned is one record found by a segment scan.
type scanned struct {
	key    tier.Key
	seq    uint64
	off    int64
	hdrLen uint32
	plen   uint32
	tomb   bool // a tombstone, or a torn block record acting as one
}

// recover rebuilds the index from the segment files in Dir, oldest first.
// Rules (see package doc): a segment with a bad segment header is a
// segment whose creation was cut short if it is the newest (removed), else
// damage; a damaged sealed segment is dropped together with every older
// one. Only the newest segment may hold torn records: its payloads are all
// verified and its bad headers skipped. Newest sequence number wins.
func (s *Store) recover() error {
	ents, err := os.ReadDir(s.opts.Dir)
	if err != nil {
		return fmt.Errorf("g3: %w", err)
	}
	var ids []uint64
	var spares []string
	for _, e := range ents {
		if id, ok := parseSegName(e.Name()); ok && e.Type().IsRegular() {
			ids = append(ids, id)
			s.nextSegID = max(s.nextSegID, id+1)
		}
		if strings.HasSuffix(e.Name(), ".spare") {
			spares = append(spares, filepath.Join(s.opts.Dir, e.Name()))
		}
	}
	slices.Sort(ids)
	type segRecs struct {
		seg  *segment
		recs []scanned
	}
	var kept []segRecs
	dropAll := func(why string, extra ...string) {
		for _, sr := range kept {
			s.removeSegment(sr.seg.path, why)
			sr.seg.release()
		}
		for _, p := range extra {
			s.removeSegment(p, why)
		}
		s.st.damagedSegs.Add(int64(len(kept) + len(extra)))
		kept = nil
	}
	for i, id := range ids {
		newest := i == len(ids)-1
		seg, err := s.openSegment(id)
		if errors.Is(err, errBadSegment) {
			if newest {
				s.log.Warn("G3 newest segment has no valid header (creation cut short); removing", "err", err)
				s.removeSegment(filepath.Join(s.opts.Dir, segName(id)), "torn segment header")
				continue
			}
			s.log.Error("G3 damaged segment header; dropping it and every older segment", "err", err)
			dropAll("damaged segment header", filepath.Join(s.opts.Dir, segName(id)))
			continue
		}
		if err == nil {
			var recs []scanned
			var damaged bool
			if recs, damaged, err = s.scanSegment(seg, newest); err != nil {
				seg.release()
			} else if damaged {
				s.log.Error("G3 damaged record header in a sealed segment; dropping it and every older segment", "segment", seg.path)
				kept = append(kept, segRecs{seg, nil})
				dropAll("damaged record header")
				continue
			} else {
				kept = append(kept, segRecs{seg, recs})
				continue
			}
		}
		for _, sr := range kept {
			sr.seg.release()
		}
		return err
	}
	for _, sr := range kept {
		s.segs = append(s.segs, sr.seg)
		for _, r := range sr.recs {
			ik := s.internLocked(r.key)
			cur, ok := s.index[ik]
			s.nextSeq = max(s.nextSeq, r.seq+1)
			if ok && cur.seq > r.seq {
				continue
			}
			s.index[ik] = entry{seg: sr.seg, off: r.off, hdrLen: uint16(r.hdrLen), plen: r.plen, seq: r.seq, tomb: r.tomb}
			sr.seg.keys = append(sr.seg.keys, ik)
		}
	}
	for _, p := range spares {
		s.adoptSpare(p)
	}
	// No Put is in flight at Open, so tomb entries have nothing to guard.
	for ik, e := range s.index {
		if e.tomb {
			delete(s.index, ik)
			continue
		}
		s.used += int64(e.plen)
		s.blocks++
	}
	return nil
}

// repair overwrites the first page of a torn record in the newest segment
// with a one-page record that later scans accept once the segment is
// sealed: a pad over a torn header, or a tombstone (same key and sequence
// number) over a block whose payload failed its CRC32C, so the older copy
// it hides stays hidden. The rest of the torn record holds no header of
// this segment (its salt is random) and is skipped page by page.
func (s *Store) repair(seg *segment, off int64, typ uint8, k tier.Key, seq uint64) error {
	buf := s.bufs.Get(pageSize)
	defer s.bufs.Put(buf)
	clear(buf)
	if typ == recPad {
		encodePad(buf, pageSize, seg.salt, 0)
	} else {
		encodeRecord(buf, recTomb, k, 0, seg.salt, seq)
	}
	if err := directio.PwriteFull(seg.fd, buf, off); err != nil {
		return ioErr("repair torn record", seg.path, err)
	}
	return nil
}

// adoptSpare keeps a spare file from an earlier run for reuse, or deletes
// it when there is no room for it (see spareRoom) or it cannot be opened.
func (s *Store) adoptSpare(path string) {
	if s.spareRoom(nil) {
		sp, err := s.openSpare(path)
		if err == nil {
			s.spares = append(s.spares, sp)
			return
		}
		s.log.Warn("G3 spare unusable", "spare", path, "err", err)
	}
	if err := os.Remove(path); err != nil {
		s.log.Error("G3 remove spare", "spare", path, "err", err)
	}
}

// removeSegment deletes a segment file during recovery.
func (s *Store) removeSegment(path, why string) {
	s.log.Warn("G3 removing segment", "segment", path, "why", why)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Error("G3 remove segment", "segment", path, "err", err)
	}
}

// scanSegment reads the record headers of seg in order. In the newest
// segment (verify) it also checks every payload: a block whose payload
// fails its CRC32C is returned as a tombstone (it may hide an older copy of
// its key, which must not come back), and pages that are not a valid
// header are skipped (a torn write); elsewhere a damaged header (our magic
// and salt, failing its checks) makes the whole segment damaged. Pages
// holding no header (zeros of the unused tail, payload of a record whose
// header was never written) are skipped in both cases.
func (s *Store) scanSegment(seg *segment, verify bool) (recs []scanned, damaged bool, err error) {
	return s.walkSegment(seg, verify, nil)
}

// checker receives what a read-only walk (Verify) finds wrong: a damaged
// record header at off, or a block record whose payload fails its CRC32C.
type checker interface {
	damagedHeader(off int64)
	badPayload(off int64, r record)
}

// walkSegment is scanSegment; with a checker it is read-only instead (an
// offline check): every payload is verified, a damaged header or a bad
// payload is reported to chk and skipped (the walk goes on page by page),
// and nothing is repaired.
func (s *Store) walkSegment(seg *segment, verify bool, chk checker) (recs []scanned, damaged bool, err error) {
	if chk != nil {
		verify = true
	}
	rd := pageReader{s: s, seg: seg}
	defer rd.free()
	off := int64(segHeaderLen)
	for off+pageSize <= seg.size {
		hdr, err := rd.read(off, pageSize)
		if err != nil {
			return nil, false, ioErr("scan", seg.path, err)
		}
		r, c, need := decodeRecord(hdr, seg.salt)
		if need > 0 && off+int64(need) <= seg.size {
			if hdr, err = rd.read(off, need); err != nil {
				return nil, false, ioErr("scan", seg.path, err)
			}
			r, c, _ = decodeRecord(hdr, seg.salt)
		}
		if c == hdrOK && off+int64(r.recLen) > seg.size {
			c = hdrDamaged
		}
		switch c {
		case hdrNone:
			rd.sequential = true
			off += pageSize
			continue
		case hdrDamaged:
			if chk != nil {
				chk.damagedHeader(off)
				rd.sequential = true
				off += pageSize
				continue
			}
			if !verify {
				return nil, true, nil
			}
			s.st.torn.Add(1)
			s.log.Warn("G3 torn record header skipped", "segment", seg.path, "off", off)
			if err := s.repair(seg, off, recPad, tier.Key{}, 0); err != nil {
				return nil, false, err
			}
			rd.sequential = true
			off += pageSize
			continue
		}
		// After a small record the next header is close: read ahead a
		// chunk (one read covers many 4 KiB records) instead of one
		// page per record. After a large one, read the header alone, so
		// a scan does not read payloads.
		rd.sequential = r.recLen <= scanSmallRecord
		switch r.typ {
		case recBlock:
			sc := scanned{key: r.key, seq: r.seq, off: off, hdrLen: r.hdrLen, plen: r.payloadLen}
			if verify {
				ok, err := s.verifyPayload(&rd, r, off)
				if err != nil {
					return nil, false, err
				}
				switch {
				case !ok && chk != nil:
					chk.badPayload(off, r)
					sc.tomb = true
				case !ok:
					s.st.torn.Add(1)
					s.log.Warn("G3 torn block record dropped", "segment", seg.path, "off", off, "key", r.key.String())
					sc.tomb = true
					if err := s.repair(seg, off, recTomb, r.key, r.seq); err != nil {
						return nil, false, err
					}
				}
			}
			recs = append(recs, sc)
		case recTomb:
			recs = append(recs, scanned{key: r.key, seq: r.seq, off: off, hdrLen: r.hdrLen, tomb: true})
		}
		off += int64(r.recLen)
	}
	return recs, false, nil
}

// verifyPayload checks the CRC32C of the payload of the record r at off:
// from the scan's read-ahead chunk when the payload lies in it (a small
// record), else read on its own.
func (s *Store) verifyPayload(rd *pageReader, r record, off int64) (bool, error) {
	crc := r.payloadCRC
	at := off + int64(r.hdrLen)
	if p, ok := rd.cached(at, int(r.payloadLen)); ok {
		return tier.Checksum(p) == crc, nil
	}
	buf := s.bufs.Get(roundUp(int(r.payloadLen)))
	defer s.bufs.Put(buf)
	if err := s.readAt(rd.seg, buf, at); err != nil {
		return false, ioErr("scan", rd.seg.path, err)
	}
	return tier.Checksum(buf[:r.payloadLen]) == crc, nil
}

// pageReader serves scan reads. In sequential mode (skipping pages that
// hold no header, or after a small record) it reads ahead a chunk at a
// time; otherwise it reads just the header asked for, so a scan of large
// records does not read payloads.
type pageReader struct {
	s          *Store
	seg        *segment
	sequential bool
	chunk      []byte
	chunkOff   int64
	chunkLen   int
}

const scanChunk = 1 << 20

// scanSmallRecord: after a record of at most this many bytes (header and
// payload) the scan reads the next header with a scanChunk read-ahead.
// Reading one page per record cost 150 µs per record with O_DIRECT here
// (BenchmarkRecover4K: 64 Ki records of 4 KiB, about 10 s per Open), 71%
// of a restart's CPU with a million small files (issue 17).
const scanSmallRecord = 64 << 10

// cached returns bytes [off, off+n) of the segment when the current
// chunk holds them.
func (rd *pageReader) cached(off int64, n int) ([]byte, bool) {
	if rd.chunk != nil && off >= rd.chunkOff && off+int64(n) <= rd.chunkOff+int64(rd.chunkLen) {
		return rd.chunk[off-rd.chunkOff:][:n], true
	}
	return nil, false
}

func (rd *pageReader) read(off int64, n int) ([]byte, error) {
	if b, ok := rd.cached(off, n); ok {
		return b, nil
	}
	if rd.chunk == nil {
		rd.chunk = rd.s.bufs.Get(scanChunk)
	}
	want := n
	if rd.sequential {
		want = max(n, scanChunk)
	}
	want = int(min(int64(want), rd.seg.size-off))
	if err := rd.s.readAt(rd.seg, rd.chunk[:want], off); err != nil {
		return nil, err
	}
	rd.chunkOff, rd.chunkLen = off, want
	return rd.chunk[:n], nil
}

func (rd *pageReader) free() {
	if rd.chunk != nil {
		rd.s.bufs.Put(rd.chunk)
	}
}
