package fusefs

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ctxmem/ctxmemd/hitratio"
	"github.com/ctxmem/ctxmemd/tiering"
)

// fakeBackend is an in-memory Backend for this package's tests. Objects
// are byte slices; a block is "hole" until written, then "G2" unless a
// test set another tier.
type fakeBackend struct {
	mu       sync.Mutex
	next     tiering.ObjectID
	objs     map[tiering.ObjectID]*fakeObj
	total    int64
	lostFn   func(tiering.ObjectID)
	deletes  []tiering.ObjectID
	flushes  map[tiering.ObjectID]int
	truncs   map[tiering.ObjectID][]int64
	prestage map[tiering.ObjectID]int
}

type fakeObj struct {
	info    tiering.ObjectInfo
	data    []byte
	written map[int64]bool
	tiers   map[int64]string
	heat    float64
}

func newFakeBackend() *fakeBackend {
	return &fakeBackend{next: 100, objs: map[tiering.ObjectID]*fakeObj{}, total: 1 << 40,
		flushes: map[tiering.ObjectID]int{}, truncs: map[tiering.ObjectID][]int64{}, prestage: map[tiering.ObjectID]int{}}
}

func (b *fakeBackend) obj(id tiering.ObjectID) (*fakeObj, error) {
	o := b.objs[id]
	if o == nil {
		return nil, fmt.Errorf("object %d: %w", id, tiering.ErrNotExist)
	}
	return o, nil
}

func (b *fakeBackend) Create(ns string, blockSize int, kind string) (tiering.ObjectID, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.next++
	b.objs[b.next] = &fakeObj{
		info:    tiering.ObjectInfo{ID: b.next, Namespace: ns, Gen: 1, BlockSize: blockSize, Created: time.Now(), Kind: kind},
		written: map[int64]bool{}, tiers: map[int64]string{},
	}
	return b.next, nil
}

func (b *fakeBackend) ReadAt(ctx context.Context, id tiering.ObjectID, p []byte, off int64) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	o, err := b.obj(id)
	if err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, tiering.ErrInvalid
	}
	if off >= int64(len(o.data)) {
		return 0, nil
	}
	return copy(p, o.data[off:]), nil
}

func (b *fakeBackend) WriteAt(ctx context.Context, id tiering.ObjectID, p []byte, off int64) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	o, err := b.obj(id)
	if err != nil {
		return 0, err
	}
	end := off + int64(len(p))
	if end > int64(len(o.data)) {
		o.grow(end)
	}
	copy(o.data[off:], p)
	bs := int64(o.info.BlockSize)
	for blk := off / bs; blk*bs < end; blk++ {
		o.written[blk] = true
	}
	o.info.Size = int64(len(o.data))
	o.info.Dirty = true
	return len(p), nil
}

func (o *fakeObj) grow(end int64) {
	if end <= int64(cap(o.data)) {
		o.data = o.data[:end]
		return
	}
	n := make([]byte, end, max(end, 2*int64(cap(o.data))))
	copy(n, o.data)
	o.data = n
}

func (b *fakeBackend) Truncate(ctx context.Context, id tiering.ObjectID, size int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	o, err := b.obj(id)
	if err != nil {
		return err
	}
	b.truncs[id] = append(b.truncs[id], size)
	if size < int64(len(o.data)) {
		clear(o.data[size:])
		o.data = o.data[:size]
		bs := int64(o.info.BlockSize)
		for blk := range o.written {
			if blk*bs >= size {
				delete(o.written, blk)
			}
		}
	} else {
		o.grow(size)
	}
	if size == 0 {
		o.info.Gen++
	}
	o.info.Size = size
	return nil
}

func (b *fakeBackend) Delete(ctx context.Context, id tiering.ObjectID) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, err := b.obj(id); err != nil {
		return err
	}
	delete(b.objs, id)
	b.deletes = append(b.deletes, id)
	return nil
}

func (b *fakeBackend) Stat(id tiering.ObjectID) (tiering.ObjectInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	o, err := b.obj(id)
	if err != nil {
		return tiering.ObjectInfo{}, err
	}
	return o.info, nil
}

func (b *fakeBackend) Flush(ctx context.Context, id tiering.ObjectID) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	o, err := b.obj(id)
	if err != nil {
		return err
	}
	o.info.Dirty = false
	b.flushes[id]++
	return nil
}

func (b *fakeBackend) SetPinned(id tiering.ObjectID, pinned bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	o, err := b.obj(id)
	if err != nil {
		return err
	}
	o.info.Pinned = pinned
	return nil
}

func (b *fakeBackend) Prestage(ctx context.Context, id tiering.ObjectID) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	o, err := b.obj(id)
	if err != nil {
		return err
	}
	b.prestage[id]++
	for blk := range o.tiers {
		o.tiers[blk] = tiering.TierG2
	}
	return nil
}

func (b *fakeBackend) BlockTiers(id tiering.ObjectID) ([]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	o, err := b.obj(id)
	if err != nil {
		return nil, err
	}
	out := make([]string, o.info.Blocks())
	for i := range out {
		switch {
		case o.tiers[int64(i)] != "":
			out[i] = o.tiers[int64(i)]
		case o.written[int64(i)]:
			out[i] = tiering.TierG2
		default:
			out[i] = tiering.TierHole
		}
	}
	return out, nil
}

func (b *fakeBackend) ServingTier(id tiering.ObjectID) (string, error) {
	tiers, err := b.BlockTiers(id)
	if err != nil {
		return "", err
	}
	if len(tiers) == 0 {
		return tiering.TierG2, nil
	}
	return hitratio.SlowestTier(strings.Join(tiers, " ")), nil
}

// RestoreEstimate is 10 ms per block outside G2 (set with setTier).
func (b *fakeBackend) RestoreEstimate(id tiering.ObjectID) (time.Duration, string, error) {
	tiers, err := b.BlockTiers(id)
	if err != nil {
		return 0, "", err
	}
	var d time.Duration
	for _, t := range tiers {
		if t != tiering.TierG2 && t != tiering.TierHole {
			d += 10 * time.Millisecond
		}
	}
	return d, hitratio.SlowestTier(strings.Join(tiers, " ")), nil
}

func (b *fakeBackend) Heat(id tiering.ObjectID) (float64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	o, err := b.obj(id)
	if err != nil {
		return 0, err
	}
	return o.heat, nil
}

func (b *fakeBackend) Capacity() (int64, int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	used := int64(0)
	for _, o := range b.objs {
		used += int64(len(o.data))
	}
	return b.total, b.total - used
}

func (b *fakeBackend) Objects() []tiering.ObjectInfo {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []tiering.ObjectInfo
	for _, o := range b.objs {
		out = append(out, o.info)
	}
	return out
}

func (b *fakeBackend) OnLost(fn func(tiering.ObjectID)) {
	b.mu.Lock()
	b.lostFn = fn
	b.mu.Unlock()
}

// --- test helpers ---

// lose removes id as the real store does when a block is gone everywhere.
func (b *fakeBackend) lose(id tiering.ObjectID) {
	b.mu.Lock()
	delete(b.objs, id)
	fn := b.lostFn
	b.mu.Unlock()
	if fn != nil {
		fn(id)
	}
}

func (b *fakeBackend) data(id tiering.ObjectID) ([]byte, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	o := b.objs[id]
	if o == nil {
		return nil, false
	}
	return append([]byte(nil), o.data...), true
}

func (b *fakeBackend) exists(id tiering.ObjectID) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.objs[id] != nil
}

func (b *fakeBackend) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.objs)
}

func (b *fakeBackend) setTier(id tiering.ObjectID, blk int64, tier string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.objs[id].tiers[blk] = tier
}

func (b *fakeBackend) setHeat(id tiering.ObjectID, h float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.objs[id].heat = h
}

var _ Backend = (*fakeBackend)(nil)
