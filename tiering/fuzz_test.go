package tiering

import (
	"encoding/binary"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/internal/fuzzkit"
)

// FuzzObjectRecord checks decodeObjectRecord (meta.go), the parser of the
// object records recovery rebuilds the store from:
//   - it never panics and allocates in proportion to its input;
//   - a record it accepts has a known state, a valid block size, a
//     non-negative size and ascending written runs, and survives
//     encode → decode unchanged;
//   - a record put writes (from the fields below, with runs from toRuns)
//     decodes to itself, in the binary form put writes and in the JSON
//     form of earlier builds.
func FuzzObjectRecord(f *testing.F) {
	created := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	rec := objectRecord{Namespace: "kv", Kind: KindNBD, BlockSize: 64 << 10, Size: 1 << 20, Gen: 3, Pinned: true,
		Created: created, State: stateClean, Written: toRuns([]uint32{0, 1, 2, 7, 9})}
	valid, _ := json.Marshal(rec)
	dirty, _ := json.Marshal(objectRecord{Namespace: "kv", BlockSize: 4096, State: stateDirty, Created: created})
	idx := func(v ...uint32) []byte {
		var b []byte
		for _, x := range v {
			b = binary.LittleEndian.AppendUint32(b, x)
		}
		return b
	}
	seed := func(name string, raw []byte, r objectRecord, blocks []byte) fuzzkit.Case {
		return fuzzkit.C(name, raw, r.Namespace, r.Kind, r.BlockSize, r.Size, r.Gen, r.Pinned, r.Created.UnixNano(), r.State == stateDirty, blocks)
	}
	fuzzkit.Seed(f,
		seed("clean", valid, rec, idx(0, 1, 2, 7, 9)),
		seed("dirty", dirty, objectRecord{Namespace: "x", BlockSize: 4096, State: stateDirty}, nil),
		seed("inverted", []byte(`{"ns":"a","bs":4096,"size":8192,"state":"clean","written":[[5,3]]}`), rec, idx(3)),
		seed("hugebs", []byte(`{"ns":"a","bs":4294967296,"size":8192,"state":"clean","written":[[0,0]]}`), rec, idx(4294967295)),
		seed("badstate", []byte(`{"ns":"a","bs":4096,"state":"corrupt"}`), rec, nil),
		seed("garbage", []byte(`{"ns":`), rec, nil),
		seed("binary", mustEncode(f, &rec), rec, idx(0, 1, 2, 7, 9)),
		seed("binary-short", mustEncode(f, &rec)[:9], rec, nil),
		seed("binary-runs", []byte{recordV1, 0, 0, 0, 12, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f}, rec, nil),
	)
	f.Fuzz(func(t *testing.T, raw []byte, ns, kind string, bs int, size int64, gen uint64, pinned bool, created int64, dirty bool, blocks []byte) {
		var got objectRecord
		var err error
		fuzzkit.AllocAtMost(t, 64<<10+64*uint64(len(raw)), "decodeObjectRecord", func() {
			got, err = decodeObjectRecord(raw)
		})
		if err == nil {
			checkRecord(t, got)
			again, err := encodeObjectRecord(&got)
			if err != nil {
				t.Fatalf("accepted record does not encode: %v\n%+v", err, got)
			}
			back, err := decodeObjectRecord(again)
			if err != nil || !sameRecord(back, got) {
				t.Fatalf("accepted record does not survive encode/decode: %v\n%+v\n%+v", err, got, back)
			}
		}

		want := objectRecord{Namespace: ns, Kind: kind, BlockSize: bs, Size: size, Gen: gen, Pinned: pinned,
			Created: time.Unix(0, created).UTC(), State: stateClean}
		if dirty {
			want.State = stateDirty
		}
		// Distinct indexes, as record takes them from the block map.
		var written []uint32
		seen := map[uint32]bool{}
		for i := 0; i+4 <= len(blocks); i += 4 {
			if x := binary.LittleEndian.Uint32(blocks[i:]); !seen[x] {
				seen[x] = true
				written = append(written, x)
			}
		}
		want.Written = toRuns(written)
		validBS := bs >= 4096 && bs <= 4<<20 && bs&(bs-1) == 0
		if bin, err := encodeObjectRecord(&want); err == nil {
			back, err := decodeObjectRecord(bin)
			if (err == nil) != (validBS && size >= 0) {
				t.Fatalf("decode(encode(%+v)): %v", want, err)
			}
			if err == nil && !sameRecord(back, want) {
				t.Fatalf("decode(encode(x)) = %+v, want %+v", back, want)
			}
		} else if bs > 0 && bs&(bs-1) == 0 && size >= 0 {
			t.Fatalf("encode(%+v): %v", want, err)
		}
		enc, err := json.Marshal(want)
		if err != nil {
			return // not valid UTF-8 is replaced; times past year 9999 do not encode
		}
		back, err := decodeObjectRecord(enc)
		if (err == nil) != (validBS && size >= 0) {
			t.Fatalf("decode(encode(%+v)): %v", want, err)
		}
		if err == nil {
			checkRecord(t, back)
			var w objectRecord
			_ = json.Unmarshal(enc, &w) // what put's reader saw before decodeObjectRecord checked it
			if !sameRecord(back, w) {
				t.Fatalf("decode(encode(x)) = %+v, want %+v", back, w)
			}
		}
	})
}

func mustEncode(tb testing.TB, r *objectRecord) []byte {
	tb.Helper()
	b, err := encodeObjectRecord(r)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func checkRecord(t *testing.T, r objectRecord) {
	t.Helper()
	if r.State != stateClean && r.State != stateDirty || r.BlockSize < 4096 || r.BlockSize > 4<<20 ||
		r.BlockSize&(r.BlockSize-1) != 0 || r.Size < 0 {
		t.Fatalf("accepted record %+v", r)
	}
	for i, run := range r.Written {
		if run[0] > run[1] || i > 0 && run[0] <= r.Written[i-1][1] {
			t.Fatalf("accepted runs %v", r.Written)
		}
	}
}

// sameRecord compares records, Created by instant (JSON keeps the instant,
// not the *time.Location).
func sameRecord(a, b objectRecord) bool {
	if !a.Created.Equal(b.Created) {
		return false
	}
	a.Created, b.Created = time.Time{}, time.Time{}
	return reflect.DeepEqual(a, b)
}
