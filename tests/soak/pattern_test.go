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
	if ok, _ := m.check(0, 0); !ok {
		t.Fatal("never-written sector must read as zeros")
	}
	m.sent[0] = []uint64{5}
	if ok, _ := m.check(0, 0); !ok {
		t.Fatal("unflushed first write: zeros (old contents) allowed")
	}
	if ok, _ := m.check(0, 5); !ok {
		t.Fatal("unflushed first write: new contents allowed")
	}
	m.lastAcked[0], m.durable[0] = 5, 5 // flushed
	m.sent[0] = append(m.sent[0], 9)
	m.lastAcked[0] = 9 // acknowledged, not flushed
	if ok, _ := m.check(0, 0); ok {
		t.Fatal("zeros after a flushed write accepted")
	}
	if ok, lost := m.check(0, 5); !ok || !lost {
		t.Fatalf("flushed version with a newer unflushed ack: ok=%v lost=%v, want true true", ok, lost)
	}
	if ok, _ := m.check(0, 9); !ok {
		t.Fatal("newer acknowledged version rejected")
	}
	if ok, _ := m.check(0, 7); ok {
		t.Fatal("a version never written to the sector accepted")
	}
	m.durable[0] = 9
	if ok, _ := m.check(0, 5); ok {
		t.Fatal("version older than the flushed one accepted")
	}
}
