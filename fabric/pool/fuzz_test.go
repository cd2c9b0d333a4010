package pool

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/internal/fuzzkit"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// Fuzz targets for the on-device formats of the shared pool: the
// superblock (superblock.go), record headers (record.go) and extent
// headers (extent.go). Each takes raw bytes, as read from a device another
// host may have written, plus the fields of a header built by the real
// encoder, and checks:
//   - decoding never panics or alters its buffer; errors wrap the
//     documented sentinels;
//   - what decodes re-encodes to the same bytes (reserved bytes aside): no
//     field is ignored, every accepted byte is covered by the CRC;
//   - decode(encode(x)) == x, and one flipped bit makes it fail.

func flipBit(b []byte, flip uint32, n int) int {
	bit := int(flip % uint32(8*n))
	b[bit/8] ^= 1 << (bit % 8)
	return bit
}

func FuzzSuperblock(f *testing.F) {
	sb := Superblock{Version: FormatVersion, PoolID: [16]byte{1, 2, 3}, ExtentSize: DefaultExtentSize,
		ExtentCount: 10, DataStart: DataStart, DeviceSize: DataStart + 10*DefaultExtentSize, Created: time.Unix(0, 1700000000)}
	page := make([]byte, pageSize)
	encodeSuperblock(page, sb)
	v2 := slices.Clone(page)
	binary.LittleEndian.PutUint32(v2[8:], 2)
	over := sb
	over.ExtentCount = 1 << 31
	overPage := make([]byte, pageSize)
	encodeSuperblock(overPage, over)
	seed := func(name string, raw []byte, s Superblock, flip uint32) fuzzkit.Case {
		return fuzzkit.C(name, raw, s.PoolID[:], s.ExtentSize, s.ExtentCount, s.DataStart, s.DeviceSize, s.Created.UnixNano(), flip)
	}
	fuzzkit.Seed(f,
		seed("valid", page, sb, 0),
		seed("version2", v2, sb, 100),
		seed("overflow", overPage, over, 7),
		seed("short", page[:100], sb, 1),
	)
	f.Fuzz(func(t *testing.T, raw, id []byte, extSize int64, extCount uint32, dataStart, devSize, created int64, flip uint32) {
		orig := slices.Clone(raw)
		s, err := decodeSuperblock(raw)
		if !bytes.Equal(raw, orig) {
			t.Fatal("decodeSuperblock changed its buffer")
		}
		if err != nil {
			if !errors.Is(err, ErrNoSuperblock) && !errors.Is(err, ErrUnknownVersion) && !errors.Is(err, ErrBadSuperblock) {
				t.Fatalf("error %v wraps none of the superblock errors", err)
			}
		} else {
			if s.validate() != nil || s.end() > s.DeviceSize || s.end() < DataStart {
				t.Fatalf("accepted an impossible geometry: %+v", s)
			}
			re := make([]byte, pageSize)
			encodeSuperblock(re, s)
			copy(re[44:48], raw[44:48]) // reserved
			binary.LittleEndian.PutUint32(re[12:], 0)
			binary.LittleEndian.PutUint32(re[12:], tier.Checksum(re[:sbUsed]))
			if !bytes.Equal(re[:sbUsed], raw[:sbUsed]) {
				t.Fatalf("re-encoded superblock differs:\n got %x\nwant %x", re[:sbUsed], raw[:sbUsed])
			}
		}

		want := Superblock{Version: FormatVersion, ExtentSize: extSize, ExtentCount: extCount,
			DataStart: dataStart, DeviceSize: devSize, Created: time.Unix(0, created)}
		copy(want.PoolID[:], id)
		enc := make([]byte, pageSize)
		encodeSuperblock(enc, want)
		got, err := decodeSuperblock(enc)
		if (err == nil) != (want.validate() == nil) {
			t.Fatalf("decode(encode(%+v)): %v, but validate says %v", want, err, want.validate())
		}
		if err != nil {
			return
		}
		if got != want {
			t.Fatalf("decode(encode(x)) = %+v, want %+v", got, want)
		}
		bit := flipBit(enc, flip, sbUsed)
		if _, err := decodeSuperblock(enc); err == nil {
			t.Fatalf("superblock with bit %d flipped decodes", bit)
		}
	})
}

func FuzzRecordHeader(f *testing.F) {
	h := recordHeader{poolID: [16]byte{9}, offset: 5 << 20, extent: 3, length: 4096, epoch: 77,
		key: tier.Key{Namespace: "ns", Object: 1, Gen: 2, Index: 3}, payloadCRC: 0xdeadbeef,
		written: time.Unix(0, 1700000000), host: "host-a"}
	page := make([]byte, headerSize)
	encodeHeader(page, &h)
	maxed := h
	maxed.host = string(bytes.Repeat([]byte("h"), MaxHost))
	maxed.key.Namespace = string(bytes.Repeat([]byte("n"), MaxNamespace))
	maxPage := make([]byte, headerSize)
	encodeHeader(maxPage, &maxed)
	bad := slices.Clone(page)
	bad[88] = MaxHost + 1
	seed := func(name string, raw []byte, h recordHeader, flip uint32) fuzzkit.Case {
		return fuzzkit.C(name, raw, h.poolID[:], h.offset, h.extent, h.length, h.epoch, h.key.Namespace,
			h.key.Object, h.key.Gen, h.key.Index, h.payloadCRC, h.written.UnixNano(), h.host, flip)
	}
	fuzzkit.Seed(f,
		seed("valid", page, h, 0),
		seed("max", maxPage, maxed, 1000),
		seed("badhost", bad, h, 3),
		seed("short", page[:hdrFixed], h, 1),
	)
	f.Fuzz(func(t *testing.T, raw, id []byte, offset int64, extent, length uint32, epoch uint64, ns string,
		obj, gen uint64, idx, pcrc uint32, written int64, host string, flip uint32) {
		orig := slices.Clone(raw)
		got, err := decodeHeader(raw)
		if !bytes.Equal(raw, orig) {
			t.Fatal("decodeHeader changed its buffer")
		}
		if err != nil {
			if !errors.Is(err, errNotRecord) && !errors.Is(err, errHeaderCRC) {
				t.Fatalf("error %v wraps neither errNotRecord nor errHeaderCRC", err)
			}
		} else {
			if len(got.host) > MaxHost || len(got.key.Namespace) > MaxNamespace {
				t.Fatalf("accepted host %d bytes, namespace %d bytes", len(got.host), len(got.key.Namespace))
			}
			used := hdrFixed + len(got.key.Namespace)
			re := make([]byte, headerSize)
			encodeHeader(re, &got)
			// Reserved (76-79, 153) and the host padding are covered by the
			// CRC but not interpreted.
			for _, i := range []int{76, 77, 78, 79, 153} {
				re[i] = raw[i]
			}
			copy(re[89+len(got.host):89+MaxHost], raw[89+len(got.host):89+MaxHost])
			binary.LittleEndian.PutUint32(re[8:], 0)
			binary.LittleEndian.PutUint32(re[8:], tier.Checksum(re[:used]))
			if !bytes.Equal(re[:used], raw[:used]) {
				t.Fatalf("re-encoded record header differs:\n got %x\nwant %x", re[:used], raw[:used])
			}
		}

		if len(host) > MaxHost || len(ns) > MaxNamespace {
			return
		}
		want := recordHeader{offset: offset, extent: extent, length: length, epoch: epoch,
			key: tier.Key{Namespace: ns, Object: obj, Gen: gen, Index: idx}, payloadCRC: pcrc,
			written: time.Unix(0, written), host: host}
		copy(want.poolID[:], id)
		enc := make([]byte, headerSize)
		encodeHeader(enc, &want)
		back, err := decodeHeader(enc)
		if err != nil || back != want {
			t.Fatalf("decode(encode(%+v)) = %+v, %v", want, back, err)
		}
		bit := flipBit(enc, flip, hdrFixed+len(ns))
		if _, err := decodeHeader(enc); err == nil {
			t.Fatalf("record header with bit %d flipped decodes", bit)
		}
	})
}

func FuzzExtentHeader(f *testing.F) {
	h := extentHeader{extent: 4, poolID: [16]byte{7, 7}, epoch: 12, stamped: time.Unix(0, 1700000000), host: "host-b"}
	page := make([]byte, pageSize)
	encodeExtentHeader(page, &h)
	bad := slices.Clone(page)
	bad[48] = 200
	seed := func(name string, raw []byte, h extentHeader, flip uint32) fuzzkit.Case {
		return fuzzkit.C(name, raw, h.extent, h.poolID[:], h.epoch, h.stamped.UnixNano(), h.host, flip)
	}
	fuzzkit.Seed(f,
		seed("valid", page, h, 0),
		seed("badhost", bad, h, 500),
		seed("short", page[:ehUsed], h, 2),
	)
	f.Fuzz(func(t *testing.T, raw []byte, extent uint32, id []byte, epoch uint64, stamped int64, host string, flip uint32) {
		orig := slices.Clone(raw)
		got, err := decodeExtentHeader(raw)
		if !bytes.Equal(raw, orig) {
			t.Fatal("decodeExtentHeader changed its buffer")
		}
		if err != nil {
			if !errors.Is(err, errNotRecord) && !errors.Is(err, errHeaderCRC) {
				t.Fatalf("error %v wraps neither errNotRecord nor errHeaderCRC", err)
			}
		} else {
			re := make([]byte, pageSize)
			encodeExtentHeader(re, &got)
			copy(re[6:8], raw[6:8]) // reserved
			copy(re[49+len(got.host):ehUsed], raw[49+len(got.host):ehUsed])
			binary.LittleEndian.PutUint32(re[8:], 0)
			binary.LittleEndian.PutUint32(re[8:], tier.Checksum(re[:ehUsed]))
			if !bytes.Equal(re[:ehUsed], raw[:ehUsed]) {
				t.Fatalf("re-encoded extent header differs:\n got %x\nwant %x", re[:ehUsed], raw[:ehUsed])
			}
		}

		if len(host) > MaxHost {
			return
		}
		want := extentHeader{extent: extent, epoch: epoch, stamped: time.Unix(0, stamped), host: host}
		copy(want.poolID[:], id)
		enc := make([]byte, pageSize)
		encodeExtentHeader(enc, &want)
		back, err := decodeExtentHeader(enc)
		if err != nil || back != want {
			t.Fatalf("decode(encode(%+v)) = %+v, %v", want, back, err)
		}
		bit := flipBit(enc, flip, ehUsed)
		if _, err := decodeExtentHeader(enc); err == nil {
			t.Fatalf("extent header with bit %d flipped decodes", bit)
		}
	})
}
