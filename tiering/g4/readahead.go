package g4

import (
	"context"
	"sync"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// Read-ahead for packs: the core reads a file block by block, so a
// restore of a packed file would cost one ranged GET per block. When Gets
// walk a pack in order (member i right after member i-1), the tier reads
// a window of the following members with the same GET, doubling from 2 up
// to raWindowBytes, verifies each against the pack's CRC table, and keeps
// them for the next Gets in one of raSlots slots (least recently used
// replaced), so at most raSlots × raWindowBytes bytes are held. A block
// served from a slot is checked against its CRC32C again on the way out.
// Random reads (no predecessor just read) fetch their block alone.
const (
	raSlots       = 4
	raWindowBytes = 4 << 20
)

// readAhead holds the slots of blocks read ahead.
type readAhead struct {
	mu    sync.Mutex
	slots [raSlots]raSlot
	tick  uint64
}

// raSlot is one window read ahead: members first.. of pk, verified when
// read, never written after.
type raSlot struct {
	pk     *pack
	first  uint32
	blocks [][]byte
	used   uint64
}

// take returns member i of pk if a slot holds it.
func (r *readAhead) take(pk *pack, i uint32) ([]byte, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for s := range r.slots {
		sl := &r.slots[s]
		if sl.pk == pk && i >= sl.first && i-sl.first < uint32(len(sl.blocks)) {
			r.tick++
			sl.used = r.tick
			b := sl.blocks[i-sl.first]
			if i-sl.first == uint32(len(sl.blocks))-1 {
				*sl = raSlot{} // the window is used up
			}
			return b, true
		}
	}
	return nil, false
}

// put keeps blocks, members first.. of pk, in the least recently used
// slot.
func (r *readAhead) put(pk *pack, first uint32, blocks [][]byte) {
	if len(blocks) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	v := 0
	for s := range r.slots {
		if r.slots[s].used < r.slots[v].used {
			v = s
		}
	}
	r.tick++
	r.slots[v] = raSlot{pk: pk, first: first, blocks: blocks, used: r.tick}
}

// readPackedAhead reads member i of pk (CRC table crcs) into dst(length)
// through the read-ahead (see above) and reports whether it did; false
// means the caller reads the block alone.
func (t *Tier) readPackedAhead(ctx context.Context, pk *pack, i uint32, crcs []uint32, dst func(int) []byte) ([]byte, bool, error) {
	prev := pk.last.Swap(int64(i) + 1) // 1 + the member read last
	if b, ok := t.ra.take(pk, i); ok {
		data := dst(len(b))
		copy(data, b)
		if tier.Checksum(data) != crcs[i] {
			return nil, true, errPayloadCRC // cannot happen: verified when read
		}
		t.readAheads.Add(1)
		return data, true, nil
	}
	r := pk.ref
	win := 1
	if i > 0 && prev == int64(i) { // member i-1 was read last
		win = int(min(max(2*pk.win.Load(), 2), max(raWindowBytes/int64(r.bsize), 1), int64(r.count-i)))
	}
	pk.win.Store(int64(win))
	if win < 2 {
		return nil, false, nil
	}
	last := i + uint32(win) - 1
	off := r.offset(i)
	buf := make([]byte, r.offset(last)+r.blockLen(last)-off)
	if err := readRange(ctx, t.store, pk.name, off, buf); err != nil {
		return nil, true, err
	}
	blocks := make([][]byte, 0, win)
	for j := range uint32(win) {
		lo := int64(j) * int64(r.bsize)
		b := buf[lo : lo+r.blockLen(i+j)]
		if tier.Checksum(b) != crcs[i+j] {
			if j == 0 {
				return nil, true, errPayloadCRC
			}
			break // left to that member's own Get to find and quarantine
		}
		blocks = append(blocks, b)
	}
	data := dst(len(blocks[0]))
	copy(data, blocks[0])
	t.ra.put(pk, i+1, blocks[1:])
	return data, true, nil
}
