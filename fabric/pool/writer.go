package pool

import (
	"github.com/ctxmem/ctxmemd/internal/directio"

	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// Location says where a block's record sits in the pool. A Writer returns
// it from Put; the caller stores it in the global index and readers on any
// host pass it to Reader.Get.
type Location struct {
	// Extent is the extent holding the record.
	Extent uint32
	// Offset is the byte offset of the record header from the device
	// start (a multiple of 4 KiB, inside Extent).
	Offset int64
	// Length is the block's payload length in bytes.
	Length uint32
	// Epoch is the lease epoch the record was written under.
	Epoch uint64
}

// String renders the location as "extent 3 @1234567 len 262144 epoch 17".
func (l Location) String() string {
	return fmt.Sprintf("extent %d @%d len %d epoch %d", l.Extent, l.Offset, l.Length, l.Epoch)
}

// WriterOptions configures NewWriter.
type WriterOptions struct {
	// Host is written into every record header (≤ MaxHost bytes); it
	// names the writer for diagnostics.
	Host string
	// RenewEvery is the period of the lease-renewal loop; 0 means a third
	// of the lifetime of the most recently acquired lease (1 s before the
	// first).
	RenewEvery time.Duration
	// Margin is the safety margin: Put does not start a write into an
	// extent whose lease expires within Margin (it covers the write's
	// duration and clock skew between this host and the leaser). 0 means
	// a fifth of the most recent lease lifetime.
	Margin time.Duration
	// Clock returns the current time; nil means time.Now. It must agree
	// with the leaser's clock to within Margin.
	Clock func() time.Time
	// OnLost, if set, is called (from Put or the renewal loop, without
	// locks held) with every lease the writer loses: records in that
	// extent may be overwritten from now on, so the caller should drop
	// their index entries. Readers would miss on them anyway.
	OnLost func(Lease)
}

// Writer appends records to the pool on behalf of one host. It holds a
// set of extent leases: the current extent, into which Put bump-allocates
// records, and sealed (full) extents whose records are still published.
// It renews all of them in a loop it owns until Close or until the
// context given to NewWriter ends. A lease is given up only by Reclaim or
// by losing it (OnLost). Safe for concurrent use; concurrent Puts write
// disjoint ranges in parallel.
type Writer struct {
	p      *Pool
	leaser Leaser
	opts   WriterOptions
	clock  func() time.Time
	cancel context.CancelFunc
	done   chan struct{}

	acq sync.Mutex // serializes Acquire calls; taken before mu, never while holding it

	mu     sync.Mutex
	held   map[uint32]*extentState
	cur    *extentState // extent Put allocates from; nil until the next Acquire
	life   time.Duration
	closed bool
	puts   sync.WaitGroup

	// Test hooks (failure injection): beforeReadBack runs between a
	// record's write and its read-back, afterWrite between its
	// verification and the final lease check.
	beforeReadBack func(Location)
	afterWrite     func()
}

// extentState is one held extent.
type extentState struct {
	lease Lease
	next  int64 // bytes allocated from the extent start, extent header included
}

// NewWriter returns a Writer for pool p that leases extents through l and
// starts its renewal loop, which runs until ctx ends or Close. It fails
// when opts.Host is longer than MaxHost.
func NewWriter(ctx context.Context, p *Pool, l Leaser, opts WriterOptions) (*Writer, error) {
	if len(opts.Host) > MaxHost {
		return nil, fmt.Errorf("pool: host name %q is longer than %d bytes", opts.Host, MaxHost)
	}
	if opts.RenewEvery < 0 || opts.Margin < 0 {
		return nil, fmt.Errorf("pool: negative RenewEvery or Margin")
	}
	w := &Writer{p: p, leaser: l, opts: opts, clock: opts.Clock, held: map[uint32]*extentState{}, done: make(chan struct{})}
	if w.clock == nil {
		w.clock = time.Now
	}
	ctx, w.cancel = context.WithCancel(ctx)
	go w.run(ctx)
	return w, nil
}

// Put writes data (1 byte to tier.MaxBlockSize, and at most the extent
// size less 8 KiB) as the block k into the current leased extent, reads
// the record back and compares it, and returns its Location. It returns
// only after the record is on the device and verified, and only while the
// lease it was written under is still live: the caller publishes the
// Location to the global index only after Put returns it (publish after
// verify), so no reader is ever sent to a record that is not complete.
//
// Errors: ErrLeaseLost (the extent lease expired, was lost, or expires
// within the safety margin; nothing is returned and the record must not
// be published; a later Put acquires a new extent), ErrNoExtent (pool
// full), tier.ErrTooLarge, tier.ErrCorrupt (the read-back differed),
// tier.ErrClosed, a bus or I/O error, or ctx.Err().
func (w *Writer) Put(ctx context.Context, k tier.Key, data []byte) (Location, error) {
	if len(k.Namespace) > MaxNamespace {
		return Location{}, fmt.Errorf("pool: namespace of %v is longer than %d bytes", k, MaxNamespace)
	}
	if len(data) == 0 {
		return Location{}, fmt.Errorf("pool: put %v: empty block", k)
	}
	recLen := recordLen(len(data))
	if len(data) > tier.MaxBlockSize || recLen > w.p.sb.ExtentSize-pageSize {
		return Location{}, fmt.Errorf("pool: put %v: %d bytes: %w", k, len(data), tier.ErrTooLarge)
	}
	if err := ctx.Err(); err != nil {
		return Location{}, err
	}
	lease, off, err := w.alloc(ctx, recLen)
	if err != nil {
		return Location{}, fmt.Errorf("pool: put %v: %w", k, err)
	}
	defer w.puts.Done()
	loc := Location{Extent: lease.Extent, Offset: w.p.ExtentOffset(lease.Extent) + off, Length: uint32(len(data)), Epoch: lease.Epoch}
	if err := w.writeVerify(k, data, loc); err != nil {
		return Location{}, fmt.Errorf("pool: put %v at %v: %w", k, loc, err)
	}
	if w.afterWrite != nil {
		w.afterWrite()
	}
	if err := w.check(lease); err != nil {
		return Location{}, fmt.Errorf("pool: put %v at %v: %w", k, loc, err)
	}
	return loc, nil
}

// alloc reserves recLen bytes in the current extent, acquiring a new one
// when there is none or it is full, and returns the lease and the offset
// from the extent start. On success the caller owns one w.puts count.
func (w *Writer) alloc(ctx context.Context, recLen int64) (Lease, int64, error) {
	for {
		w.mu.Lock()
		if w.closed {
			w.mu.Unlock()
			return Lease{}, 0, tier.ErrClosed
		}
		if st := w.cur; st != nil {
			l := st.lease // st changes under w.mu only: use copies after Unlock
			now := w.clock()
			if !now.Before(l.Expires) {
				w.dropLocked(st)
				w.mu.Unlock()
				w.lost(l)
				return Lease{}, 0, fmt.Errorf("%w: %v expired", ErrLeaseLost, l)
			}
			if m := w.marginLocked(); !now.Add(m).Before(l.Expires) {
				w.mu.Unlock()
				return Lease{}, 0, fmt.Errorf("%w: %v expires within the %v safety margin", ErrLeaseLost, l, m)
			}
			if st.next+recLen <= w.p.sb.ExtentSize {
				off := st.next
				st.next += recLen
				w.puts.Add(1)
				w.mu.Unlock()
				return l, off, nil
			}
			w.cur = nil // full: sealed, still held and renewed
		}
		w.mu.Unlock()
		if err := w.acquire(ctx); err != nil {
			return Lease{}, 0, err
		}
	}
}

// acquire installs a newly acquired extent as current unless another Put
// did so meanwhile.
func (w *Writer) acquire(ctx context.Context) error {
	w.acq.Lock()
	defer w.acq.Unlock()
	w.mu.Lock()
	busy := w.cur != nil || w.closed
	w.mu.Unlock()
	if busy {
		return nil // alloc re-checks
	}
	start := w.clock()
	l, err := w.leaser.Acquire(ctx)
	if err != nil {
		return err
	}
	// Stamp the extent with the new epoch before any record goes in: from
	// here on every Location of the extent's earlier leases misses.
	if err := w.p.stampExtent(l, w.opts.Host, w.clock()); err != nil {
		if rerr := w.leaser.Release(ctx, l); rerr != nil {
			err = errors.Join(err, fmt.Errorf("pool: release %v: %w", l, rerr))
		}
		return err
	}
	w.mu.Lock()
	var old *Lease
	if o := w.held[l.Extent]; o != nil && o.lease.Epoch != l.Epoch {
		ol := o.lease // our earlier lease on this extent lapsed
		old = &ol
	}
	st := &extentState{lease: l, next: pageSize}
	w.held[l.Extent] = st
	w.cur = st
	if life := l.Expires.Sub(start); life > 0 {
		w.life = life
	}
	w.mu.Unlock()
	if old != nil {
		w.lost(*old)
	}
	return nil
}

// writeVerify writes the record for (k, data) at loc and reads it back.
func (w *Writer) writeVerify(k tier.Key, data []byte, loc Location) error {
	recLen := int(recordLen(len(data)))
	h := recordHeader{poolID: w.p.sb.PoolID, offset: loc.Offset, extent: loc.Extent, length: loc.Length, epoch: loc.Epoch,
		key: k, payloadCRC: tier.Checksum(data), written: w.clock(), host: w.opts.Host}
	var rec []byte
	var err error
	if directio.IsAligned(data) && len(data)%pageSize == 0 {
		// Zero copy: header page and the caller's aligned payload.
		rec = w.p.bufs.Get(headerSize)
		encodeHeader(rec, &h)
		err = w.p.io(func(fd int) error { return directio.PwritevFull(fd, [][]byte{rec, data}, loc.Offset) })
	} else {
		rec = w.p.bufs.Get(recLen)
		encodeHeader(rec, &h)
		n := copy(rec[headerSize:], data)
		clear(rec[headerSize+n:])
		err = w.p.io(func(fd int) error { return directio.PwriteFull(fd, rec, loc.Offset) })
	}
	defer w.p.bufs.Put(rec)
	if err != nil {
		return fmt.Errorf("write: %w", err)
	}
	if w.beforeReadBack != nil {
		w.beforeReadBack(loc)
	}
	back := w.p.bufs.Get(recLen)
	defer w.p.bufs.Put(back)
	if err := w.p.io(func(fd int) error { return directio.PreadFull(fd, back, loc.Offset) }); err != nil {
		return fmt.Errorf("read back: %w", err)
	}
	if !bytes.Equal(back[:headerSize], rec[:headerSize]) || !bytes.Equal(back[headerSize:headerSize+len(data)], data) {
		return fmt.Errorf("read back differs from what was written: %w", tier.ErrCorrupt)
	}
	return nil
}

// check returns nil when l is still the live lease of its extent by this
// writer's clock, ErrLeaseLost otherwise.
func (w *Writer) check(l Lease) error {
	w.mu.Lock()
	st := w.held[l.Extent]
	if st == nil || st.lease.Epoch != l.Epoch {
		w.mu.Unlock()
		return fmt.Errorf("%w: %v was lost during the write", ErrLeaseLost, l)
	}
	if l := st.lease; !w.clock().Before(l.Expires) {
		w.dropLocked(st)
		w.mu.Unlock()
		w.lost(l)
		return fmt.Errorf("%w: %v expired during the write", ErrLeaseLost, l)
	}
	w.mu.Unlock()
	return nil
}

// dropLocked forgets st (lost or reclaimed); w.mu is held.
func (w *Writer) dropLocked(st *extentState) {
	if w.held[st.lease.Extent] == st {
		delete(w.held, st.lease.Extent)
	}
	if w.cur == st {
		w.cur = nil
	}
}

func (w *Writer) lost(l Lease) {
	if w.opts.OnLost != nil {
		w.opts.OnLost(l)
	}
}

func (w *Writer) marginLocked() time.Duration {
	if w.opts.Margin > 0 {
		return w.opts.Margin
	}
	return w.life / 5
}

func (w *Writer) renewInterval() time.Duration {
	if w.opts.RenewEvery > 0 {
		return w.opts.RenewEvery
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.life <= 0 {
		return time.Second
	}
	return max(w.life/3, time.Millisecond)
}

// run is the renewal loop.
func (w *Writer) run(ctx context.Context) {
	defer close(w.done)
	t := time.NewTimer(w.renewInterval())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.renewAll(ctx)
		t.Reset(w.renewInterval())
	}
}

// renewAll renews every held lease once. A lease the leaser reports lost,
// or that expires by this writer's clock while the leaser does not answer,
// is dropped and reported to OnLost.
func (w *Writer) renewAll(ctx context.Context) {
	w.mu.Lock()
	leases := make([]Lease, 0, len(w.held))
	for _, st := range w.held {
		leases = append(leases, st.lease)
	}
	w.mu.Unlock()
	var lost []Lease
	for _, l := range leases {
		nl, err := w.leaser.Renew(ctx, l)
		w.mu.Lock()
		st := w.held[l.Extent]
		if st == nil || st.lease.Epoch != l.Epoch {
			w.mu.Unlock()
			continue // reclaimed or replaced meanwhile
		}
		switch {
		case err == nil && nl.Extent == l.Extent && nl.Epoch == l.Epoch:
			st.lease.Expires = nl.Expires
		case errors.Is(err, ErrLeaseLost), err == nil, !w.clock().Before(st.lease.Expires):
			w.dropLocked(st)
			lost = append(lost, st.lease)
		}
		w.mu.Unlock()
	}
	for _, l := range lost {
		w.lost(l)
	}
}

// Leases returns the leases the writer holds, by extent number (for status
// and tests).
func (w *Writer) Leases() []Lease {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]Lease, 0, len(w.held))
	for _, st := range w.held {
		out = append(out, st.lease)
	}
	slices.SortFunc(out, func(a, b Lease) int { return int(a.Extent) - int(b.Extent) })
	return out
}

// Reclaim gives up extent e: it stops allocating from it, wipes its
// extent header (Pool.Reclaim), so every Location in it misses at once, and
// releases the lease. The caller must have
// removed every index entry pointing into e first. Puts still writing into
// e fail with ErrLeaseLost. It returns ErrLeaseLost when the writer does
// not hold e, and the wipe or release error otherwise.
func (w *Writer) Reclaim(ctx context.Context, e uint32) error {
	w.mu.Lock()
	st := w.held[e]
	if st == nil {
		w.mu.Unlock()
		return fmt.Errorf("pool: reclaim extent %d: %w: not held", e, ErrLeaseLost)
	}
	w.dropLocked(st)
	l := st.lease
	expired := !w.clock().Before(l.Expires)
	w.mu.Unlock()
	if expired {
		w.lost(l)
		return fmt.Errorf("pool: reclaim %v: %w: expired", l, ErrLeaseLost)
	}
	werr := w.p.Reclaim(ctx, l)
	rerr := w.leaser.Release(ctx, l)
	if rerr != nil {
		rerr = fmt.Errorf("pool: release %v: %w", l, rerr)
	}
	return errors.Join(werr, rerr)
}

// Close stops the renewal loop and waits for it and for Puts in flight;
// later Puts return tier.ErrClosed. Leases are not released: they lapse at
// their expiry, and their records stay readable until their extents are
// leased again (the blocks may still be in the global index).
func (w *Writer) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	w.mu.Unlock()
	w.cancel()
	<-w.done
	w.puts.Wait()
	return nil
}
