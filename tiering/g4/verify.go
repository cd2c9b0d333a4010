package g4

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// VerifyOptions configure VerifyStore. Zero values take the defaults.
type VerifyOptions struct {
	// Prefix is the tier's object-name prefix (default DefaultPrefix).
	Prefix string
	// Timeout bounds the read of each object (default 30 s); ListTimeout
	// the listing (default DefaultListTimeout).
	Timeout, ListTimeout time.Duration
	// MaxBlockSize is the largest payload accepted (default
	// tier.MaxBlockSize).
	MaxBlockSize int
	// MaxBad bounds VerifyReport.Bad (default 100); the rest are counted.
	MaxBad int
	// Progress, if set, is called every 256 objects and at the end with
	// the objects done and in all.
	Progress func(done, total int)
}

// VerifyReport is what VerifyStore found.
type VerifyReport struct {
	// Objects counts block objects read; Bytes the payload bytes that
	// passed their checks.
	Objects int64 `json:"objects"`
	Bytes   int64 `json:"bytes"`
	// Corrupt counts objects whose header or payload CRC32C fails;
	// Unreadable those the store would not return (an I/O error, a
	// timeout); Foreign names under the prefix that are not block names
	// (the tier ignores them).
	Corrupt    int64 `json:"corrupt"`
	Unreadable int64 `json:"unreadable"`
	Foreign    int64 `json:"foreign"`
	// Bad lists the first MaxBad problems; BadOmitted counts the rest.
	Bad        []VerifyBad `json:"bad,omitempty"`
	BadOmitted int64       `json:"bad_omitted,omitempty"`
}

// Problems reports the number of problems found (0: clean; unreadable
// objects count: they were not verified).
func (r VerifyReport) Problems() int64 { return r.Corrupt + r.Unreadable }

// VerifyBad is one object that failed.
type VerifyBad struct {
	Name      string `json:"name"` // the object's name in the store
	Namespace string `json:"namespace"`
	Object    uint64 `json:"object"`
	Index     uint32 `json:"index"`
	Gen       uint64 `json:"gen"`
	// Problem is "corrupt" or "unreadable"; Error says what failed.
	Problem string `json:"problem"`
	Error   string `json:"error"`
}

// VerifyStore checks every block object under the prefix of store offline:
// it lists them, then reads each whole and verifies its header (magic,
// version, header CRC32C, key, length) and payload CRC32C, as the tier's
// Get does, but deletes nothing (the tier deletes a corrupt object when a
// read finds it; a running daemon's fsck --drop forgets it). Each read is
// bounded by Timeout. Errors: the listing's failure, ctx's error.
func VerifyStore(ctx context.Context, store ObjectStore, o VerifyOptions) (VerifyReport, error) {
	var rep VerifyReport
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	if o.ListTimeout <= 0 {
		o.ListTimeout = DefaultListTimeout
	}
	if o.MaxBlockSize < tier.MaxBlockSize {
		o.MaxBlockSize = tier.MaxBlockSize
	}
	if o.MaxBad <= 0 {
		o.MaxBad = 100
	}
	type named struct {
		name string
		k    tier.Key
		pack *packRef // non-nil: a pack object
	}
	var objs []named
	lctx, cancel := context.WithTimeout(ctx, o.ListTimeout)
	err := store.List(lctx, o.Prefix+"/", func(a ObjectAttrs) bool {
		if k, ok := ParseBlockName(o.Prefix, a.Name); ok {
			objs = append(objs, named{a.Name, k, nil})
		} else if r, ok := parsePackName(o.Prefix, a.Name, o.MaxBlockSize); ok {
			objs = append(objs, named{a.Name, r.key(0), &r})
		} else {
			rep.Foreign++
		}
		return true
	})
	cancel()
	if err != nil {
		return rep, fmt.Errorf("g4 verify: list %s: %w", o.Prefix, err)
	}
	buf := make([]byte, o.MaxBlockSize)
	for i, ob := range objs {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		rctx, cancel := context.WithTimeout(ctx, o.Timeout)
		var n int64
		var err error
		if ob.pack != nil {
			n, err = verifyPack(rctx, store, ob.name, *ob.pack, buf)
		} else {
			var data []byte
			data, err = readVerified(rctx, store, ob.name, ob.k, o.MaxBlockSize, func(n int) []byte { return buf[:n] })
			n = int64(len(data))
		}
		cancel()
		switch {
		case err == nil:
			rep.Objects++
			rep.Bytes += n
		case errors.Is(err, ErrNotExist):
			// Deleted since the listing (another process shares the
			// store): nothing to check.
		case ctx.Err() != nil:
			return rep, ctx.Err()
		default:
			rep.Objects++
			problem := "unreadable"
			if errors.Is(err, tier.ErrCorrupt) {
				problem = "corrupt"
				rep.Corrupt++
			} else {
				rep.Unreadable++
			}
			if len(rep.Bad) >= o.MaxBad {
				rep.BadOmitted++
				break
			}
			rep.Bad = append(rep.Bad, VerifyBad{Name: ob.name, Namespace: ob.k.Namespace, Object: ob.k.Object,
				Index: ob.k.Index, Gen: ob.k.Gen, Problem: problem, Error: err.Error()})
		}
		if o.Progress != nil && ((i+1)%256 == 0 || i+1 == len(objs)) {
			o.Progress(i+1, len(objs))
		}
	}
	return rep, nil
}

// verifyPack reads pack object name (described by r) whole, with buf (at
// least one block) as scratch, and checks its header and every block's
// CRC32C; it returns the payload bytes. A corrupt block's error names its
// key.
func verifyPack(ctx context.Context, store ObjectStore, name string, r packRef, buf []byte) (int64, error) {
	rc, _, err := store.Get(ctx, name)
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	crcs, err := readHeaderFrom(rc, r)
	if err != nil {
		return 0, err
	}
	for i := range r.count {
		p := buf[:r.blockLen(i)]
		if _, err := io.ReadFull(rc, p); err != nil {
			return 0, fmt.Errorf("%w: pack truncated in block %v: %v", errHeader, r.key(i), err)
		}
		if tier.Checksum(p) != crcs[i] {
			return 0, fmt.Errorf("block %v: %w", r.key(i), errPayloadCRC)
		}
	}
	return r.payload(), nil
}
