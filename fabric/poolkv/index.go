package poolkv

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ctxmem/ctxmemd/fabric/pool"
)

// FileEntry is one file shared through the pool, as published by its
// owner host. Blocks are shared with the cache: treat them as read-only.
type FileEntry struct {
	// V is the schema version; Publish sets it to Version.
	V int
	// Namespace and Path name the file ("a/b" inside the namespace).
	Namespace, Path string
	// Size is the file size in bytes.
	Size int64
	// BlockSize is the size of a block in bytes (every block but the last
	// is this long).
	BlockSize int
	// Owner is the host that published the entry.
	Owner string
	// Object is the owner's object id of the file.
	Object uint64
	// Gen is the owner's object generation the blocks belong to.
	Gen uint64
	// Blocks holds one Location per block index; a zero Location means
	// that block is not in the pool.
	Blocks []pool.Location
	// Published is when the owner published the entry, unix ns; Publish
	// sets it to now when 0.
	Published int64
}

// check reports impossible values.
func (e FileEntry) check() error {
	switch {
	case e.Namespace == "" || e.Path == "":
		return fmt.Errorf("index entry without namespace or path (%q, %q)", e.Namespace, e.Path)
	case e.Size < 0 || e.BlockSize < 0:
		return fmt.Errorf("index entry %s/%s: negative size %d or block size %d", e.Namespace, e.Path, e.Size, e.BlockSize)
	}
	return nil
}

// FileKey is the index key of (ns, path): "f." and the first 32 hex digits
// (16 bytes) of SHA-256(ns, 0x00, path). Hashing keeps keys valid KV keys
// whatever the path holds.
func FileKey(ns, path string) string {
	h := sha256.New()
	h.Write([]byte(ns))
	h.Write([]byte{0})
	h.Write([]byte(path))
	var sum [sha256.Size]byte
	return "f." + hex.EncodeToString(h.Sum(sum[:0])[:16])
}

// DefaultResync is how often Run compares the bucket's last revision with
// the last one its watcher delivered; a watcher that stays behind with no
// progress over two such checks is replaced.
const DefaultResync = 5 * time.Second

// Backoff bounds between failed watch attempts.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// Index is this host's view of the pool's global file index: a local
// cache of the whole index bucket kept current by Run, so Lookup, HasDir
// and ByExtent never wait on the bus. Publish and Remove write to the
// bucket and apply the change to the cache at once. The cache is
// eventually consistent with the bucket; while the bus is down it keeps
// serving what it had. Safe for concurrent use; call Run once.
type Index struct {
	kv     jetstream.KeyValue
	log    *slog.Logger
	resync time.Duration
	now    func() time.Time

	mu      sync.RWMutex
	live    *cache
	pending *cache // the cache a re-watch is loading, nil outside loads

	ready     chan struct{}
	readyOnce sync.Once
}

// NewIndex returns an index over kv (an index bucket made by
// EnsureBuckets), empty until Run has loaded it. log receives skipped
// malformed values and watch restarts; nil means slog.Default().
func NewIndex(kv jetstream.KeyValue, log *slog.Logger) *Index {
	if log == nil {
		log = slog.Default()
	}
	return &Index{kv: kv, log: log, resync: DefaultResync, now: time.Now, live: newCache(), ready: make(chan struct{})}
}

// Ready is closed once Run has loaded every value present when it
// started.
func (x *Index) Ready() <-chan struct{} { return x.ready }

// Run keeps the cache current until ctx ends, then returns nil. It watches
// the whole bucket (latest value per key, then every update): each watch
// first loads a fresh cache and swaps it in when the initial values are
// complete, then applies puts, deletes and purges. When the watch ends
// (its subscription closed after a reconnect failed, or it stalled: see
// DefaultResync) or cannot start (bus down), Run waits 100 ms doubling to
// 5 s and watches again, rebuilding the cache. Values that do not decode
// are skipped and logged; the entry they replaced is dropped.
func (x *Index) Run(ctx context.Context) error {
	backoff := minBackoff
	for ctx.Err() == nil {
		loaded, err := x.watch(ctx)
		if ctx.Err() != nil {
			break
		}
		if loaded {
			backoff = minBackoff
		}
		x.log.Warn("pool index watch ended; watching again", "bucket", x.kv.Bucket(), "err", err, "after", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
	x.mu.Lock()
	x.pending = nil
	x.mu.Unlock()
	return nil
}

// watch runs one watcher until it ends; loaded reports whether its
// initial values were complete (and swapped in).
func (x *Index) watch(ctx context.Context) (loaded bool, err error) {
	floor, _ := x.lastRevision(ctx) // everything up to here comes with the initial values
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := x.kv.WatchAll(wctx)
	if err != nil {
		return false, fmt.Errorf("watch: %w", err)
	}
	defer w.Stop()
	x.mu.Lock()
	x.pending = newCache()
	x.mu.Unlock()
	defer func() {
		x.mu.Lock()
		x.pending = nil
		x.mu.Unlock()
	}()

	tick := time.NewTicker(x.resync)
	defer tick.Stop()
	var behind bool
	var behindAt uint64
	for {
		select {
		case <-ctx.Done():
			return loaded, nil
		case kve, ok := <-w.Updates():
			if !ok {
				return loaded, errors.New("watch subscription closed")
			}
			if kve == nil {
				if !loaded {
					x.mu.Lock()
					x.live, x.pending = x.pending, nil
					x.mu.Unlock()
					loaded = true
					x.readyOnce.Do(func() { close(x.ready) })
				}
				continue
			}
			x.apply(kve, loaded)
		case <-tick.C:
			last, err := x.lastRevision(ctx)
			if err != nil {
				continue // the bus is down; the watcher resumes or closes by itself
			}
			x.mu.RLock()
			c := x.live
			if !loaded {
				c = x.pending
			}
			high := c.high
			x.mu.RUnlock()
			if last <= max(high, floor) {
				behind = false
				continue
			}
			if behind && high == behindAt {
				return loaded, fmt.Errorf("watch stalled at revision %d, bucket at %d", high, last)
			}
			behind, behindAt = true, high
		}
	}
}

// apply decodes one watched entry (outside the lock) and applies it to the
// live cache, or to the one being loaded.
func (x *Index) apply(kve jetstream.KeyValueEntry, loaded bool) {
	key, rev := kve.Key(), kve.Revision()
	var e FileEntry
	var err error
	put := kve.Operation() == jetstream.KeyValuePut
	if put {
		if !strings.HasPrefix(key, "f.") {
			err = fmt.Errorf("%w: key %q is not an index key", ErrMalformed, key)
		} else {
			e, err = decodeEntry(key, kve.Value())
		}
		if err != nil {
			x.log.Warn("malformed pool index value skipped", "bucket", x.kv.Bucket(), "key", key, "revision", rev, "err", err)
		}
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	c := x.live
	if !loaded {
		c = x.pending
	}
	if c == nil {
		return
	}
	switch {
	case !put:
		c.delWatched(key, rev)
	case err != nil:
		c.dropWatched(key, rev)
	default:
		c.putWatched(key, rev, e)
	}
}

// lastRevision returns the bucket's last revision (its stream's last
// sequence).
func (x *Index) lastRevision(ctx context.Context) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, min(x.resync, 5*time.Second))
	defer cancel()
	st, err := x.kv.Status(ctx)
	if err != nil {
		return 0, err
	}
	si, ok := st.(interface{ StreamInfo() *jetstream.StreamInfo })
	if !ok || si.StreamInfo() == nil {
		return 0, errors.New("bucket status without stream info")
	}
	return si.StreamInfo().State.LastSeq, nil
}

// Publish puts e under FileKey(e.Namespace, e.Path), replacing any earlier
// entry of the file, and applies it to the local cache at once. It sets
// e.V to Version and e.Published to now when 0. Errors: an entry without
// namespace or path or with negative sizes, ctx, the bus error (the cache
// is then unchanged).
func (x *Index) Publish(ctx context.Context, e FileEntry) error {
	e.V = Version
	if e.Published == 0 {
		e.Published = x.now().UnixNano()
	}
	if err := e.check(); err != nil {
		return fmt.Errorf("poolkv: publish: %w", err)
	}
	b, err := encodeEntry(e)
	if err != nil {
		return fmt.Errorf("poolkv: publish %s/%s: %w", e.Namespace, e.Path, err)
	}
	key := FileKey(e.Namespace, e.Path)
	rev, err := x.kv.Put(ctx, key, b)
	if err != nil {
		return fmt.Errorf("poolkv: publish %s/%s: %w", e.Namespace, e.Path, err)
	}
	if len(e.Blocks) > 0 {
		e.Blocks = slices.Clone(e.Blocks) // the caller keeps its slice
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.live.putLocal(key, rev, e)
	if x.pending != nil {
		x.pending.putLocal(key, rev, e)
	}
	return nil
}

// Remove deletes the entry of (ns, path) from the bucket (a delete marker
// is written even when there is none) and from the local cache at once.
// Errors: ctx, the bus error (the cache is then unchanged).
func (x *Index) Remove(ctx context.Context, ns, path string) error {
	key := FileKey(ns, path)
	if err := x.kv.Delete(ctx, key); err != nil {
		return fmt.Errorf("poolkv: remove %s/%s: %w", ns, path, err)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.live.delLocal(key)
	if x.pending != nil {
		x.pending.delLocal(key)
	}
	return nil
}

// Lookup returns the cached entry of (ns, path), without a bus round
// trip. The entry's Blocks must not be modified.
func (x *Index) Lookup(ns, path string) (FileEntry, bool) {
	x.mu.RLock()
	cd := x.live.byName[name{ns, path}]
	x.mu.RUnlock()
	if cd == nil {
		return FileEntry{}, false
	}
	return cd.e, true
}

// HasDir reports whether some cached entry of ns has a path starting with
// dir + "/" (dir without a trailing '/'); dir "" asks whether ns has any
// entry. O(1): the cache keeps a reference count per directory.
func (x *Index) HasDir(ns, dir string) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.live.dirs[name{ns, dir}] > 0
}

// ByExtent returns the cached entries with at least one block Location
// in extent e (whatever its epoch), ordered by namespace and path.
func (x *Index) ByExtent(e uint32) []FileEntry {
	x.mu.RLock()
	keys := x.live.extents[e]
	out := make([]FileEntry, 0, len(keys))
	for k := range keys {
		out = append(out, x.live.byKey[k].e)
	}
	x.mu.RUnlock()
	slices.SortFunc(out, func(a, b FileEntry) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Path, b.Path))
	})
	return out
}

// Len returns the number of cached entries.
func (x *Index) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.live.byKey)
}
