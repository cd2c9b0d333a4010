package g3

import "github.com/ctxmem/ctxmemd/tiering/tier"

// ikey is a tier.Key as the index keeps it (issue 17: the index holds one
// entry per block stored, and each segment lists the keys of its
// records): the namespace as a small id (Store.nsID) instead of a string
// header, 24 B instead of 40.
type ikey struct {
	obj, gen uint64
	idx, ns  uint32
}

// internLocked returns k's index key, giving its namespace an id on first
// use. Ids are never freed: there is one per namespace ever stored since
// Open (a host has a few). s.mu held for writing (or Open, single-handed).
func (s *Store) internLocked(k tier.Key) ikey {
	n, ok := s.nsID[k.Namespace]
	if !ok {
		n = uint32(len(s.nsName))
		s.nsID[k.Namespace] = n
		s.nsName = append(s.nsName, k.Namespace)
	}
	return ikey{obj: k.Object, gen: k.Gen, idx: k.Index, ns: n}
}

// entryLocked returns k's index entry. s.mu held (read or write).
func (s *Store) entryLocked(k tier.Key) (entry, bool) {
	n, ok := s.nsID[k.Namespace]
	if !ok {
		return entry{}, false
	}
	e, ok := s.index[ikey{obj: k.Object, gen: k.Gen, idx: k.Index, ns: n}]
	return e, ok
}

// tierKey returns the tier.Key of index key ik. s.mu held.
func (s *Store) tierKey(ik ikey) tier.Key {
	return tier.Key{Namespace: s.nsName[ik.ns], Object: ik.obj, Index: ik.idx, Gen: ik.gen}
}
