package g3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/ctxmem/ctxmemd/internal/directio"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// ErrInUse is returned by Verify when a Store has the directory open (its
// LOCK is held): an offline check needs the daemon stopped.
var ErrInUse = errors.New("g3: directory in use by a running store")

// VerifyOptions configure Verify.
type VerifyOptions struct {
	// MaxBad bounds VerifyReport.Bad (default 100); the rest are counted.
	MaxBad int
	// Progress, if set, is called after each segment with the number of
	// segments done and in all.
	Progress func(done, total int)
}

// VerifyReport is what Verify found in a G3 directory.
type VerifyReport struct {
	Dir      string `json:"dir"`
	Segments int    `json:"segments"`
	// Records counts block records, Tombstones tombstone records; Bytes
	// is the payload bytes of block records that passed their CRC32C.
	Records    int64 `json:"records"`
	Tombstones int64 `json:"tombstones"`
	Bytes      int64 `json:"bytes"`
	// Live counts block records that are the newest record of their key
	// (what Open would index); Superseded the older ones.
	Live       int64 `json:"live"`
	Superseded int64 `json:"superseded"`
	// Corrupt counts block records whose payload fails its CRC32C, and
	// CorruptLive those of them that are live (a read would fail).
	Corrupt     int64 `json:"corrupt"`
	CorruptLive int64 `json:"corrupt_live"`
	// DamagedHeaders counts record headers that carry the segment's salt
	// but fail their checks; BadSegments segment files whose header is
	// unreadable.
	DamagedHeaders int64 `json:"damaged_headers"`
	BadSegments    int64 `json:"bad_segments"`
	// Bad lists the first MaxBad problems; BadOmitted counts the rest.
	Bad        []VerifyBad `json:"bad,omitempty"`
	BadOmitted int64       `json:"bad_omitted,omitempty"`
}

// Problems reports the number of problems that matter (0: clean): live
// corrupt records, damaged headers and bad segments. A corrupt record
// superseded by a newer record or tombstone is never read; it is counted
// in Corrupt and listed, not here.
func (r VerifyReport) Problems() int64 { return r.CorruptLive + r.DamagedHeaders + r.BadSegments }

// VerifyBad is one problem Verify found.
type VerifyBad struct {
	Segment string `json:"segment"` // file name
	Offset  int64  `json:"offset"`  // byte offset of the record in the file
	// Key and Seq name the record (block records only).
	Namespace string `json:"namespace,omitempty"`
	Object    uint64 `json:"object,omitempty"`
	Index     uint32 `json:"index,omitempty"`
	Gen       uint64 `json:"gen,omitempty"`
	Seq       uint64 `json:"seq,omitempty"`
	// Problem is "payload CRC32C mismatch", "damaged record header" or
	// "bad segment header".
	Problem string `json:"problem"`
	// Live: the record is the newest of its key (not superseded).
	Live bool `json:"live"`
	// NewestSegment: the record is in the newest segment (the one Open
	// verifies and repairs).
	NewestSegment bool `json:"newest_segment"`
	// Effect is what the daemon does about it (at Open or on a read).
	Effect string `json:"effect"`
}

// Problems of VerifyBad.
const (
	ProblemPayloadCRC    = "payload CRC32C mismatch"
	ProblemDamagedHeader = "damaged record header"
	ProblemSegmentHeader = "bad segment header"
)

// Verify checks every segment file of the G3 directory dir offline, record
// by record: each segment header, each record header (checksum and
// fields) and the CRC32C of every block payload, superseded records
// included. It only reads: nothing is repaired or dropped (a running
// store quarantines what fails on a read, and Open drops or repairs
// damage by the rules of the package doc; each problem's Effect says
// which). It holds the directory's LOCK while it runs, so a store cannot
// open the directory meanwhile. Errors: ErrInUse when a store has the
// directory open, ctx's error, I/O errors (a record that cannot be read
// at all).
func Verify(ctx context.Context, dir string, o VerifyOptions) (VerifyReport, error) {
	rep := VerifyReport{Dir: dir}
	if o.MaxBad <= 0 {
		o.MaxBad = 100
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return rep, fmt.Errorf("g3: %w", err)
	}
	lockFD, err := unix.Open(filepath.Join(dir, "LOCK"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	switch {
	case err == nil:
		defer unix.Close(lockFD)
		if err := unix.Flock(lockFD, unix.LOCK_EX|unix.LOCK_NB); err != nil {
			if errors.Is(err, unix.EWOULDBLOCK) {
				return rep, fmt.Errorf("%w: %s (stop the daemon first, or run fsck without --offline)", ErrInUse, dir)
			}
			return rep, ioErr("lock", dir, err)
		}
	case !errors.Is(err, unix.ENOENT):
		return rep, ioErr("open lock", dir, err)
	}
	var ids []uint64
	for _, e := range ents {
		if id, ok := parseSegName(e.Name()); ok && e.Type().IsRegular() {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	v := &verifier{rep: &rep, max: o.MaxBad, newest: map[tier.Key]uint64{}}
	s := &Store{opts: Options{Dir: dir}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for i, id := range ids {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		v.seg, v.sealed = segName(id), i < len(ids)-1
		seg, err := openSegmentRO(dir, id)
		if errors.Is(err, errBadSegment) {
			rep.BadSegments++
			effect := "creation cut short: Open removes it"
			if v.sealed {
				effect = "Open drops this segment and every older one"
			}
			v.add(VerifyBad{Segment: v.seg, Problem: ProblemSegmentHeader, Effect: effect}, false)
			continue
		}
		if err != nil {
			return rep, err
		}
		rep.Segments++
		recs, _, err := s.walkSegment(seg, true, v)
		seg.release()
		if err != nil {
			return rep, err
		}
		for _, r := range recs {
			if r.tomb && v.badAt(v.seg, r.off) {
				// A block record that failed its CRC: counted as a
				// record (not a tombstone) and as a candidate for live.
				rep.Records++
				v.recs = append(v.recs, verRec{key: r.key, seq: r.seq, seg: v.seg, off: r.off})
				continue
			}
			if r.tomb {
				rep.Tombstones++
			} else {
				rep.Records++
				rep.Bytes += int64(r.plen)
			}
			v.recs = append(v.recs, verRec{key: r.key, seq: r.seq, tomb: r.tomb, seg: v.seg, off: r.off})
		}
		for _, r := range recs {
			if cur, ok := v.newest[r.key]; !ok || r.seq > cur {
				v.newest[r.key] = r.seq
			}
		}
		if o.Progress != nil {
			o.Progress(i+1, len(ids))
		}
	}
	v.finish()
	return rep, nil
}

// verRec is one record a Verify walk found.
type verRec struct {
	key  tier.Key
	seq  uint64
	tomb bool
	seg  string
	off  int64
}

// recAt names a record by segment file and offset.
type recAt struct {
	seg string
	off int64
}

// verifier collects what Verify finds (it implements checker).
type verifier struct {
	rep    *VerifyReport
	max    int
	seg    string // the segment being walked
	sealed bool   // it is not the newest segment
	newest map[tier.Key]uint64
	recs   []verRec
	// bad are the indexes in rep.Bad of corrupt block records, by
	// segment and offset, whose Live and Effect finish fills in.
	bad map[recAt]int
	// corrupt are all corrupt block records (also past max), by segment
	// and offset: their key and sequence number.
	corrupt map[recAt]verRec
}

func (v *verifier) add(b VerifyBad, payload bool) {
	if len(v.rep.Bad) >= v.max {
		v.rep.BadOmitted++
		return
	}
	if payload {
		if v.bad == nil {
			v.bad = map[recAt]int{}
		}
		v.bad[recAt{b.Segment, b.Offset}] = len(v.rep.Bad)
	}
	v.rep.Bad = append(v.rep.Bad, b)
}

func (v *verifier) damagedHeader(off int64) {
	v.rep.DamagedHeaders++
	effect := "torn write in the newest segment: Open writes a pad over it"
	if v.sealed {
		effect = "Open drops this segment and every older one"
	}
	v.add(VerifyBad{Segment: v.seg, Offset: off, Problem: ProblemDamagedHeader, Effect: effect}, false)
}

func (v *verifier) badPayload(off int64, r record) {
	v.rep.Corrupt++
	if v.corrupt == nil {
		v.corrupt = map[recAt]verRec{}
	}
	v.corrupt[recAt{v.seg, off}] = verRec{key: r.key, seq: r.seq, seg: v.seg, off: off}
	v.add(VerifyBad{Segment: v.seg, Offset: off, Namespace: r.key.Namespace, Object: r.key.Object,
		Index: r.key.Index, Gen: r.key.Gen, Seq: r.seq, Problem: ProblemPayloadCRC, NewestSegment: !v.sealed}, true)
}

func (v *verifier) badAt(seg string, off int64) bool {
	_, ok := v.corrupt[recAt{seg, off}]
	return ok
}

// finish counts live and superseded records and fills in what becomes of
// each corrupt one.
func (v *verifier) finish() {
	for _, r := range v.recs {
		if r.tomb {
			continue
		}
		live := v.newest[r.key] == r.seq
		if live {
			v.rep.Live++
		} else {
			v.rep.Superseded++
		}
		if !v.badAt(r.seg, r.off) {
			continue
		}
		if live {
			v.rep.CorruptLive++
		}
		i, ok := v.bad[recAt{r.seg, r.off}]
		if !ok {
			continue
		}
		b := &v.rep.Bad[i]
		b.Live = live
		switch {
		case live && b.NewestSegment:
			b.Effect = "torn write in the newest segment: Open rewrites it as a tombstone (the block reads as missing)"
		case live:
			b.Effect = "a read fails its CRC32C and quarantines the key (the daemon serves another tier's copy or loses the object); a running daemon's fsck --drop tombstones it"
		case b.NewestSegment:
			b.Effect = "superseded by a newer record or tombstone: never read (Open rewrites it as a tombstone)"
		default:
			b.Effect = "superseded by a newer record or tombstone: never read; reclaimed with its segment"
		}
	}
}

// openSegmentRO opens segment id of dir read-only and checks its header
// (errBadSegment when it is unreadable).
func openSegmentRO(dir string, id uint64) (*segment, error) {
	path := filepath.Join(dir, segName(id))
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, ioErr("open segment", path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, ioErr("stat segment", path, err)
	}
	buf := directio.AlignedAlloc(segHeaderLen)
	err = directio.PreadFull(fd, buf, 0)
	h, ok := decodeSegHeader(buf)
	if err != nil || !ok || h.id != id || int64(h.segBytes) > st.Size {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: %s (read error %v)", errBadSegment, path, err)
	}
	seg := &segment{id: id, salt: h.salt, size: int64(h.segBytes), path: path, fd: fd}
	seg.refs.Store(1)
	return seg, nil
}
