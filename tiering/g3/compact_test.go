package g3

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/ctxmem/ctxmemd/tiering/tier"
	"github.com/ctxmem/ctxmemd/tiering/tiertest"
)

// churn writes n blocks of bsz through s, deleting each block again 12
// puts later unless its index is a multiple of 20 (those stay live), and
// returns the kept and the deleted keys.
func churn(t *testing.T, s *Store, n, bsz int) (kept, deleted []tier.Key) {
	t.Helper()
	for i := range n {
		key := k(7, uint32(i))
		put(t, s, key, bsz)
		if i%20 == 0 {
			kept = append(kept, key)
		}
		if j := i - 12; j >= 0 && j%20 != 0 {
			if err := s.Delete(context.Background(), k(7, uint32(j))); err != nil {
				t.Fatal(err)
			}
			deleted = append(deleted, k(7, uint32(j)))
		}
	}
	return kept, deleted
}

// TestCompactionKeepsLiveBlocks is issue 18 item 2: a churn of 30 MiB
// through an 8 MiB store whose live data stays under 3 MiB reclaims the
// dead space by copying live blocks forward, so OnEvict (demotion to G4)
// never sees a block that is still live, every kept block reads back (also
// after a restart), and no deleted block comes back.
func TestCompactionKeepsLiveBlocks(t *testing.T) {
	dir := t.TempDir()
	const bsz = 100 * kib
	var evicted []tier.Key
	opts := Options{Dir: dir, CapacityBytes: 8 * mib, OnEvict: func(keys []tier.Key) { evicted = append(evicted, keys...) }}
	s := openT(t, opts)
	kept, deleted := churn(t, s, 300, bsz)
	st := s.Stats()
	if st.Compacted == 0 || st.Reclaims == 0 {
		t.Fatalf("no compaction: %+v", st)
	}
	keptSet := map[tier.Key]bool{}
	for _, key := range kept {
		keptSet[key] = true
	}
	for _, key := range evicted {
		if keptSet[key] {
			t.Errorf("live block %v handed to OnEvict while G3's live data was under CompactLive of its capacity", key)
		}
	}
	wa := float64(st.PutBytes+st.CompactedBytes) / float64(st.PutBytes)
	t.Logf("reclaims %d, compacted %d blocks (%d KiB), write amplification %.2f, segments %d", st.Reclaims, st.Compacted, st.CompactedBytes>>10, wa, st.Segments)
	check := func(s *Store, when string) {
		for _, key := range kept {
			want := tiertest.Pattern(key, bsz, 0)
			if got, err := get(s, key, bsz+1); err != nil || string(got) != string(want) {
				t.Fatalf("%s: kept block %v: %d bytes, %v", when, key, len(got), err)
			}
		}
		for _, key := range deleted {
			if _, err := s.Stat(context.Background(), key); !errors.Is(err, tier.ErrNotFound) {
				t.Fatalf("%s: deleted block %v: %v, want not found", when, key, err)
			}
		}
	}
	check(s, "after churn")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	check(openT(t, opts), "after reopen")
}

// TestCompactionOffDemotes: with CompactLive < 0 reclaim stays a plain
// FIFO, and live blocks of reclaimed segments go to OnEvict.
func TestCompactionOffDemotes(t *testing.T) {
	var evicted int
	s := openT(t, Options{Dir: t.TempDir(), CapacityBytes: 8 * mib, CompactLive: -1,
		OnEvict: func(keys []tier.Key) { evicted += len(keys) }})
	churn(t, s, 300, 100*kib)
	if st := s.Stats(); st.Compacted != 0 || evicted == 0 {
		t.Fatalf("compaction off: compacted %d, evicted %d", st.Compacted, evicted)
	}
}

// BenchmarkCompactionChurn is a KV churn through a 64 MiB G3 (1 MiB
// segments, 64 KiB blocks): every block is deleted again 32 puts later
// except one in 8, which stays until the live set reaches a quarter of the
// capacity and is then replaced oldest first. It reports the cleaner's
// write amplification ((put + compacted) / put bytes) and how many live
// blocks reclaim handed to OnEvict (demotions to G4) per 1,000 puts, with
// compaction on (the default) and off.
func BenchmarkCompactionChurn(b *testing.B) {
	const bsz = 64 * kib
	data := make([]byte, bsz)
	for _, mode := range []struct {
		name string
		live float64
	}{{"compact", 0}, {"fifo", -1}} {
		b.Run(mode.name, func(b *testing.B) {
			var evicted atomic.Int64
			s := openT(b, Options{Dir: b.TempDir(), CapacityBytes: 64 * mib, CompactLive: mode.live,
				OnEvict: func(keys []tier.Key) { evicted.Add(int64(len(keys))) }})
			ctx := context.Background()
			var kept []tier.Key
			const keepMax = 64 * mib / 4 / bsz
			b.SetBytes(bsz)
			i := 0
			for b.Loop() {
				key := k(9, uint32(i))
				if err := s.Put(ctx, key, data); err != nil {
					b.Fatal(err)
				}
				if i%8 == 0 {
					kept = append(kept, key)
					if len(kept) > keepMax {
						if err := s.Delete(ctx, kept[0]); err != nil {
							b.Fatal(err)
						}
						kept = kept[1:]
					}
				}
				if j := i - 32; j >= 0 && j%8 != 0 {
					if err := s.Delete(ctx, k(9, uint32(j))); err != nil {
						b.Fatal(err)
					}
				}
				i++
			}
			st := s.Stats()
			if st.PutBytes > 0 {
				b.ReportMetric(float64(st.PutBytes+st.CompactedBytes)/float64(st.PutBytes), "write-amp")
			}
			b.ReportMetric(float64(evicted.Load())*1000/float64(i), "demoted/kput")
		})
	}
}
