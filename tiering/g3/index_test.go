package g3

import (
	"testing"

	"github.com/ctxmem/ctxmemd/internal/testenv"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// TestIndexBytesPerBlock bounds what the in-memory index costs per block
// stored (issue 17): 100,000 one-block objects of one namespace published
// as Put does (an index entry and the segment's key list). With tier.Key
// (a namespace string header) as the key and a 40 B entry it was ~190-230 B
// per block in the daemon's heap profile.
func TestIndexBytesPerBlock(t *testing.T) {
	const n = 100_000
	ns := "default"
	s := &Store{index: map[ikey]entry{}, nsID: map[string]uint32{}}
	seg := &segment{}
	testenv.HeapPer(t, n, "G3 index per block", 140, func() any {
		for i := 0; i < n; i++ {
			k := tier.Key{Namespace: ns, Object: uint64(i + 1), Index: 0, Gen: 1}
			ik := s.internLocked(k)
			s.index[ik] = entry{seg: seg, off: int64(i) * 8192, seq: uint64(i + 1), plen: 4096, hdrLen: pageSize}
			seg.keys = append(seg.keys, ik)
		}
		return []any{s, seg}
	})
	if got, ok := s.entryLocked(tier.Key{Namespace: ns, Object: 7, Gen: 1}); !ok || got.seq != 7 {
		t.Fatalf("lookup: %+v %v", got, ok)
	}
	if _, ok := s.entryLocked(tier.Key{Namespace: "other", Object: 7, Gen: 1}); ok {
		t.Fatal("a key of an unknown namespace was found")
	}
	if k := s.tierKey(seg.keys[6]); k != (tier.Key{Namespace: ns, Object: 7, Gen: 1}) {
		t.Fatalf("tierKey: %v", k)
	}
}
