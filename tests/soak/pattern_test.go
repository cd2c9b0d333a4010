package soak

import (
	"strings"
	"testing"
)

// The checker itself: pages are classified right and the export model
// accepts exactly the contract's states. These run without CTXMEM_SOAK.

func TestPageClassification(t *testing.T) {
	const seed = 0xabc
	p := make([]byte, pageSize)
	scratch := make([]byte, pageSize)
	fillPage(p, magicFile, 7, 3, 2, seed)
	if pi := decodePage(p, scratch); !pi.valid || pi.id != 7 || pi.version != 3 || pi.index != 2 || pi.seed != seed {
		t.Fatalf("valid page decoded as %+v", pi)
	}
	if pi := decodePage(make([]byte, pageSize), scratch); !pi.zero {
		t.Fatalf("zero page decoded as %+v", pi)
	}
	q := append([]byte(nil), p...)
	q[1000] ^= 1
	if pi := decodePage(q, scratch); pi.valid || !strings.Contains(pi.String(), "damaged") {
		t.Fatalf("one flipped bit: %v", pi)
	}
	// A page whose header was rewritten consistently but whose fill is of
	// another version is not valid either (CRC recomputed, fill differs).
	r := append([]byte(nil), p...)
	fillPage(scratch, magicFile, 7, 4, 2, seed)
	copy(r[:hdrLen], scratch[:hdrLen])
	copy(r[crcOff:], scratch[crcOff:])
	if pi := decodePage(r, make([]byte, pageSize)); pi.valid {
		t.Fatal("mixed header/fill passed as valid")
	}
	g := make([]byte, pageSize)
	for i := range g {
		g[i] = byte(i*7 + 1)
	}
	if pi := decodePage(g, scratch); pi.valid || pi.zero || !strings.Contains(pi.String(), "garbage") {
		t.Fatalf("garbage: %v", pi)
	}
	img := fileImage(7, 3, 3*pageSize, seed)
	other := fileImage(7, 4, 3*pageSize, seed)
	copy(img[pageSize:], other[pageSize:2*pageSize])                              // a torn file: page 1 of another version
	if i := firstDiff(img, fileImage(7, 3, 3*pageSize, seed)); i != pageSize+16 { // the version field
		t.Fatalf("first difference at %d, want %d", i, pageSize+16)
	}
	if msg := describeDiff("f", img, fileImage(7, 3, 3*pageSize, seed), pageSize, 3); !strings.Contains(msg, "file 7 version 4 page 1") {
		t.Fatalf("diff report does not name the page found: %s", msg)
	}
}

func TestExportModel(t *testing.T) {
	m := newExportModel(1)
	if _, ok, _ := m.check(0, true, 0); !ok {
		t.Fatal("never-written sector must read as zeros")
	}
	m.sent[0] = []uint64{5}
	if _, ok, _ := m.check(0, true, 0); !ok {
		t.Fatal("unflushed first write: zeros (old contents) allowed")
	}
	if _, ok, _ := m.check(0, false, 5); !ok {
		t.Fatal("unflushed first write: new contents allowed")
	}
	m.lastAcked[0], m.durable[0] = 5, 5 // flushed
	m.sent[0] = append(m.sent[0], 9)
	m.lastAcked[0] = 9 // acknowledged, not flushed
	if _, ok, _ := m.check(0, true, 0); ok {
		t.Fatal("zeros after a flushed write accepted")
	}
	if _, ok, lost := m.check(0, false, 5); !ok || !lost {
		t.Fatalf("flushed version with a newer unflushed ack: ok=%v lost=%v, want true true", ok, lost)
	}
	if _, ok, _ := m.check(0, false, 9); !ok {
		t.Fatal("newer acknowledged version rejected")
	}
	if _, ok, _ := m.check(0, false, 7); ok {
		t.Fatal("a version never written to the sector accepted")
	}
	m.durable[0] = 9
	if _, ok, _ := m.check(0, false, 5); ok {
		t.Fatal("version older than the flushed one accepted")
	}
}

// TRIM / WRITE_ZEROES are versions whose content is zeros: zeros are
// right exactly where one of them is the durable version or a newer one
// sent, and data older than a flushed TRIM is wrong.
func TestExportModelZeroes(t *testing.T) {
	m := newExportModel(1)
	m.sent[0] = []uint64{3, 4, 6}
	m.durable[0], m.lastAcked[0] = 3, 3 // data 3 flushed
	m.markZero(4, "trim")               // TRIM 4, acknowledged, not flushed
	m.lastAcked[0] = 4
	if x, ok, lost := m.check(0, true, 0); !ok || x != 4 || lost {
		t.Fatalf("zeros of an unflushed TRIM: match=%d ok=%v lost=%v", x, ok, lost)
	}
	if _, ok, lost := m.check(0, false, 3); !ok || !lost {
		t.Fatal("the flushed data before an unflushed TRIM must be allowed (a lost TRIM)")
	}
	m.durable[0] = 4 // TRIM flushed
	if x, ok, _ := m.check(0, true, 0); !ok || x != 4 {
		t.Fatal("zeros of a flushed TRIM rejected")
	}
	if _, ok, _ := m.check(0, false, 3); ok {
		t.Fatal("data older than a flushed TRIM accepted")
	}
	if _, ok, _ := m.check(0, false, 6); !ok {
		t.Fatal("data written after a flushed TRIM rejected")
	}
	m.durable[0], m.lastAcked[0] = 6, 6 // data 6 flushed after the TRIM
	if _, ok, _ := m.check(0, true, 0); ok {
		t.Fatal("zeros after a flushed write that followed a TRIM accepted")
	}
	if _, ok, _ := m.check(0, false, 4); ok {
		t.Fatal("a TRIM version read as data accepted")
	}
}

// The truncate-and-rewrite states: exactly one state from the
// acknowledged one on; zeros where a state holds written data are wrong,
// and so is a mix of two states (stale pages back after a truncate).
func TestTruncStates(t *testing.T) {
	const seed, id = 0x77, 9
	st := func(v uint64, pages ...uint64) fileVer {
		return fileVer{v: v, pages: append([]uint64(nil), pages...), size: len(pages) * pageSize}
	}
	layout := make([]uint64, 65) // pages 0..64 of version 10
	for i := range layout {
		layout[i] = 10
	}
	afterW := append(append([]uint64(nil), layout[:64]...), 11) // pwrite at 256 KiB: version 11
	trunc := []uint64{10}                                       // ftruncate 4096
	holes := make([]uint64, 65)                                 // pwrite at 256 KiB again: version 13, pages 1..63 holes
	holes[0], holes[64] = 10, 13
	acked := st(10, layout...)
	pending := []fileVer{st(11, afterW...), st(12, trunc...), st(13, holes...)}
	for _, c := range append([]fileVer{acked}, pending...) {
		if w, _, why := matchState(id, seed, c.image(id, seed), &acked, pending); w == nil || w.v != c.v {
			t.Fatalf("%s not matched: %v %s", c, w, why)
		}
	}
	if w, isAcked, _ := matchState(id, seed, acked.image(id, seed), &acked, pending); !isAcked || w.v != 10 {
		t.Fatal("acknowledged layout not recognised as acknowledged")
	}
	// zeros in page 5 of the first layout: WRONG — per page too when no
	// truncate is pending, and as a mix of states when one is (a page-wise
	// union would let it pass)
	bad := st(0, layout...)
	bad.pages[5] = 0
	if w, _, why := matchState(id, seed, bad.image(id, seed), &acked, pending[:1]); w != nil || !strings.Contains(why, "page 5 (offset 20480) is all zeros") {
		t.Fatalf("zeros in a written page accepted: %v %s", w, why)
	}
	if w, _, why := matchState(id, seed, bad.image(id, seed), &acked, pending); w != nil || !strings.Contains(why, "mixed") {
		t.Fatalf("zeros in a written page accepted: %v %s", w, why)
	}
	// stale data in the holes with the newest tail page: mixed states
	mix := st(0, afterW...)
	mix.pages[64] = 13
	if w, _, why := matchState(id, seed, mix.image(id, seed), &acked, pending); w != nil || !strings.Contains(why, "mixed") {
		t.Fatalf("stale pages after a truncate accepted: %v %s", w, why)
	}
	// the truncated size after an acknowledged later state: not allowed
	if w, _, _ := matchState(id, seed, st(12, trunc...).image(id, seed), &pending[2], nil); w != nil {
		t.Fatal("a state older than the acknowledged one accepted")
	}
	// a clean prefix of a whole-file version is still fine
	u := fileVer{v: 20, size: 3 * pageSize}
	if w, _, _ := matchState(id, seed, u.image(id, seed)[:pageSize+100], nil, []fileVer{u}); w == nil || w.v != 20 {
		t.Fatal("clean prefix of a whole-file version rejected")
	}
}
