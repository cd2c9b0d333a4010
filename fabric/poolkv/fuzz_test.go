package poolkv

import (
	"errors"
	"reflect"
	"testing"

	"github.com/ctxmem/ctxmemd/fabric/pool"
	"github.com/ctxmem/ctxmemd/internal/fuzzkit"
)

// Fuzz targets for the values other hosts write to the pool's key-value
// buckets (wire.go): lease values and file index entries. Properties:
//   - decoding never panics, allocates in proportion to the value (a
//     declared array or string length is not taken on trust), and every
//     error wraps ErrMalformed;
//   - an accepted value is well formed (version, holder, key) and survives
//     encode → decode unchanged;
//   - decode(encode(x)) == x for every value the encoder writes.

// arrayOf16M is a msgpack array header declaring 2^24 elements, with none
// following.
var arrayOf16M = []byte{0xdd, 0x01, 0x00, 0x00, 0x00}

func FuzzLease(f *testing.F) {
	valid, _ := encodeLease(leaseValue{Holder: "host-a", Expires: 1700000000, Epoch: 9})
	noEpoch, _ := encodeLease(leaseValue{Holder: "h", Expires: -1})
	fuzzkit.Seed(f,
		fuzzkit.C("valid", valid, "host-a", int64(1700000000), uint64(9)),
		fuzzkit.C("noepoch", noEpoch, "h", int64(-1), uint64(0)),
		fuzzkit.C("noholder", []byte{0x81, 0xa1, 'v', 0x01}, "", int64(0), uint64(0)),
		fuzzkit.C("hugearray", arrayOf16M, "x", int64(1), uint64(1)),
		fuzzkit.C("newer-hugefield", append([]byte{0x82, 0xa1, 'v', 0x02, 0xa1, 'z'}, arrayOf16M...), "x", int64(1), uint64(1)),
		fuzzkit.C("garbage", []byte("\xc1\xff"), "x", int64(1), uint64(1)),
	)
	f.Fuzz(func(t *testing.T, raw []byte, holder string, expires int64, epoch uint64) {
		var got leaseValue
		var err error
		fuzzkit.AllocAtMost(t, 64<<10+64*uint64(len(raw)), "decodeLease", func() { got, err = decodeLease(raw) })
		var newer bool
		fuzzkit.AllocAtMost(t, 64<<10+64*uint64(len(raw)), "newerLease", func() { newer = newerLease(raw) })
		if newer && err == nil {
			t.Fatalf("lease %+v both ours and of a newer version", got)
		}
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
		} else {
			if got.V != Version || got.Holder == "" {
				t.Fatalf("accepted %+v", got)
			}
			enc, err := encodeLease(got)
			if err != nil {
				t.Fatal(err)
			}
			if back, err := decodeLease(enc); err != nil || back != got {
				t.Fatalf("accepted lease does not survive encode/decode: %+v, %v (was %+v)", back, err, got)
			}
		}

		want := leaseValue{V: Version, Holder: holder, Expires: expires, Epoch: epoch}
		enc, err := encodeLease(want)
		if err != nil {
			t.Fatal(err)
		}
		back, err := decodeLease(enc)
		if (err == nil) != (holder != "") || err == nil && back != want {
			t.Fatalf("decode(encode(%+v)) = %+v, %v", want, back, err)
		}
	})
}

func FuzzEntry(f *testing.F) {
	e := FileEntry{V: Version, Namespace: "llama", Path: "a/b.kv", Size: 5 << 20, BlockSize: 1 << 20, Owner: "host-a",
		Object: 4, Gen: 2, Published: 1700000000,
		Blocks: []pool.Location{{Extent: 1, Offset: 2 << 20, Length: 1 << 20, Epoch: 3}, {}, {Extent: 2, Offset: 3 << 20, Length: 7}}}
	valid, _ := encodeEntry(e)
	empty, _ := encodeEntry(FileEntry{Namespace: "n", Path: "p"})
	seed := func(name string, raw []byte, key string, e FileEntry, locs []byte) fuzzkit.Case {
		return fuzzkit.C(name, raw, key, e.Namespace, e.Path, e.Size, e.BlockSize, e.Owner, e.Object, e.Gen, e.Published, locs)
	}
	fuzzkit.Seed(f,
		seed("valid", valid, FileKey(e.Namespace, e.Path), e, []byte{1, 0, 2, 0, 0, 3}),
		seed("empty", empty, FileKey("n", "p"), FileEntry{Namespace: "n", Path: "p"}, nil),
		seed("wrongkey", valid, FileKey("llama", "other"), e, []byte{9}),
		seed("hugeblocks", append([]byte{0x81, 0xa1, 'b'}, arrayOf16M...), "f.x", e, nil),
		seed("garbage", []byte{0x92, 0xc0}, "f.", FileEntry{Size: -1}, nil),
	)
	f.Fuzz(func(t *testing.T, raw []byte, key, ns, path string, size int64, bs int, owner string, obj, gen uint64, published int64, locs []byte) {
		var got FileEntry
		var err error
		fuzzkit.AllocAtMost(t, 64<<10+64*uint64(len(raw)), "decodeEntry", func() { got, err = decodeEntry(key, raw) })
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
		} else {
			if got.V != Version || got.check() != nil || FileKey(got.Namespace, got.Path) != key {
				t.Fatalf("accepted %+v under %s", got, key)
			}
			enc, err := encodeEntry(got)
			if err != nil {
				t.Fatal(err)
			}
			if back, err := decodeEntry(key, enc); err != nil || !reflect.DeepEqual(back, got) {
				t.Fatalf("accepted entry does not survive encode/decode: %+v, %v (was %+v)", back, err, got)
			}
		}

		want := FileEntry{V: Version, Namespace: ns, Path: path, Size: size, BlockSize: bs, Owner: owner,
			Object: obj, Gen: gen, Published: published}
		for i, b := range locs {
			if b == 0 {
				want.Blocks = append(want.Blocks, pool.Location{})
				continue
			}
			want.Blocks = append(want.Blocks, pool.Location{Extent: uint32(b), Offset: int64(i) << 12, Length: uint32(b) << 8, Epoch: uint64(i)})
		}
		enc, err := encodeEntry(want)
		if err != nil {
			t.Fatal(err)
		}
		k := FileKey(ns, path)
		back, err := decodeEntry(k, enc)
		if (err == nil) != (want.check() == nil) || err == nil && !reflect.DeepEqual(back, want) {
			t.Fatalf("decode(encode(%+v)) = %+v, %v", want, back, err)
		}
	})
}
