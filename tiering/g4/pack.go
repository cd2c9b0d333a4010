package g4

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// Packing limits (TierOptions.PackSize).
const (
	// DefaultPackSize is the default size bound of one pack object,
	// header included: 16 MiB, 63 blocks of 256 KiB (about 65 PUTs per
	// GiB sunk, half the 128 aimed at, leaving room for runs cut short
	// at file ends), an 8 MiB KV file in one object, one PUT on S3 (the
	// S3 store's default part size is also 16 MiB: a larger object
	// would be a multipart upload of several requests), and a PUT that
	// takes well under a second at 100 MB/s.
	DefaultPackSize = 16 << 20
	// MinPackSize and MaxPackSize bound a configured PackSize.
	MinPackSize = 1 << 20
	MaxPackSize = 256 << 20
)

var (
	_ tier.Packer    = (*Tier)(nil)
	_ tier.RunReader = (*Tier)(nil)
)

// ReadRun implements tier.RunReader: 1 + how many of the keys following
// k (k.Index+1, ...) are live members of the pack object that holds k,
// at most limit in all; 1 when k has an object of its own, 0 when the
// index does not know k. It asks the index only (no backend call).
func (t *Tier) ReadRun(k tier.Key, limit int) int {
	e, ok := t.idx.entry(k)
	if !ok || limit < 1 {
		return 0
	}
	if e.pk == nil {
		return 1
	}
	pk := e.pk
	n := 1
	for n < limit {
		next := k
		next.Index += uint32(n)
		if next.Index < k.Index { // wrapped
			break
		}
		f, ok := t.idx.entry(next)
		if _, in := pk.ref.member(next); !ok || f.pk != pk || !in {
			break
		}
		n++
	}
	return n
}

// PackBlocks implements tier.Packer: how many blocks of blockSize bytes
// of namespace ns fit in one pack object of at most PackSize bytes, header
// included; 0 when packing is off or fewer than two fit.
func (t *Tier) PackBlocks(ns string, blockSize int) int {
	if t.opts.PackSize < 0 || blockSize <= 0 || blockSize > t.opts.MaxBlockSize {
		return 0
	}
	n := (t.opts.PackSize - packFixed - len(ns)) / (blockSize + 4)
	if n < 2 {
		return 0
	}
	return n
}

// PutPack implements tier.Packer: it cuts keys into runs of consecutive
// blocks of one object generation (every block of a run as long as the
// first, but the last, which may be shorter) that make objects of at most
// PackSize bytes, header included, and stores each run of two or more blocks as one pack object
// (packname.go), with Put's guarantees; a run of one block, or every key
// when packing is off (PackSize < 0), is stored with Put. It returns how
// many keys it stored, always a prefix of keys: keys[:n] are stored, and
// the error, if any, is that of the run that failed. Once a pack is
// durable, the per-block object of each of its keys is deleted (of every
// key when the tier is not listed, Listed), because a listing takes a
// per-block object for the live copy; if such a delete fails, that key
// and the later ones are not stored (the per-block object stays the live
// copy, or the key dies in the pack). The put of a pack object
// is bounded by Timeout per started 4 MiB of payload. Errors: those of
// Put; ErrInvalid when keys and blocks differ in length.
func (t *Tier) PutPack(ctx context.Context, keys []tier.Key, blocks [][]byte) (int, error) {
	if t.closed.Load() {
		return 0, fmt.Errorf("g4 put pack: %w", tier.ErrClosed)
	}
	if len(keys) != len(blocks) {
		return 0, fmt.Errorf("g4 put pack: %w: %d keys, %d blocks", ErrInvalid, len(keys), len(blocks))
	}
	done := 0
	for done < len(keys) {
		end := t.runEnd(keys, blocks, done)
		if end-done == 1 {
			if err := t.Put(ctx, keys[done], blocks[done]); err != nil {
				return done, err
			}
			done = end
			continue
		}
		n, err := t.putPack(ctx, keys[done:end], blocks[done:end])
		done += n
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// runEnd returns the end of the run of keys that starts at i (see
// PutPack); i+1 when packing is off.
func (t *Tier) runEnd(keys []tier.Key, blocks [][]byte, i int) int {
	if t.opts.PackSize < 0 {
		return i + 1
	}
	bs := len(blocks[i])
	if bs == 0 || bs > t.opts.MaxBlockSize {
		return i + 1
	}
	total := packFixed + len(keys[i].Namespace) + 4 + bs // the object's size so far
	j := i + 1
	for ; j < len(keys); j++ {
		a, b := keys[j-1], keys[j]
		n := len(blocks[j])
		if b.Namespace != a.Namespace || b.Object != a.Object || b.Gen != a.Gen || b.Index != a.Index+1 ||
			len(blocks[j-1]) != bs || n == 0 || n > bs || total+4+n > t.opts.PackSize {
			break
		}
		total += 4 + n
	}
	return j
}

// putPack stores keys (a run, see runEnd) as one pack object, then deletes
// the per-block objects of its keys, and returns how many keys it stored
// (a prefix: if a delete fails, its key and the later ones are not).
func (t *Tier) putPack(ctx context.Context, keys []tier.Key, blocks [][]byte) (int, error) {
	k0 := keys[0]
	ref := packRef{ns: k0.Namespace, object: k0.Object, gen: k0.Gen, first: k0.Index,
		count: uint32(len(keys)), bsize: uint32(len(blocks[0])), last: uint32(len(blocks[len(blocks)-1]))}
	for _, k := range keys { // ascending: every multi-key locker locks in key order
		defer t.locks.lock(k)()
	}
	// The stamp is taken under the key locks: a later pack of any of
	// these keys gets a larger one, so the listing's order (larger stamp
	// wins) is the order of the puts.
	ref.stamp = t.nextStamp()
	name := ref.name(t.opts.Prefix)
	if err := ValidateName(name); err != nil {
		return 0, fmt.Errorf("g4 put pack %v: %w", k0, err)
	}
	payload := ref.payload()
	// A refused pack is not owed room by Evict (noteShort), unlike a
	// refused Put: its caller, a sink, makes room itself (MakeRoom),
	// keeping the blocks of its object stored before, which Evict,
	// oldest first, could take when nothing older is left.
	ok, wake := t.idx.reserveMany(keys, payload, t.opts.Capacity, t.high)
	if wake {
		t.signalEvict()
	}
	if !ok {
		return 0, fmt.Errorf("g4 put pack %v: %w (capacity %d bytes)", k0, tier.ErrNoSpace, t.opts.Capacity)
	}
	reserved := true
	defer func() {
		if reserved {
			t.idx.unreserve(payload)
		}
	}()
	// Keys that may have a per-block object (which a listing prefers to
	// any pack): those the index says have one, every key when the tier
	// is not listed. They are deleted once the pack is durable.
	listed := t.listed.Load()
	singles := make([]bool, len(keys))
	olds := make([]*indexEntry, len(keys)) // the per-block object's entry, if the index has one
	for i, k := range keys {
		e, ok := t.idx.entry(k)
		singles[i] = !listed || ok && e.pk == nil
		if ok && e.pk == nil {
			olds[i] = &e
		}
	}
	crcs := make([]uint32, len(blocks))
	for i, b := range blocks {
		crcs[i] = tier.Checksum(b)
	}
	readers := make([]io.Reader, 0, len(blocks)+1)
	readers = append(readers, bytes.NewReader(encodePackHeader(ref, crcs)))
	for _, b := range blocks {
		readers = append(readers, bytes.NewReader(b))
	}
	pk := &pack{ref: ref, name: name, crcs: crcs}
	t.idx.beginPack(name)
	defer t.idx.endPack(name)
	err := t.callSized(ctx, "put pack", k0, payload, func(ctx context.Context) error {
		return t.putObject(ctx, k0, name, io.MultiReader(readers...), ref.size())
	})
	if err != nil {
		if errors.Is(err, tier.ErrUnavailable) && ctx.Err() == nil {
			// It may have been stored: try once to remove it (if it
			// stays, the next listing adopts it, as if this put had
			// succeeded, or deletes it when its keys live elsewhere).
			_ = t.call(ctx, "put pack", k0, func(ctx context.Context) error { return t.store.Delete(ctx, name) })
		}
		return 0, err
	}
	pk.mod = t.opts.Now().UnixNano()
	reserved = false
	empty := t.idx.putPack(pk)
	t.packPuts.Add(1)
	for i, k := range keys {
		if !singles[i] {
			continue
		}
		if err := t.call(ctx, "put pack", k, func(ctx context.Context) error {
			return t.store.Delete(ctx, t.ObjectName(k))
		}); err != nil {
			// keys[i:] read as the store would list them: a per-block
			// object left wins; the others die in the pack.
			for j := i; j < len(keys); j++ {
				empty = append(empty, t.idx.unpack(keys[j], pk, olds[j])...)
			}
			t.puts.Add(uint64(i))
			t.reap(ctx, empty)
			return i, err
		}
	}
	t.puts.Add(uint64(len(keys)))
	t.reap(ctx, empty)
	return len(keys), nil
}

// nextStamp returns a pack stamp larger than any handed out or seen in a
// listing: the clock in Unix ns, or one more than the largest.
func (t *Tier) nextStamp() uint64 {
	now := uint64(max(t.opts.Now().UnixNano(), 0))
	for {
		old := t.stamp.Load()
		s := max(now, old+1)
		if t.stamp.CompareAndSwap(old, s) {
			return s
		}
	}
}

// seenStamp records a stamp found in a listing.
func (t *Tier) seenStamp(s uint64) {
	for {
		old := t.stamp.Load()
		if s <= old || t.stamp.CompareAndSwap(old, s) {
			return
		}
	}
}

// callSized is call with a deadline of Timeout per started 4 MiB of n
// bytes (a pack is up to MaxPackSize, a block at most 4 MiB by default).
func (t *Tier) callSized(ctx context.Context, op string, k tier.Key, n int64, fn func(ctx context.Context) error) error {
	units := max(1, (n+tier.MaxBlockSize-1)/tier.MaxBlockSize)
	cctx, cancel := context.WithTimeout(ctx, t.opts.Timeout*time.Duration(units))
	defer cancel()
	return t.wrapErr(ctx, op, k, fn(cctx))
}

// reap deletes the pack objects of packs, which hold no live block; a
// delete that fails leaves the pack to the next listing (endList hands
// it back) or Evict.
func (t *Tier) reap(ctx context.Context, packs []*pack) {
	for _, pk := range packs {
		k := pk.ref.key(0)
		if t.call(ctx, "delete pack", k, func(ctx context.Context) error {
			return t.store.Delete(ctx, pk.name)
		}) == nil {
			t.idx.dropPack(pk)
			t.packsDeleted.Add(1)
		}
	}
}

// packCRCs returns the verified CRC table of pk, reading its header (one
// ranged GET) the first time.
func (t *Tier) packCRCs(ctx context.Context, pk *pack) ([]uint32, error) {
	pk.hdrMu.Lock()
	defer pk.hdrMu.Unlock()
	if pk.crcs != nil {
		return pk.crcs, nil
	}
	crcs, err := readPackHeader(ctx, t.store, pk.name, pk.ref)
	if err != nil {
		return nil, err
	}
	pk.crcs = crcs
	return crcs, nil
}

// readPackHeader reads and verifies the header of pack object name,
// described by r, and returns its CRC table.
func readPackHeader(ctx context.Context, store ObjectStore, name string, r packRef) ([]uint32, error) {
	rc, err := store.GetRange(ctx, name, 0, r.headerLen())
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	crcs, err := readHeaderFrom(rc, r)
	if err != nil {
		return nil, err
	}
	return crcs, expectEOF(rc)
}

// readHeaderFrom reads the header of pack r from the start of rc and
// verifies it; it returns the CRC table.
func readHeaderFrom(rc io.Reader, r packRef) ([]uint32, error) {
	b := make([]byte, r.headerLen())
	if _, err := io.ReadFull(rc, b); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("%w: pack shorter than its header", errHeader)
		}
		return nil, err
	}
	return decodePackHeader(b, r)
}

// readRange reads exactly len(p) bytes at off of object name into p; a
// short object is a header error (the name promised more).
func readRange(ctx context.Context, store ObjectStore, name string, off int64, p []byte) error {
	rc, err := store.GetRange(ctx, name, off, int64(len(p)))
	if err != nil {
		return err
	}
	defer rc.Close()
	if _, err := io.ReadFull(rc, p); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("%w: pack truncated", errHeader)
		}
		return err
	}
	return expectEOF(rc)
}

// expectEOF reads rc to its end, which should be now: a reader that
// yields more bytes than asked for is a header error (a pack longer than
// its name says). Reading the end also lets an HTTP connection be reused
// (a body closed before its end is not).
func expectEOF(rc io.Reader) error {
	var one [1]byte
	for {
		n, err := rc.Read(one[:])
		switch {
		case n > 0:
			return fmt.Errorf("%w: pack longer than its name says", errHeader)
		case err == io.EOF:
			return nil
		case err != nil:
			return err
		}
	}
}

// readPacked reads block k, a member of pk, into dst(length) with one
// ranged GET (after the header's, the first time), or from or with a
// read-ahead (readahead.go), and verifies it against the pack's CRC
// table.
func (t *Tier) readPacked(ctx context.Context, k tier.Key, pk *pack, dst func(length int) []byte) ([]byte, error) {
	i, ok := pk.ref.member(k)
	if !ok {
		return nil, fmt.Errorf("g4: %v is not in pack %s", k, pk.name) // cannot happen: the index links members only
	}
	crcs, err := t.packCRCs(ctx, pk)
	if err != nil {
		return nil, err
	}
	if data, done, err := t.readPackedAhead(ctx, pk, i, crcs, dst); done {
		return data, err
	}
	data := dst(int(pk.ref.blockLen(i)))
	if err := readRange(ctx, t.store, pk.name, pk.ref.offset(i), data); err != nil {
		return nil, err
	}
	if tier.Checksum(data) != crcs[i] {
		return nil, errPayloadCRC
	}
	return data, nil
}

// quarantinePacked handles a corrupt read of k from pack pk: a damaged
// payload forgets k alone (its bytes stay in the object, which is deleted
// with its last live member); a damaged header, confirmed by reading it
// again, deletes the whole pack object.
func (t *Tier) quarantinePacked(ctx context.Context, k tier.Key, pk *pack, cause error) {
	if !isHeaderErr(cause) {
		t.crcErrs.Add(1)
		unlock := t.locks.lock(k)
		e, ok := t.idx.entry(k)
		var empty []*pack
		if ok && e.pk == pk {
			empty = t.idx.removeIfIn(k, pk)
			t.quarantined.Add(1)
		}
		unlock()
		t.reap(ctx, empty)
		return
	}
	t.hdrErrs.Add(1)
	err := t.call(ctx, "quarantine", k, func(ctx context.Context) error {
		_, err := readPackHeader(ctx, t.store, pk.name, pk.ref)
		return err
	})
	switch {
	case err == nil:
		return // a transient failure; the next read retries
	case errors.Is(err, tier.ErrNotFound):
		t.idx.dropPack(pk)
		return
	case !errors.Is(err, tier.ErrCorrupt):
		return
	}
	if t.call(ctx, "quarantine", k, func(ctx context.Context) error {
		return t.store.Delete(ctx, pk.name)
	}) == nil {
		t.quarantined.Add(uint64(t.idx.dropPack(pk)))
		t.packsDeleted.Add(1)
	}
}

// GetBlocks reads whole blocks: keys[i] into bufs[i], which must be at
// least as long as the block, and returns each block's length. Runs of
// keys held by one pack with consecutive indexes cost one ranged GET for
// the run (after the pack's header, the first time), each block verified
// against its CRC32C before the call returns; other keys are read with
// Get. It stops at the first error, which is returned with the lengths of
// the keys read before it (the rest are 0). Errors: those of Get, and
// ErrInvalid when keys and bufs differ in length or a buffer is short.
func (t *Tier) GetBlocks(ctx context.Context, keys []tier.Key, bufs [][]byte) ([]int, error) {
	ns := make([]int, len(keys))
	if len(keys) != len(bufs) {
		return ns, fmt.Errorf("g4 get blocks: %w: %d keys, %d buffers", ErrInvalid, len(keys), len(bufs))
	}
	if t.closed.Load() {
		return ns, fmt.Errorf("g4 get blocks: %w", tier.ErrClosed)
	}
	for i := 0; i < len(keys); {
		k := keys[i]
		e, ok := t.idx.entry(k)
		if !ok || e.pk == nil {
			n, err := t.Get(ctx, k, bufs[i], 0)
			if err != nil {
				return ns, err
			}
			if sz, ok := t.idx.stat(k); ok && int64(n) < sz {
				return ns, fmt.Errorf("g4 get blocks %v: %w: buffer of %d bytes for a block of %d", k, ErrInvalid, len(bufs[i]), sz)
			}
			ns[i] = n
			i++
			continue
		}
		pk := e.pk
		first, _ := pk.ref.member(k)
		j := i + 1
		for j < len(keys) {
			f, ok := t.idx.entry(keys[j])
			if m, in := pk.ref.member(keys[j]); !ok || f.pk != pk || !in || m != first+uint32(j-i) {
				break
			}
			j++
		}
		if err := t.getRun(ctx, pk, first, keys[i:j], bufs[i:j], ns[i:j]); err != nil {
			return ns, err
		}
		i = j
	}
	return ns, nil
}

// getRun reads members first.. of pk (keys, consecutive) with one ranged
// GET into bufs, verifying each, and sets ns.
func (t *Tier) getRun(ctx context.Context, pk *pack, first uint32, keys []tier.Key, bufs [][]byte, ns []int) error {
	r := pk.ref
	for m := range keys {
		if int64(len(bufs[m])) < r.blockLen(first+uint32(m)) {
			return fmt.Errorf("g4 get blocks %v: %w: buffer of %d bytes for a block of %d", keys[m], ErrInvalid, len(bufs[m]), r.blockLen(first+uint32(m)))
		}
	}
	last := first + uint32(len(keys)) - 1
	off := r.offset(first)
	n := r.offset(last) + r.blockLen(last) - off
	bad := -1
	var cause error
	whole := first == 0 && len(keys) == int(r.count)
	err := t.callSized(ctx, "get", keys[0], n, func(ctx context.Context) error {
		var rc io.ReadCloser
		var crcs []uint32
		var err error
		if whole {
			// Every member: one GET of the whole object, header
			// included (no separate header read, and a plain GET is
			// what stores serve fastest).
			if rc, _, err = t.store.Get(ctx, pk.name); err != nil {
				return err
			}
			defer rc.Close()
			if crcs, err = readHeaderFrom(rc, r); err != nil {
				cause = err
				return err
			}
			pk.hdrMu.Lock()
			if pk.crcs == nil {
				pk.crcs = crcs
			}
			pk.hdrMu.Unlock()
		} else {
			if crcs, err = t.packCRCs(ctx, pk); err != nil {
				cause = err
				return err
			}
			if rc, err = t.store.GetRange(ctx, pk.name, off, n); err != nil {
				return err
			}
			defer rc.Close()
		}
		for m := range keys {
			i := first + uint32(m)
			p := bufs[m][:r.blockLen(i)]
			if _, err := io.ReadFull(rc, p); err != nil {
				if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
					bad, cause = m, fmt.Errorf("%w: pack truncated", errHeader)
					return cause
				}
				return err
			}
			if tier.Checksum(p) != crcs[i] {
				bad, cause = m, errPayloadCRC
				return cause
			}
			ns[m] = len(p)
		}
		if err := expectEOF(rc); err != nil {
			if isHeaderErr(err) {
				bad, cause = -1, err
			}
			return err
		}
		return nil
	})
	switch {
	case err == nil:
		t.gets.Add(uint64(len(keys)))
		return nil
	case errors.Is(err, tier.ErrNotFound):
		t.misses.Add(1)
		t.idx.dropPack(pk)
	case errors.Is(err, tier.ErrCorrupt):
		k := keys[0]
		if bad >= 0 {
			k = keys[bad]
		}
		t.quarantinePacked(ctx, k, pk, cause)
	}
	for m := range ns {
		if bad >= 0 && m >= bad || err != nil && bad < 0 {
			ns[m] = 0
		}
	}
	t.gets.Add(uint64(max(bad, 0)))
	return err
}
