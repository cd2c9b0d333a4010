package poolkv

import (
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/ctxmem/ctxmemd/fabric/pool"
	"github.com/ctxmem/ctxmemd/internal/msgpackguard"
)

// Version is the schema version of the lease and index values written by
// this package (field v). Values of another version are skipped.
const Version = 1

// ErrMalformed is wrapped by the errors of values in a bucket that do not
// decode or carry an unknown version.
var ErrMalformed = errors.New("poolkv: malformed value")

// leaseValue is the value of a key "extent.<n>" in the leases bucket.
type leaseValue struct {
	V       int    `msgpack:"v"`
	Holder  string `msgpack:"h"`
	Expires int64  `msgpack:"x"`           // unix ns, by the holder's clock
	Epoch   uint64 `msgpack:"e,omitempty"` // 0: the epoch is the entry's revision
}

func encodeLease(v leaseValue) ([]byte, error) {
	v.V = Version
	return msgpack.Marshal(&v)
}

func decodeLease(b []byte) (leaseValue, error) {
	var v leaseValue
	if err := msgpackguard.Check(b); err != nil {
		return leaseValue{}, fmt.Errorf("%w: lease: %v", ErrMalformed, err)
	}
	if err := msgpack.Unmarshal(b, &v); err != nil {
		return leaseValue{}, fmt.Errorf("%w: lease: %v", ErrMalformed, err)
	}
	if v.V != Version {
		return leaseValue{}, fmt.Errorf("%w: lease schema version %d (this build speaks %d)", ErrMalformed, v.V, Version)
	}
	if v.Holder == "" {
		return leaseValue{}, fmt.Errorf("%w: lease without holder", ErrMalformed)
	}
	return v, nil
}

// wireEntry is FileEntry on the wire: short names, and block locations as
// 4-element arrays [extent, offset, length, epoch] (a zero Location, a block
// not in the pool, costs 5 bytes).
type wireEntry struct {
	V         int       `msgpack:"v"`
	Namespace string    `msgpack:"ns"`
	Path      string    `msgpack:"p"`
	Size      int64     `msgpack:"z"`
	BlockSize int       `msgpack:"bs"`
	Owner     string    `msgpack:"o"`
	Object    uint64    `msgpack:"id"`
	Gen       uint64    `msgpack:"g"`
	Blocks    []wireLoc `msgpack:"b"`
	Published int64     `msgpack:"t"`
}

type wireLoc struct {
	_msgpack struct{} `msgpack:",as_array"`
	Extent   uint32
	Offset   int64
	Length   uint32
	Epoch    uint64
}

func encodeEntry(e FileEntry) ([]byte, error) {
	w := wireEntry{V: Version, Namespace: e.Namespace, Path: e.Path, Size: e.Size, BlockSize: e.BlockSize,
		Owner: e.Owner, Object: e.Object, Gen: e.Gen, Published: e.Published, Blocks: make([]wireLoc, len(e.Blocks))}
	for i, l := range e.Blocks {
		w.Blocks[i] = wireLoc{Extent: l.Extent, Offset: l.Offset, Length: l.Length, Epoch: l.Epoch}
	}
	return msgpack.Marshal(&w)
}

// decodeEntry decodes an index value and checks that it belongs under key.
func decodeEntry(key string, b []byte) (FileEntry, error) {
	var w wireEntry
	// Another host wrote b: the decoder would pre-allocate any array
	// length it declares (a million locations from a few bytes).
	if err := msgpackguard.Check(b); err != nil {
		return FileEntry{}, fmt.Errorf("%w: index entry: %v", ErrMalformed, err)
	}
	if err := msgpack.Unmarshal(b, &w); err != nil {
		return FileEntry{}, fmt.Errorf("%w: index entry: %v", ErrMalformed, err)
	}
	if w.V != Version {
		return FileEntry{}, fmt.Errorf("%w: index schema version %d (this build speaks %d)", ErrMalformed, w.V, Version)
	}
	e := FileEntry{V: w.V, Namespace: w.Namespace, Path: w.Path, Size: w.Size, BlockSize: w.BlockSize,
		Owner: w.Owner, Object: w.Object, Gen: w.Gen, Published: w.Published}
	if err := e.check(); err != nil {
		return FileEntry{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if k := FileKey(e.Namespace, e.Path); k != key {
		return FileEntry{}, fmt.Errorf("%w: entry for %s/%s stored under %s (want %s)", ErrMalformed, e.Namespace, e.Path, key, k)
	}
	if len(w.Blocks) > 0 {
		e.Blocks = make([]pool.Location, len(w.Blocks))
		for i, l := range w.Blocks {
			e.Blocks[i] = pool.Location{Extent: l.Extent, Offset: l.Offset, Length: l.Length, Epoch: l.Epoch}
		}
	}
	return e, nil
}
