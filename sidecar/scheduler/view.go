package scheduler

import "iter"

// view is the leader's global view of which hosts hold which names, with
// the directory index a wanted directory is answered from. It holds every
// name some host reported (a wanted name may be any of them), so it is
// laid out for size (issue 17: about 100 B per name instead of the ~680 B
// of nested maps keyed by (namespace, path) strings):
//   - namespaces and hosts are interned to small ids;
//   - a name is one fixed-size slot in a slice, found through one map per
//     namespace (path → slot); its first holder is inline and further
//     holders (a name held by several hosts: rare) sit in a small map;
//   - the directory index keeps, per directory, only the names directly
//     in it and its subdirectories, not every name at every depth.
//
// A freed slot is reused; its generation grows so that a stale reference
// (hostView.byID) never resolves to the slot's next name. The slices do
// not shrink: they stay at the peak number of names. Not safe for
// concurrent use (the Scheduler's mu guards it).
type view struct {
	nsID   map[string]uint32 // namespace → index in nsName
	nsName []string
	byNS   []map[string]uint32 // per namespace id: path → slot
	hostID map[string]uint32   // host → index in hostName (never reused while leading)
	host   []string
	slots  []nameSlot
	free   []uint32 // free slots
	n      int      // live names
	dirs   map[dirKey]*dirEnt
}

// nameSlot is one name of the view. host == 0 marks a free slot.
type nameSlot struct {
	path string
	dir  *dirEnt           // the directory directly holding it; nil at the namespace root
	id   uint64            // the first holder's object id
	more map[uint32]uint64 // further holders: host index → object id
	ns   uint32
	host uint32 // the first holder's host index + 1; 0: free slot
	pos  uint32 // index in dir.files
	gen  uint32 // bumped when the slot is freed
}

type dirKey struct {
	ns   uint32
	path string
}

// dirEnt is a directory of the index: present while some name is under
// it at any depth.
type dirEnt struct {
	key    dirKey
	parent *dirEnt
	files  []uint32 // slots of the names directly in it
	subs   map[*dirEnt]struct{}
}

// nameRef is a slot and its generation, as hostView.byID keeps it.
type nameRef uint64

func mkRef(slot, gen uint32) nameRef { return nameRef(uint64(gen)<<32 | uint64(slot)) }

func newView() *view {
	return &view{nsID: map[string]uint32{}, hostID: map[string]uint32{}, dirs: map[dirKey]*dirEnt{}}
}

// len returns the number of names in the view (0 for a nil view).
func (v *view) len() int {
	if v == nil {
		return 0
	}
	return v.n
}

// hostIndex returns host's index, assigning one on first use.
func (v *view) hostIndex(host string) uint32 {
	if i, ok := v.hostID[host]; ok {
		return i
	}
	i := uint32(len(v.host))
	v.hostID[host] = i
	v.host = append(v.host, host)
	return i
}

// nsIndex returns namespace ns's index; with add false, ok is false for a
// namespace the view never had.
func (v *view) nsIndex(ns string, add bool) (uint32, bool) {
	if i, ok := v.nsID[ns]; ok {
		return i, true
	}
	if !add {
		return 0, false
	}
	i := uint32(len(v.nsName))
	v.nsID[ns] = i
	v.nsName = append(v.nsName, ns)
	v.byNS = append(v.byNS, map[string]uint32{})
	return i, true
}

// lookup returns the slot of (ns, path), or ok false when no host holds it
// (or v is nil: a replica that never led has no view).
func (v *view) lookup(ns, path string) (uint32, bool) {
	if v == nil {
		return 0, false
	}
	n, ok := v.nsIndex(ns, false)
	if !ok {
		return 0, false
	}
	slot, ok := v.byNS[n][path]
	return slot, ok
}

// resolve returns the slot r names, or ok false when it was freed since.
func (v *view) resolve(r nameRef) (uint32, bool) {
	slot := uint32(r)
	if int(slot) >= len(v.slots) {
		return 0, false
	}
	sl := &v.slots[slot]
	return slot, sl.host != 0 && sl.gen == uint32(r>>32)
}

// name returns the namespace and path of a live slot.
func (v *view) name(slot uint32) objKey {
	sl := &v.slots[slot]
	return objKey{v.nsName[sl.ns], sl.path}
}

// hold records that host index h holds (ns, path) as object id and
// returns the name's reference.
func (v *view) hold(h uint32, ns, path string, id uint64) nameRef {
	slot, ok := v.lookup(ns, path)
	if !ok {
		slot = v.add(ns, path)
	}
	sl := &v.slots[slot]
	switch {
	case sl.host == h+1:
		sl.id = id
	case sl.host == 0:
		sl.host, sl.id = h+1, id
	default:
		if sl.more == nil {
			sl.more = map[uint32]uint64{}
		}
		sl.more[h] = id
	}
	return mkRef(slot, sl.gen)
}

// add makes a slot for a new name (with no holder yet: the caller sets
// one) and links it into the directory index.
func (v *view) add(ns, path string) uint32 {
	n, _ := v.nsIndex(ns, true)
	var slot uint32
	if k := len(v.free); k > 0 {
		slot = v.free[k-1]
		v.free = v.free[:k-1]
	} else {
		slot = uint32(len(v.slots))
		v.slots = append(v.slots, nameSlot{})
	}
	sl := &v.slots[slot]
	sl.path, sl.ns = path, n
	if d := parentDir(path); d != "" {
		de := v.dir(dirKey{n, d})
		sl.dir, sl.pos = de, uint32(len(de.files))
		de.files = append(de.files, slot)
	}
	v.byNS[n][path] = slot
	v.n++
	return slot
}

// dir returns directory k's entry, making it (and its parents) if needed.
func (v *view) dir(k dirKey) *dirEnt {
	if de := v.dirs[k]; de != nil {
		return de
	}
	de := &dirEnt{key: k}
	v.dirs[k] = de
	if p := parentDir(k.path); p != "" {
		de.parent = v.dir(dirKey{k.ns, p})
		if de.parent.subs == nil {
			de.parent.subs = map[*dirEnt]struct{}{}
		}
		de.parent.subs[de] = struct{}{}
	}
	return de
}

// unhold records that host index h no longer holds the name in slot; a
// name no host holds leaves the view.
func (v *view) unhold(h uint32, slot uint32) {
	sl := &v.slots[slot]
	if sl.host == 0 {
		return
	}
	if sl.host != h+1 {
		delete(sl.more, h)
		if len(sl.more) == 0 {
			sl.more = nil
		}
		return
	}
	if len(sl.more) > 0 {
		// Promote the smallest remaining host index (deterministic).
		first := true
		var nh uint32
		for o := range sl.more {
			if first || o < nh {
				nh, first = o, false
			}
		}
		sl.host, sl.id = nh+1, sl.more[nh]
		delete(sl.more, nh)
		if len(sl.more) == 0 {
			sl.more = nil
		}
		return
	}
	v.remove(slot)
}

// remove frees a slot and unlinks it from the directory index.
func (v *view) remove(slot uint32) {
	sl := &v.slots[slot]
	delete(v.byNS[sl.ns], sl.path)
	if de := sl.dir; de != nil {
		last := len(de.files) - 1
		moved := de.files[last]
		de.files[sl.pos] = moved
		v.slots[moved].pos = sl.pos
		de.files[last] = 0
		de.files = de.files[:last]
		if len(de.files) == 0 {
			de.files = nil // a directory emptied by deletes gives its array back
		}
		v.pruneDir(de)
	}
	*sl = nameSlot{gen: sl.gen + 1}
	v.free = append(v.free, slot)
	v.n--
}

// pruneDir drops de and its emptied parents once nothing is under them.
func (v *view) pruneDir(de *dirEnt) {
	for de != nil && len(de.files) == 0 && len(de.subs) == 0 {
		delete(v.dirs, de.key)
		p := de.parent
		if p != nil {
			delete(p.subs, de)
		}
		de = p
	}
}

// count returns the number of hosts holding the name in slot.
func (v *view) count(slot uint32) int {
	sl := &v.slots[slot]
	if sl.host == 0 {
		return 0
	}
	return 1 + len(sl.more)
}

// holders yields the host names holding the name in slot and their object
// ids (in no particular order).
func (v *view) holders(slot uint32) iter.Seq2[string, uint64] {
	return func(yield func(string, uint64) bool) {
		sl := &v.slots[slot]
		if sl.host == 0 {
			return
		}
		if !yield(v.host[sl.host-1], sl.id) {
			return
		}
		for h, id := range sl.more {
			if !yield(v.host[h], id) {
				return
			}
		}
	}
}

// idOf returns host's object id of the name in slot.
func (v *view) idOf(slot uint32, host string) (uint64, bool) {
	h, ok := v.hostID[host]
	sl := &v.slots[slot]
	switch {
	case !ok || sl.host == 0:
		return 0, false
	case sl.host == h+1:
		return sl.id, true
	}
	id, ok := sl.more[h]
	return id, ok
}

// under yields the names under directory (ns, dir) at any depth: its own
// names first, then its subdirectories'. Nothing for an unknown directory
// or the namespace root ("").
func (v *view) under(ns, dir string) iter.Seq[objKey] {
	return func(yield func(objKey) bool) {
		n, ok := v.nsIndex(ns, false)
		if !ok {
			return
		}
		de := v.dirs[dirKey{n, dir}]
		if de == nil {
			return
		}
		stack := []*dirEnt{de}
		for len(stack) > 0 {
			d := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			for _, slot := range d.files {
				if !yield(v.name(slot)) {
					return
				}
			}
			for sub := range d.subs {
				stack = append(stack, sub)
			}
		}
	}
}
