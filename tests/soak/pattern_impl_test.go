package soak

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// Every 4 KiB page the soak writes is self-verifying: a header says what
// it is (file page or export sector), whose it is (file id), which
// version and which page index, the rest is a pseudo-random fill derived
// from those fields, and a CRC32C over everything before it closes the
// page. So a page read back can always be classified: exactly the version
// expected, another complete version (named), all zeros, or garbage.
//
//	off  0: magic (8 bytes)
//	off  8: id (file id; 0 for export sectors)
//	off 16: version
//	off 24: page index in the file / sector index in the export
//	off 32: run seed (a page of an earlier run never passes as this run's)
//	off 40: fill
//	off 4092: CRC32C of bytes [0, 4092)
const (
	pageSize  = 4096
	magicFile = 0x31534b4153585443 // "CTXSAKS1" little-endian
	magicNBD  = 0x31444e4253585443 // "CTXSBND1"
	hdrLen    = 40
	crcOff    = pageSize - 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// fillPage writes the page (magic, id, version, index) of run seed into p
// (len pageSize).
func fillPage(p []byte, magic, id, version, index, seed uint64) {
	binary.LittleEndian.PutUint64(p[0:], magic)
	binary.LittleEndian.PutUint64(p[8:], id)
	binary.LittleEndian.PutUint64(p[16:], version)
	binary.LittleEndian.PutUint64(p[24:], index)
	binary.LittleEndian.PutUint64(p[32:], seed)
	x := seed ^ id*0x9e3779b97f4a7c15 ^ version*0xbf58476d1ce4e5b9 ^ index*0x94d049bb133111eb ^ magic
	for o := hdrLen; o+8 <= crcOff; o += 8 {
		x += 0x9e3779b97f4a7c15 // splitmix64
		z := x
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		binary.LittleEndian.PutUint64(p[o:], z^(z>>31))
	}
	p[crcOff-4], p[crcOff-3], p[crcOff-2], p[crcOff-1] = 0xc7, 0x5a, 0x0a, 0x11 // (4092-40) % 8 == 4
	binary.LittleEndian.PutUint32(p[crcOff:], crc32.Checksum(p[:crcOff], castagnoli))
}

// pageInfo is what a page read back says it is.
type pageInfo struct {
	zero    bool // every byte zero
	valid   bool // magic and CRC good, and the fill regenerates exactly
	magic   uint64
	id      uint64
	version uint64
	index   uint64
	seed    uint64
}

func (pi pageInfo) String() string {
	switch {
	case pi.zero:
		return "all zeros"
	case pi.valid && pi.magic == magicFile:
		return fmt.Sprintf("file %d version %d page %d", pi.id, pi.version, pi.index)
	case pi.valid && pi.magic == magicNBD:
		return fmt.Sprintf("export sector %d version %d", pi.index, pi.version)
	case pi.magic == magicFile || pi.magic == magicNBD:
		return fmt.Sprintf("damaged page (header says id %d version %d index %d seed %#x; CRC or fill wrong)", pi.id, pi.version, pi.index, pi.seed)
	}
	return "garbage (no soak header)"
}

var zeroPage = make([]byte, pageSize)

// decodePage classifies a page read back; scratch is a pageSize buffer.
func decodePage(p, scratch []byte) pageInfo {
	if bytes.Equal(p, zeroPage) {
		return pageInfo{zero: true}
	}
	pi := pageInfo{magic: binary.LittleEndian.Uint64(p[0:]), id: binary.LittleEndian.Uint64(p[8:]),
		version: binary.LittleEndian.Uint64(p[16:]), index: binary.LittleEndian.Uint64(p[24:]),
		seed: binary.LittleEndian.Uint64(p[32:])}
	if pi.magic != magicFile && pi.magic != magicNBD {
		return pi
	}
	fillPage(scratch, pi.magic, pi.id, pi.version, pi.index, pi.seed)
	pi.valid = bytes.Equal(p, scratch)
	return pi
}

// firstDiff returns the first offset where a and b differ (len(a) == len(b)), or -1.
func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// fileImage returns the full content of version v of file id: size bytes,
// a whole number of pages.
func fileImage(id, version uint64, size int, seed uint64) []byte {
	b := make([]byte, size)
	for i := 0; i < size/pageSize; i++ {
		fillPage(b[i*pageSize:(i+1)*pageSize], magicFile, id, version, uint64(i), seed)
	}
	return b
}
