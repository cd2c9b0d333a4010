package g4

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// TierOptions configures a G4 Tier. Zero values take the defaults.
type TierOptions struct {
	// Prefix is the object-name prefix of every block (default "blocks");
	// it must be a valid object name (ValidateName), e.g. "ctxmem/g4".
	Prefix string
	// Timeout bounds every backend call made by Put, Get, Delete and by
	// each delete of an expiry (default 2 s). A call that runs out of it
	// fails with an error wrapping tier.ErrUnavailable.
	Timeout time.Duration
	// ListTimeout bounds a whole listing of the prefix: at open, in Range
	// and in ExpireBefore (default 5 min).
	ListTimeout time.Duration
	// Capacity is the most payload bytes the tier may hold; 0 = unbounded.
	// A Put beyond it fails with tier.ErrNoSpace. The tier reclaims by TTL
	// (ExpireBefore) and by size (Evict, run by a Sweeper).
	Capacity int64
	// HighWatermark and LowWatermark are fractions of Capacity (defaults
	// 0.95 and 0.85; 0 < low < high <= 1): once the payload bytes held
	// (with Puts in flight) pass high, Evict deletes the blocks stored
	// longest ago until they are at most low. A Put that takes them over
	// high signals EvictSignal, as does a Put refused for want of space
	// (the next Evict then makes room for it even below high; MakeRoom
	// does so at once). Unused when Capacity is 0.
	HighWatermark, LowWatermark float64
	// MaxBlockSize is the largest block Put accepts, in bytes (default and
	// minimum tier.MaxBlockSize, 4 MiB; at most 1 GiB).
	MaxBlockSize int
	// Now is the clock (default time.Now); tests inject one.
	Now func() time.Time
	// Retain, if set, exempts blocks from expiry and size eviction when it
	// returns true, until a tier.Retainer is attached (SetRetainer: the
	// tiering core attaches itself when it opens, answering with the
	// key's durability class, so blocks of device-class objects such as
	// NBD exports are never dropped). It is called with no lock of the
	// tier held.
	Retain func(k tier.Key) bool
	// OnMakeRoom, if set, is called after a MakeRoom that evicted blocks
	// or failed to, with how many it evicted and the backend error (nil
	// if none), on MakeRoom's goroutine with no lock of the tier held.
	OnMakeRoom func(evicted int, err error)
	// OpenUnlisted makes NewTier return the tier even when its first
	// listing gets no answer (an error wrapping tier.ErrUnavailable, or
	// OpenTimeout running out): the tier then starts unlisted (Listed is
	// false, Healthy is false, Stat and Usage know no block) until a Range
	// completes. Put, Get and Delete work as usual meanwhile: a Get of a
	// block while the backend is down fails with tier.ErrUnavailable.
	OpenUnlisted bool
	// OpenTimeout bounds the first listing, at open (default ListTimeout).
	OpenTimeout time.Duration
	// PackSize bounds the size of one pack object PutPack writes, in
	// bytes, header included (default DefaultPackSize, 16 MiB;
	// MinPackSize to MaxPackSize; a block too large for a pack of two is
	// stored alone); negative turns packing off (PutPack stores one
	// object per block). On S3 keep it at most the store's part size, so
	// that a pack is one PUT request.
	PackSize int
}

// Defaults of TierOptions.
const (
	DefaultPrefix      = "blocks"
	DefaultTimeout     = 2 * time.Second
	DefaultListTimeout = 5 * time.Minute
	DefaultHighWater   = 0.95
	DefaultLowWater    = 0.85
	// staleTempAge is how old a store's temporary file must be before
	// ExpireBefore removes it (see Local.RemoveStale).
	staleTempAge = 10 * time.Minute
)

// Stats are the tier's counters since it was opened.
type Stats struct {
	Puts         uint64 // blocks stored
	Gets         uint64 // reads that returned verified bytes
	Misses       uint64 // reads of blocks the store does not hold
	CRCErrors    uint64 // reads whose payload failed its CRC32C
	HeaderErrors uint64 // reads whose header was damaged, truncated or named another block
	Quarantined  uint64 // corrupt blocks deleted from the store
	Expired      uint64 // blocks deleted by ExpireBefore
	Evicted      uint64 // blocks deleted by Evict (size eviction)
	Unavailable  uint64 // backend calls that failed as unavailable (incl. timeouts)
	PackPuts     uint64 // pack objects stored (their blocks count in Puts)
	PacksDeleted uint64 // pack objects deleted (last live block gone, or corrupt header)
	Packs        uint64 // pack objects known now
	ReadAhead    uint64 // Gets of pack members served from a read-ahead
}

// Tier is the G4 tier: a tier.Tier and tier.Expirer that stores one object
// per block in an ObjectStore (names: names.go; object format: header.go).
// Every read fetches the whole object and verifies its header (magic,
// version, header CRC, key and generation) and the payload CRC32C before
// any byte is returned; a failure is tier.ErrCorrupt, counted in Stats, and
// the object is deleted (quarantine by deletion: KV blocks can be
// recomputed, and an object store has no cheap move). An in-memory index
// (index.go) answers Stat and Usage without backend calls. Safe for
// concurrent use.
type Tier struct {
	store   countingStore // raw, wrapped to count requests
	raw     ObjectStore
	req     reqCounters
	opts    TierOptions
	idx     *index
	locks   keyLocks
	closed  atomic.Bool
	listed  atomic.Bool // a listing of the prefix completed (the index is whole)
	bufPool sync.Pool   // *[]byte scratch for partial reads

	retainer atomic.Pointer[tier.Retainer] // SetRetainer

	wake    chan struct{} // EvictSignal: a Put took the load over high, or was refused
	high    int64         // HighWatermark × Capacity, bytes
	short   atomic.Int64  // the largest put refused for space since the last Evict (noteShort)
	evictMu sync.Mutex    // one size eviction at a time (Evict, MakeRoom)

	stamp atomic.Uint64 // the largest pack stamp handed out or listed (nextStamp)
	ra    readAhead     // blocks of packs read ahead (readahead.go)

	puts, gets, misses, crcErrs, hdrErrs, quarantined, expired, evicted, unavailable atomic.Uint64
	packPuts, packsDeleted, readAheads                                               atomic.Uint64
}

// SetRetainer implements tier.Retaining: from now on r, not
// TierOptions.Retain, decides which blocks expiry and size eviction keep.
func (t *Tier) SetRetainer(r tier.Retainer) { t.retainer.Store(&r) }

// retained reports whether k is exempt from expiry and size eviction.
func (t *Tier) retained(k tier.Key) bool {
	if r := t.retainer.Load(); r != nil {
		return (*r).Retain(k)
	}
	return t.opts.Retain != nil && t.opts.Retain(k)
}

// putObject stores one object of the tier whose first (or only) block is
// k: while the store expires objects on the server (ServerExpiry), a
// block expiry may drop goes through PutExpirable and a retained one is a
// plain Put; otherwise every put is plain (and the retainer, which looks
// the block's object up in the core, is not asked).
func (t *Tier) putObject(ctx context.Context, k tier.Key, name string, r io.Reader, size int64) error {
	if t.store.expiresOnServer() && !t.retained(k) {
		return t.store.PutExpirable(ctx, name, r, size, nil)
	}
	return t.store.Put(ctx, name, r, size, nil)
}

var (
	_ tier.Tier    = (*Tier)(nil)
	_ tier.Expirer = (*Tier)(nil)
)

// NewTier opens a G4 tier over store and builds its index by listing the
// store under opts.Prefix (bounded by ctx and opts.OpenTimeout). It fails if the
// options are invalid or the listing fails (an error wrapping
// tier.ErrUnavailable when the backend does not answer), unless
// opts.OpenUnlisted lets it start unlisted on a backend that does not
// answer (see TierOptions.OpenUnlisted and Listed).
func NewTier(ctx context.Context, store ObjectStore, opts TierOptions) (*Tier, error) {
	if store == nil {
		return nil, errors.New("g4: nil store")
	}
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if err := ValidateName(opts.Prefix); err != nil {
		return nil, fmt.Errorf("g4: prefix: %w", err)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.ListTimeout <= 0 {
		opts.ListTimeout = DefaultListTimeout
	}
	if opts.MaxBlockSize < tier.MaxBlockSize {
		opts.MaxBlockSize = tier.MaxBlockSize
	}
	if opts.MaxBlockSize > 1<<30 {
		return nil, fmt.Errorf("g4: MaxBlockSize %d over 1 GiB", opts.MaxBlockSize)
	}
	if opts.Capacity < 0 {
		return nil, fmt.Errorf("g4: negative capacity %d", opts.Capacity)
	}
	if opts.HighWatermark == 0 {
		opts.HighWatermark = DefaultHighWater
	}
	if opts.LowWatermark == 0 {
		opts.LowWatermark = DefaultLowWater
	}
	if !(opts.LowWatermark > 0 && opts.LowWatermark < opts.HighWatermark && opts.HighWatermark <= 1) {
		return nil, fmt.Errorf("g4: watermarks low %g, high %g: want 0 < low < high <= 1", opts.LowWatermark, opts.HighWatermark)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.OpenTimeout <= 0 {
		opts.OpenTimeout = opts.ListTimeout
	}
	if opts.PackSize == 0 {
		opts.PackSize = DefaultPackSize
	}
	if opts.PackSize > 0 && (opts.PackSize < MinPackSize || opts.PackSize > MaxPackSize) {
		return nil, fmt.Errorf("g4: PackSize %d: want %d to %d bytes, or negative (off)", opts.PackSize, MinPackSize, MaxPackSize)
	}
	t := &Tier{raw: store, opts: opts, idx: newIndex(), wake: make(chan struct{}, 1),
		high: int64(math.Round(opts.HighWatermark * float64(opts.Capacity)))}
	t.store = countingStore{store, &t.req}
	if _, err := t.refreshWithin(ctx, opts.OpenTimeout); err != nil {
		if opts.OpenUnlisted && errors.Is(err, tier.ErrUnavailable) {
			return t, nil
		}
		return nil, err
	}
	return t, nil
}

// Listed reports whether a listing of the store has completed since the
// tier was opened, so that the index (Stat, Usage) is whole. A tier opened
// unlisted (TierOptions.OpenUnlisted) becomes listed at its first Range
// that succeeds.
func (t *Tier) Listed() bool { return t.listed.Load() }

// Name returns "G4".
func (t *Tier) Name() string { return "G4" }

// Stats returns the tier's counters.
func (t *Tier) Stats() Stats {
	return Stats{
		Puts: t.puts.Load(), Gets: t.gets.Load(), Misses: t.misses.Load(),
		CRCErrors: t.crcErrs.Load(), HeaderErrors: t.hdrErrs.Load(),
		Quarantined: t.quarantined.Load(), Expired: t.expired.Load(),
		Evicted: t.evicted.Load(), Unavailable: t.unavailable.Load(),
		PackPuts: t.packPuts.Load(), PacksDeleted: t.packsDeleted.Load(), Packs: uint64(t.idx.packCount()),
		ReadAhead: t.readAheads.Load(),
	}
}

// Healthy implements tier.HealthReporter: false while the tier is
// unlisted (opened during an outage, see Listed) or the object store
// reports its latest call failed (stores that do not report health are
// otherwise always healthy).
func (t *Tier) Healthy() bool {
	if !t.listed.Load() {
		return false
	}
	if h, ok := t.raw.(tier.HealthReporter); ok {
		return h.Healthy()
	}
	return true
}

// Store returns the backend the tier runs on.
func (t *Tier) Store() ObjectStore { return t.raw }

// ObjectName returns the object name that holds block k.
func (t *Tier) ObjectName(k tier.Key) string { return BlockName(t.opts.Prefix, k) }

// call runs one backend call under the tier's per-call deadline and maps
// its error (see wrapErr).
func (t *Tier) call(ctx context.Context, op string, k tier.Key, fn func(ctx context.Context) error) error {
	cctx, cancel := context.WithTimeout(ctx, t.opts.Timeout)
	defer cancel()
	return t.wrapErr(ctx, op, k, fn(cctx))
}

// wrapErr maps a backend error: the caller's own cancellation passes
// through; running out of the tier's deadline, or a backend that reports
// itself unreachable, wraps tier.ErrUnavailable; a missing object wraps
// tier.ErrNotFound; corruption keeps tier.ErrCorrupt.
func (t *Tier) wrapErr(ctx context.Context, op string, k tier.Key, err error) error {
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("g4 %s %v: %w", op, k, ctx.Err())
	case errors.Is(err, context.DeadlineExceeded):
		t.unavailable.Add(1)
		return fmt.Errorf("g4 %s %v: %w: backend did not answer within %v: %w", op, k, tier.ErrUnavailable, t.opts.Timeout, err)
	case errors.Is(err, tier.ErrUnavailable):
		t.unavailable.Add(1)
		return fmt.Errorf("g4 %s %v: %w", op, k, err)
	case errors.Is(err, ErrNotExist):
		return fmt.Errorf("g4 %s %v: %w", op, k, tier.ErrNotFound)
	}
	return fmt.Errorf("g4 %s %v: %w", op, k, err)
}

// Put implements tier.Tier.Put: one object holding the header and data,
// stored durably before Put returns. Errors: tier.ErrClosed,
// tier.ErrTooLarge (over MaxBlockSize), tier.ErrNoSpace (over Capacity),
// tier.ErrUnavailable (backend down or slower than Timeout), ErrInvalid (a
// namespace too long for an object name), other backend errors wrapped.
func (t *Tier) Put(ctx context.Context, k tier.Key, data []byte) error {
	if t.closed.Load() {
		return fmt.Errorf("g4 put %v: %w", k, tier.ErrClosed)
	}
	if len(data) > t.opts.MaxBlockSize {
		return fmt.Errorf("g4 put %v: %d bytes: %w", k, len(data), tier.ErrTooLarge)
	}
	name := t.ObjectName(k)
	if err := ValidateName(name); err != nil {
		return fmt.Errorf("g4 put %v: %w", k, err)
	}
	unlock := t.locks.lock(k)
	defer unlock()
	n := int64(len(data))
	ok, wake := t.idx.reserve(k, n, t.opts.Capacity, t.high)
	if !ok {
		t.noteShort(n)
	}
	if wake {
		t.signalEvict()
	}
	if !ok {
		return fmt.Errorf("g4 put %v: %w (capacity %d bytes)", k, tier.ErrNoSpace, t.opts.Capacity)
	}
	hdr := encodeHeader(k, data)
	err := t.call(ctx, "put", k, func(ctx context.Context) error {
		body := io.MultiReader(bytes.NewReader(hdr), bytes.NewReader(data))
		return t.putObject(ctx, k, name, body, int64(len(hdr))+n)
	})
	empty := t.idx.put(k, n, err == nil, t.opts.Now().UnixNano())
	if err == nil {
		t.puts.Add(1)
	}
	t.reap(ctx, empty)
	return err
}

// Get implements tier.Tier.Get. It fetches the whole object with one
// backend call, checks the header against k and the payload CRC32C, then
// copies bytes [off, off+len(p)) of the block into p. Returns (0, nil) at
// or past the end of the block. Errors: tier.ErrClosed, tier.ErrNotFound,
// tier.ErrCorrupt (the object is then deleted), tier.ErrUnavailable, the
// caller's context error, an error for a negative offset.
func (t *Tier) Get(ctx context.Context, k tier.Key, p []byte, off int64) (int, error) {
	if t.closed.Load() {
		return 0, fmt.Errorf("g4 get %v: %w", k, tier.ErrClosed)
	}
	if off < 0 {
		return 0, fmt.Errorf("g4 get %v: %w: negative offset %d", k, ErrInvalid, off)
	}
	if len(p) == 0 {
		if _, ok := t.idx.stat(k); ok {
			return 0, nil
		}
	}
	seq := t.idx.current()
	var scratch *[]byte
	defer func() {
		if scratch != nil {
			t.bufPool.Put(scratch)
		}
	}()
	// Whole-block reads land straight in p; others go through a pooled
	// buffer. On error p may hold unverified bytes, but n is 0.
	dst := func(length int) []byte {
		if off == 0 && len(p) >= length {
			return p[:length]
		}
		scratch = t.scratch(length)
		return (*scratch)[:length]
	}
	var data []byte
	e, _ := t.idx.entry(k)
	pk := e.pk // non-nil: the block is a member of a pack object
	err := t.call(ctx, "get", k, func(ctx context.Context) error {
		var err error
		if pk != nil {
			data, err = t.readPacked(ctx, k, pk, dst)
		} else {
			data, err = t.readBlock(ctx, k, dst)
		}
		return err
	})
	switch {
	case err == nil:
	case errors.Is(err, tier.ErrNotFound):
		t.misses.Add(1)
		if pk != nil {
			t.idx.dropPack(pk) // pack objects are never rewritten: it is gone
		} else {
			t.reap(ctx, t.idx.removeIfOlder(k, seq))
		}
		return 0, err
	case errors.Is(err, tier.ErrCorrupt):
		if pk != nil {
			t.quarantinePacked(ctx, k, pk, err)
		} else {
			t.quarantine(ctx, k, err)
		}
		return 0, err
	default:
		return 0, err
	}
	t.gets.Add(1)
	if off >= int64(len(data)) {
		return 0, nil
	}
	if off == 0 && len(p) >= len(data) {
		return len(data), nil // already in p
	}
	return copy(p, data[off:]), nil
}

// scratch returns a pooled buffer of at least n bytes.
func (t *Tier) scratch(n int) *[]byte {
	if b, ok := t.bufPool.Get().(*[]byte); ok && cap(*b) >= n {
		return b
	}
	b := make([]byte, n)
	return &b
}

// readBlock reads the object of k, verifies it and returns its payload,
// read into dst(length). Corruption errors wrap errHeader or
// errPayloadCRC (both tier.ErrCorrupt).
func (t *Tier) readBlock(ctx context.Context, k tier.Key, dst func(length int) []byte) ([]byte, error) {
	return readVerified(ctx, t.store, t.ObjectName(k), k, t.opts.MaxBlockSize, dst)
}

// readVerified reads object name of store, which should hold block k,
// verifies it (header against k, at most maxBlock payload bytes, exact
// length, payload CRC32C) and returns its payload, read into dst(length).
// Corruption errors wrap errHeader or errPayloadCRC (both
// tier.ErrCorrupt); backend errors are returned as they are.
func readVerified(ctx context.Context, store ObjectStore, name string, k tier.Key, maxBlock int, dst func(length int) []byte) ([]byte, error) {
	rc, _, err := store.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	hb := make([]byte, headerLen(k.Namespace))
	if _, err := io.ReadFull(rc, hb); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("%w: object shorter than its header", errHeader)
		}
		return nil, err
	}
	h, err := decodeHeader(hb, k)
	if err != nil {
		return nil, err
	}
	if int(h.length) > maxBlock {
		return nil, fmt.Errorf("%w: length %d over the block limit", errHeader, h.length)
	}
	data := dst(int(h.length))
	if _, err := io.ReadFull(rc, data); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("%w: payload truncated (header says %d bytes)", errHeader, h.length)
		}
		return nil, err
	}
	var one [1]byte
	if n, err := rc.Read(one[:]); n > 0 {
		return nil, fmt.Errorf("%w: object longer than header + %d bytes", errHeader, h.length)
	} else if err != nil && err != io.EOF {
		return nil, err
	}
	if tier.Checksum(data) != h.crc {
		return nil, errPayloadCRC
	}
	return data, nil
}

// quarantine counts the corruption cause of k and deletes its object,
// unless a read under the key lock finds the object intact (a Put replaced
// it meanwhile).
func (t *Tier) quarantine(ctx context.Context, k tier.Key, cause error) {
	if isHeaderErr(cause) {
		t.hdrErrs.Add(1)
	} else {
		t.crcErrs.Add(1)
	}
	unlock := t.locks.lock(k)
	defer unlock()
	var buf *[]byte
	err := t.call(ctx, "quarantine", k, func(ctx context.Context) error {
		_, err := t.readBlock(ctx, k, func(n int) []byte { buf = t.scratch(n); return (*buf)[:n] })
		return err
	})
	if buf != nil {
		t.bufPool.Put(buf)
	}
	switch {
	case err == nil:
		return // replaced by a good copy
	case errors.Is(err, tier.ErrNotFound):
		t.reap(ctx, t.idx.remove(k))
		return
	case !errors.Is(err, tier.ErrCorrupt):
		return // cannot tell now; the next read retries
	}
	if t.call(ctx, "quarantine", k, func(ctx context.Context) error {
		return t.store.Delete(ctx, t.ObjectName(k))
	}) == nil {
		t.quarantined.Add(1)
		t.reap(ctx, t.idx.remove(k))
	}
}

// Stat implements tier.Tier.Stat from the index (no backend call, so ctx
// is not consulted).
func (t *Tier) Stat(_ context.Context, k tier.Key) (int64, error) {
	if t.closed.Load() {
		return 0, fmt.Errorf("g4 stat %v: %w", k, tier.ErrClosed)
	}
	n, ok := t.idx.stat(k)
	if !ok {
		return 0, fmt.Errorf("g4 stat %v: %w", k, tier.ErrNotFound)
	}
	return n, nil
}

// Delete implements tier.Tier.Delete.
func (t *Tier) Delete(ctx context.Context, k tier.Key) error {
	if t.closed.Load() {
		return fmt.Errorf("g4 delete %v: %w", k, tier.ErrClosed)
	}
	unlock := t.locks.lock(k)
	defer unlock()
	if e, ok := t.idx.entry(k); ok && e.pk != nil {
		// A member of a pack: it dies in the index, and the pack object
		// goes with its last live member. (Until then a restart's
		// listing brings it back, and the core deletes it again as
		// garbage.) A listed index knows there is no per-block object.
		t.reap(ctx, t.idx.removeIfIn(k, e.pk))
		if t.listed.Load() {
			return nil
		}
	}
	err := t.call(ctx, "delete", k, func(ctx context.Context) error {
		return t.store.Delete(ctx, t.ObjectName(k))
	})
	if err == nil {
		t.reap(ctx, t.idx.remove(k))
	}
	return err
}

// Range implements tier.Tier.Range: it lists the store under the prefix
// (bounded by ctx and ListTimeout), refreshes the index from the listing,
// and calls fn for every indexed block. Objects whose names do not parse
// as block names are ignored.
func (t *Tier) Range(ctx context.Context, fn func(k tier.Key, length int64) bool) error {
	if t.closed.Load() {
		return fmt.Errorf("g4 range: %w", tier.ErrClosed)
	}
	snap, err := t.refresh(ctx)
	if err != nil {
		return err
	}
	for k, n := range snap {
		if !fn(k, n) {
			return nil
		}
	}
	return nil
}

// refresh lists the store under the prefix, merges the listing into the
// index and returns a snapshot of the index.
func (t *Tier) refresh(ctx context.Context) (map[tier.Key]int64, error) {
	return t.refreshWithin(ctx, t.opts.ListTimeout)
}

// refreshWithin is refresh bounded by timeout.
func (t *Tier) refreshWithin(ctx context.Context, timeout time.Duration) (map[tier.Key]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	listed := map[tier.Key]listedBlock{}
	packs := map[string]*pack{}
	var stamp uint64
	t.idx.beginList()
	err := t.store.List(ctx, t.opts.Prefix+"/", func(a ObjectAttrs) bool {
		if k, ok := ParseBlockName(t.opts.Prefix, a.Name); ok {
			if a.Size >= int64(headerLen(k.Namespace)) {
				// A per-block object wins over any pack (packname.go).
				listed[k] = listedBlock{length: a.Size - int64(headerLen(k.Namespace)), mod: a.ModTime.UnixNano()}
			}
			return true
		}
		r, ok := parsePackName(t.opts.Prefix, a.Name, t.opts.MaxBlockSize)
		if !ok || a.Size != r.size() {
			return true
		}
		pk := &pack{ref: r, name: a.Name, mod: a.ModTime.UnixNano()}
		packs[a.Name] = pk
		stamp = max(stamp, r.stamp)
		for i := range r.count {
			k := r.key(i)
			if cur, ok := listed[k]; ok && (cur.pk == nil || cur.pk.ref.stamp > r.stamp) {
				continue
			}
			listed[k] = listedBlock{length: r.blockLen(i), mod: pk.mod, pk: pk}
		}
		return true
	})
	if err != nil {
		t.idx.endList(nil, nil)
		return nil, t.listErr(err)
	}
	t.seenStamp(stamp)
	empty := t.idx.endList(listed, packs)
	t.listed.Store(true)
	t.reap(ctx, empty)
	return t.idx.snapshot(), nil
}

func (t *Tier) listErr(err error) error {
	if errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, tier.ErrUnavailable) {
		t.unavailable.Add(1)
		return fmt.Errorf("g4 list %s: %w: %w", t.opts.Prefix, tier.ErrUnavailable, err)
	}
	if errors.Is(err, tier.ErrUnavailable) {
		t.unavailable.Add(1)
	}
	return fmt.Errorf("g4 list %s: %w", t.opts.Prefix, err)
}

// Usage implements tier.Tier.Usage from the index.
func (t *Tier) Usage() tier.Usage {
	used, blocks := t.idx.usage()
	return tier.Usage{UsedBytes: used, CapacityBytes: t.opts.Capacity, Blocks: blocks}
}

// Close marks the tier closed; later calls fail with tier.ErrClosed. The
// store's contents persist. Closing twice returns nil.
func (t *Tier) Close() error {
	t.closed.Store(true)
	return nil
}
