package catalog

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"reflect"
	"testing"

	"github.com/ctxmem/ctxmemd/internal/fuzzkit"
)

// frameOf frames payload as the journal does: length, CRC32C, payload.
func frameOf(payload []byte) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(payload)))
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(payload, castagnoli))
	return append(b, payload...)
}

// FuzzJournal checks the write-ahead log decoder (journal.go): raw is a
// log file as found after a crash; payload is framed with a correct length
// and CRC by the harness, so that the fuzzer reaches the op decoder
// rather than stopping at the frame CRC. Properties:
//   - decoding never panics and allocates no more than the bytes justify
//     (an op count or length is not taken on trust);
//   - the log is canonical: the frames decoded from raw, re-encoded, are
//     exactly the leading bytes of raw, and a framed payload that decodes
//     re-encodes to itself (so nothing in a frame is ignored);
//   - a frame whose CRC does not match is never decoded.
func FuzzJournal(f *testing.F) {
	ops := []walOp{
		{kind: opPutNode, a: 5, val: []byte{1, 2, 3}},
		{kind: opPutDirent, a: 1, b: 5, name: "file.kv"},
		{kind: opPutXattr, a: 5, name: "user.k", val: []byte("v")},
		{kind: opDelDirent, a: 1, name: "old"},
		{kind: opDelNode, a: 9},
		{kind: opDelXattr, a: 5, name: "user.x"},
	}
	one := encodeFrame(7, ops[:1])
	all := append(encodeFrame(8, ops), encodeFrame(9, nil)...)
	torn := all[:len(all)-3]
	badCRC := bytes.Clone(one)
	badCRC[5] ^= 1
	huge := binary.LittleEndian.AppendUint64(nil, 1)
	huge = binary.LittleEndian.AppendUint16(huge, 0xffff) // 65535 ops declared, none present
	fuzzkit.Seed(f,
		fuzzkit.C("one", one, one[8:]),
		fuzzkit.C("all", all, encodeFrame(8, ops)[8:]),
		fuzzkit.C("torn", torn, torn[8:]),
		fuzzkit.C("badcrc", badCRC, []byte{}),
		fuzzkit.C("hugecount", frameOf(huge), huge),
		fuzzkit.C("trailing", frameOf(append(one[8:], 0)), append(one[8:], 0)),
	)
	f.Fuzz(func(t *testing.T, raw, payload []byte) {
		var re []byte
		fuzzkit.AllocAtMost(t, 64<<10+32*uint64(len(raw)), "decodeFrames", func() {
			decodeFrames(raw, func(seq uint64, ops []walOp) {
				re = append(re, encodeFrame(seq, ops)...)
			})
		})
		if !bytes.HasPrefix(raw, re) {
			t.Fatalf("decoded frames re-encode to %x, not a prefix of the log %x", re, raw)
		}
		if len(payload) < 10 {
			return
		}
		framed := frameOf(payload)
		var got []byte
		n := 0
		fuzzkit.AllocAtMost(t, 64<<10+32*uint64(len(framed)), "decodeFrames", func() {
			decodeFrames(framed, func(seq uint64, ops []walOp) {
				n++
				got = encodeFrame(seq, ops)
			})
		})
		if n > 1 {
			t.Fatalf("one frame decoded as %d", n)
		}
		if n == 1 && !bytes.Equal(got, framed) {
			t.Fatalf("frame re-encodes differently:\n got %x\nwant %x", got, framed)
		}
		framed[4] ^= 0x10 // the CRC no longer matches
		decodeFrames(framed, func(uint64, []walOp) { t.Fatal("frame with a bad CRC decoded") })
	})
}

// FuzzNodeRecord checks decodeNode (schema.go), the parser of the tree
// database's node values: it never panics; a record it accepts has a known
// kind and re-encodes to exactly the same bytes; decode(encode(n)) == n.
func FuzzNodeRecord(f *testing.F) {
	file := Record{Kind: KindFile, Mode: 0o644, UID: 1000, GID: 1000, Atime: 1, Mtime: 2, Ctime: 3, Obj: 42}
	link := Record{Kind: KindSymlink, Mode: 0o777, Target: "../a/b"}
	dir := Record{Kind: KindDir, Mode: 0o755, Atime: -1}
	bad := dir.Encode()
	bad[1] = 9
	fuzzkit.Seed(f,
		fuzzkit.C("file", file.Encode(), "", uint32(0o644), uint32(0), int64(0), uint64(7), byte(KindFile)),
		fuzzkit.C("symlink", link.Encode(), "../a/b", uint32(0o777), uint32(1), int64(-5), uint64(0), byte(KindSymlink)),
		fuzzkit.C("dir", dir.Encode(), "", uint32(0o1777), uint32(2), int64(1<<62), uint64(1), byte(KindDir)),
		fuzzkit.C("badkind", bad, "x", uint32(0), uint32(0), int64(0), uint64(0), byte(0)),
		fuzzkit.C("short", file.Encode()[:45], "", uint32(0), uint32(0), int64(0), uint64(0), byte(4)),
	)
	f.Fuzz(func(t *testing.T, raw []byte, target string, mode, id uint32, ts int64, obj uint64, kind byte) {
		if r, err := DecodeRecord(raw); err == nil {
			if r.Kind < KindDir || r.Kind > KindSymlink {
				t.Fatalf("accepted kind %d", r.Kind)
			}
			if re := r.Encode(); !bytes.Equal(re, raw) {
				t.Fatalf("node record re-encodes differently:\n got %x\nwant %x", re, raw)
			}
		} else if err.Error() == "" {
			t.Fatal("empty error")
		}

		want := Record{Kind: Kind(kind), Mode: mode, UID: id, GID: id + 1, Atime: ts, Mtime: ts + 1, Ctime: ts - 1, Obj: obj, Target: target}
		got, err := DecodeRecord(want.Encode())
		valid := want.Kind >= KindDir && want.Kind <= KindSymlink
		if (err == nil) != valid || (valid && !reflect.DeepEqual(got, want)) {
			t.Fatalf("decode(encode(%+v)) = %+v, %v", want, got, err)
		}
	})
}
