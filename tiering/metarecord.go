package tiering

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"time"
)

// The objects-bucket value (meta.go) is written in a compact binary form;
// records written before it are JSON and are still read (a JSON value
// starts with '{', a binary one with recordV1), so a data directory of an
// earlier build opens as before and its records move to the binary form as
// they are rewritten. A build before this one reads a binary record as
// damaged: its object is dropped as lost (KV cache) — downgrades across
// this change lose the recorded objects.
//
// recordV1, in order (uvarint: encoding/binary's unsigned varint):
//
//	byte     recordV1
//	uvarint  len(namespace), namespace bytes
//	uvarint  len(kind), kind bytes
//	byte     durability: 0 none (recordDurability decides), 1 cache, 2 device
//	byte     log2(block size)
//	uvarint  size (bytes)
//	uvarint  generation
//	byte     flags: 1 pinned, 2 state dirty (else clean), 4 created set
//	varint   created, unix seconds, and uvarint its nanoseconds (only
//	         with flag 4)
//	uvarint  number of written runs, then per run:
//	uvarint  first - (previous last + 1) (the first run: first)
//	uvarint  last - first
//	         (only with flag 8) the G4-wins runs, in the same form
//
// Nothing follows the last run. A build before flag 8 reads a record
// with it as damaged (its object is dropped as lost). About 30 bytes for a one-run record,
// against about 160 in JSON (issue 17: metadata on disk per file).
const recordV1 = 0x01

const (
	recPinned  = 1 << 0
	recDirty   = 1 << 1
	recCreated = 1 << 2
	recG4Wins  = 1 << 3 // objectRecord.G4Wins follows the written runs
)

// errRecordShort: a binary record ends before its last field.
var errRecordShort = errors.New("truncated")

// encodeObjectRecord returns rec in the binary form. Errors: a state
// other than clean or dirty, an unknown durability name, a block size
// that is not a power of two, a negative size, or runs that are not
// ascending and disjoint (put never passes one).
func encodeObjectRecord(rec *objectRecord) ([]byte, error) {
	var flags byte
	switch rec.State {
	case stateClean:
	case stateDirty:
		flags |= recDirty
	default:
		return nil, fmt.Errorf("object record: state %q", rec.State)
	}
	var dur byte
	switch rec.Durability {
	case "":
	case DurabilityCache.String():
		dur = 1
	case DurabilityDevice.String():
		dur = 2
	default:
		return nil, fmt.Errorf("object record: durability %q", rec.Durability)
	}
	if rec.BlockSize <= 0 || rec.BlockSize&(rec.BlockSize-1) != 0 || rec.Size < 0 {
		return nil, fmt.Errorf("object record: block size %d, size %d", rec.BlockSize, rec.Size)
	}
	if rec.Pinned {
		flags |= recPinned
	}
	if !rec.Created.IsZero() {
		flags |= recCreated
	}
	if len(rec.G4Wins) > 0 {
		flags |= recG4Wins
	}
	b := make([]byte, 0, 24+len(rec.Namespace)+len(rec.Kind)+4*len(rec.Written))
	b = append(b, recordV1)
	b = binary.AppendUvarint(b, uint64(len(rec.Namespace)))
	b = append(b, rec.Namespace...)
	b = binary.AppendUvarint(b, uint64(len(rec.Kind)))
	b = append(b, rec.Kind...)
	b = append(b, dur, byte(bits.TrailingZeros(uint(rec.BlockSize))))
	b = binary.AppendUvarint(b, uint64(rec.Size))
	b = binary.AppendUvarint(b, rec.Gen)
	b = append(b, flags)
	if flags&recCreated != 0 {
		b = binary.AppendVarint(b, rec.Created.Unix())
		b = binary.AppendUvarint(b, uint64(rec.Created.Nanosecond()))
	}
	b, err := appendRuns(b, "written", rec.Written)
	if err != nil {
		return nil, err
	}
	if flags&recG4Wins != 0 {
		return appendRuns(b, "G4-wins", rec.G4Wins)
	}
	return b, nil
}

// appendRuns appends runs (what names them in errors) in recordV1's run
// form. Errors: runs that are not ascending and disjoint.
func appendRuns(b []byte, what string, runs [][2]uint32) ([]byte, error) {
	b = binary.AppendUvarint(b, uint64(len(runs)))
	next := uint64(0)
	for _, r := range runs {
		if uint64(r[0]) < next || r[0] > r[1] {
			return nil, fmt.Errorf("object record: %s runs %v not ascending", what, runs)
		}
		b = binary.AppendUvarint(b, uint64(r[0])-next)
		b = binary.AppendUvarint(b, uint64(r[1]-r[0]))
		next = uint64(r[1]) + 1
	}
	return b, nil
}

// parseObjectRecord parses v in either form, without decodeObjectRecord's
// checks.
func parseObjectRecord(v []byte) (objectRecord, error) {
	var rec objectRecord
	if len(v) > 0 && v[0] == '{' {
		if err := json.Unmarshal(v, &rec); err != nil {
			return objectRecord{}, fmt.Errorf("object record: %w", err)
		}
		return rec, nil
	}
	if len(v) == 0 || v[0] != recordV1 {
		return objectRecord{}, fmt.Errorf("object record: unknown format")
	}
	d := recordDecoder{b: v[1:]}
	rec.Namespace = d.str()
	rec.Kind = d.str()
	switch dur := d.byte(); dur {
	case 0:
	case 1:
		rec.Durability = DurabilityCache.String()
	case 2:
		rec.Durability = DurabilityDevice.String()
	default:
		d.fail(fmt.Errorf("durability %d", dur))
	}
	if lg := d.byte(); lg < 31 {
		rec.BlockSize = 1 << lg
	} else {
		d.fail(fmt.Errorf("block size 2^%d", lg))
	}
	size := d.uvarint()
	if size > 1<<62 {
		d.fail(fmt.Errorf("size %d", size))
	}
	rec.Size = int64(size)
	rec.Gen = d.uvarint()
	flags := d.byte()
	if flags&^(recPinned|recDirty|recCreated|recG4Wins) != 0 {
		d.fail(fmt.Errorf("flags %#x", flags))
	}
	rec.Pinned = flags&recPinned != 0
	rec.State = stateClean
	if flags&recDirty != 0 {
		rec.State = stateDirty
	}
	if flags&recCreated != 0 {
		sec, ns := d.varint(), d.uvarint()
		if ns >= 1e9 {
			d.fail(fmt.Errorf("created: %d ns", ns))
		}
		rec.Created = time.Unix(sec, int64(ns)).UTC()
	}
	rec.Written = d.runs("written")
	if flags&recG4Wins != 0 {
		rec.G4Wins = d.runs("G4-wins")
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail(fmt.Errorf("%d bytes after the last field", len(d.b)))
	}
	if d.err != nil {
		return objectRecord{}, fmt.Errorf("object record: %w", d.err)
	}
	return rec, nil
}

// recordDecoder reads recordV1 fields; the first error sticks and every
// later read returns zero.
type recordDecoder struct {
	b   []byte
	err error
}

func (d *recordDecoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
}

func (d *recordDecoder) byte() byte {
	if d.err != nil || len(d.b) == 0 {
		d.fail(errRecordShort)
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

// runs reads a count and that many runs (what names them in errors).
func (d *recordDecoder) runs(what string) [][2]uint32 {
	n := d.uvarint()
	if n > uint64(len(d.b))/2 { // every run takes two bytes at least
		d.fail(fmt.Errorf("%d %s runs in %d bytes", n, what, len(d.b)))
		n = 0
	}
	var runs [][2]uint32
	if n > 0 {
		runs = make([][2]uint32, 0, n)
	}
	next := uint64(0)
	for range n {
		first := next + d.uvarint()
		last := first + d.uvarint()
		if last > 1<<32-1 || d.err != nil {
			d.fail(fmt.Errorf("%s run past block %d", what, uint32(1<<32-1)))
			break
		}
		runs = append(runs, [2]uint32{uint32(first), uint32(last)})
		next = last + 1
	}
	return runs
}

func (d *recordDecoder) uvarint() uint64 { return readVarint(d, binary.Uvarint) }

func (d *recordDecoder) varint() int64 { return readVarint(d, binary.Varint) }

// readVarint reads one varint with parse (binary.Uvarint or
// binary.Varint).
func readVarint[T uint64 | int64](d *recordDecoder, parse func([]byte) (T, int)) T {
	if d.err != nil {
		return 0
	}
	v, n := parse(d.b)
	if n <= 0 {
		d.fail(errRecordShort)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *recordDecoder) str() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)) {
		d.fail(errRecordShort)
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}
