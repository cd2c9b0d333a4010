package g4_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/g4"
	"github.com/ctxmem/ctxmemd/tiering/tier"
	"github.com/ctxmem/ctxmemd/tiering/tiertest"
)

// versioned returns a 4 KiB block for k whose first 8 bytes name the
// version it was written with.
func versioned(k tier.Key, ver uint64) []byte {
	p := tiertest.Pattern(k, 4096, ver)
	binary.LittleEndian.PutUint64(p, ver)
	return p
}

// checkVersioned fails unless p is what versioned(k, v) wrote for the v it
// names.
func checkVersioned(t *testing.T, k tier.Key, p []byte) {
	if len(p) != 4096 {
		t.Errorf("%v: %d bytes", k, len(p))
		return
	}
	if want := versioned(k, binary.LittleEndian.Uint64(p)); !bytes.Equal(p, want) {
		t.Errorf("%v: bytes no write produced", k)
	}
}

// TestPackRacingMutations runs PutPack of overlapping runs, per-block Put,
// Delete, Get, GetBlocks and Range of the same 32 keys at once: every read
// returns bytes some write produced, and a tier reopened afterwards from
// the listing serves exactly what the live tier held for each key it held.
func TestPackRacingMutations(t *testing.T) {
	dir := t.TempDir()
	tr := openTier(t, newLocal(t, dir), g4.TierOptions{})
	const keys = 32
	var ver atomic.Uint64
	stop := time.Now().Add(time.Second)
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 9))
			for time.Now().Before(stop) && !t.Failed() {
				first := uint32(r.IntN(keys - 1))
				n := 1 + r.IntN(keys-int(first))
				switch op := r.IntN(10); {
				case op < 3:
					ks := make([]tier.Key, n)
					bs := make([][]byte, n)
					for i := range ks {
						ks[i] = key(1, first+uint32(i))
						bs[i] = versioned(ks[i], ver.Add(1))
					}
					if _, err := tr.PutPack(bg, ks, bs); err != nil {
						t.Error(err)
					}
				case op < 5:
					k := key(1, first)
					if err := tr.Put(bg, k, versioned(k, ver.Add(1))); err != nil {
						t.Error(err)
					}
				case op < 6:
					if err := tr.Delete(bg, key(1, first)); err != nil {
						t.Error(err)
					}
				case op < 8:
					k := key(1, first)
					p := make([]byte, 4096)
					m, err := tr.Get(bg, k, p, 0)
					if err == nil {
						checkVersioned(t, k, p[:m])
					} else if !errors.Is(err, tier.ErrNotFound) {
						t.Error(err)
					}
				case op < 9:
					ks := make([]tier.Key, n)
					bufs := make([][]byte, n)
					for i := range ks {
						ks[i], bufs[i] = key(1, first+uint32(i)), make([]byte, 4096)
					}
					ns, err := tr.GetBlocks(bg, ks, bufs)
					for i := range ks {
						if ns[i] > 0 {
							checkVersioned(t, ks[i], bufs[i][:ns[i]])
						}
					}
					if err != nil && !errors.Is(err, tier.ErrNotFound) {
						t.Error(err)
					}
				default:
					if err := tr.Range(bg, func(tier.Key, int64) bool { return true }); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	live := map[tier.Key][]byte{}
	for i := range uint32(keys) {
		k := key(1, i)
		p := make([]byte, 4096)
		if n, err := tr.Get(bg, k, p, 0); err == nil {
			live[k] = p[:n]
		} else if !errors.Is(err, tier.ErrNotFound) {
			t.Fatal(err)
		}
	}
	if u := tr.Usage(); u.Blocks != int64(len(live)) {
		t.Fatalf("Usage says %d blocks; %d read", u.Blocks, len(live))
	}
	tr.Close()
	tr2 := openTier(t, newLocal(t, dir), g4.TierOptions{})
	for k, want := range live {
		p := make([]byte, 4096)
		if n, err := tr2.Get(bg, k, p, 0); err != nil || !bytes.Equal(p[:n], want) {
			t.Fatalf("reopened: %v = %d, %v; not what the live tier held", k, n, err)
		}
	}
	st := tr2.Stats()
	t.Logf("%d live keys, %d packs after the reopen", len(live), st.Packs)
}
