package tiering

import "iter"

// blockMap holds an object's block states by block index (o.blocks; a
// missing index is a hole). Most KV files have 1-8 blocks, written from
// the start: for them it is a dense slice indexed by block index (8 B per
// index; a Go map costs ~200 B even for one entry, issue 17). An object
// whose written indexes are sparse (a device export written here and
// there) switches to a map for good. The zero value is empty. Guarded like
// the object's other fields (o.mu held for writing to change it, for
// reading to read it).
type blockMap struct {
	dense []*blockState // index → state (nil: hole); nil once m is used
	m     map[uint32]*blockState
	n     int // states held (non-nil entries)
}

// denseSlack: an index past the dense slice is taken into it while it is
// below 2 × (states held) + denseSlack, so at least about half the slice is
// used; else the map takes over.
const denseSlack = 16

// get returns block idx's state, or nil for a hole.
func (bm *blockMap) get(idx uint32) *blockState {
	if bm.m != nil {
		return bm.m[idx]
	}
	if int64(idx) < int64(len(bm.dense)) {
		return bm.dense[idx]
	}
	return nil
}

// set makes b (not nil) block idx's state.
func (bm *blockMap) set(idx uint32, b *blockState) {
	if bm.m == nil {
		switch {
		case int64(idx) < int64(len(bm.dense)):
		case int64(idx) < 2*int64(bm.n)+denseSlack:
			for len(bm.dense) <= int(idx) {
				bm.dense = append(bm.dense, nil)
			}
		default:
			bm.m = make(map[uint32]*blockState, bm.n+1)
			for i, d := range bm.dense {
				if d != nil {
					bm.m[uint32(i)] = d
				}
			}
			bm.dense = nil
		}
	}
	if bm.m != nil {
		if _, ok := bm.m[idx]; !ok {
			bm.n++
		}
		bm.m[idx] = b
		return
	}
	if bm.dense[idx] == nil {
		bm.n++
	}
	bm.dense[idx] = b
}

// del makes block idx a hole.
func (bm *blockMap) del(idx uint32) {
	if bm.m != nil {
		if _, ok := bm.m[idx]; ok {
			delete(bm.m, idx)
			bm.n--
		}
		return
	}
	if int64(idx) >= int64(len(bm.dense)) || bm.dense[idx] == nil {
		return
	}
	bm.dense[idx] = nil
	bm.n--
	end := len(bm.dense)
	for end > 0 && bm.dense[end-1] == nil {
		end--
	}
	if end == 0 {
		bm.dense = nil // no state left: give the array back
	} else {
		bm.dense = bm.dense[:end]
	}
}

// len returns the number of block states held.
func (bm *blockMap) len() int { return bm.n }

// all yields the block states and their indexes: in index order while
// dense, in map order after. As with ranging over a map, states deleted
// before they are reached are not yielded, every state present throughout
// is yielded once, and one set during the walk may or may not be.
func (bm *blockMap) all() iter.Seq2[uint32, *blockState] {
	return func(yield func(uint32, *blockState) bool) {
		if bm.m == nil {
			i := 0
			for ; bm.m == nil && i < len(bm.dense); i++ {
				if b := bm.dense[i]; b != nil && !yield(uint32(i), b) {
					return
				}
			}
			if bm.m == nil {
				return
			}
			// The walk's yield set a sparse index: the map took over, with
			// the states from i on still to be yielded.
			for idx, b := range bm.m {
				if int64(idx) >= int64(i) && !yield(idx, b) {
					return
				}
			}
			return
		}
		for idx, b := range bm.m {
			if !yield(idx, b) {
				return
			}
		}
	}
}
