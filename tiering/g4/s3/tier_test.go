package s3_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/g4"
	"github.com/ctxmem/ctxmemd/tiering/g4/s3"
	"github.com/ctxmem/ctxmemd/tiering/g4/s3/s3test"
	"github.com/ctxmem/ctxmemd/tiering/tier"
	"github.com/ctxmem/ctxmemd/tiering/tiertest"
)

// dirPrefix maps a tiertest directory to a store prefix, so reopening the
// same directory reopens the same objects.
func dirPrefix(dir string) string {
	h := fnv.New64a()
	h.Write([]byte(dir))
	return fmt.Sprintf("tt/%016x", h.Sum64())
}

// openTier opens a G4 tier over a new S3 store with prefix on srv.
func openTier(t testing.TB, srv *s3test.Server, prefix string, topts g4.TierOptions) *g4.Tier {
	t.Helper()
	tr, err := g4.NewTier(context.Background(), newStore(t, serverOptions(srv, prefix)), topts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

// blockFile is the versitygw backing file of block k of a tier with the
// default block prefix over a store with prefix.
func blockFile(srv *s3test.Server, prefix string, k tier.Key) string {
	return srv.ObjectPath(prefix + "/" + g4.BlockName(g4.DefaultPrefix, k))
}

// TestTierConformance runs the tier suite on g4.NewTier over S3; Corrupt
// flips the last payload byte in versitygw's backing file.
func TestTierConformance(t *testing.T) {
	srv := s3test.StartServer(t)
	open := func(capacity int64) func(t *testing.T, dir string) tier.Tier {
		return func(t *testing.T, dir string) tier.Tier {
			tr, err := g4.NewTier(context.Background(), newStore(t, serverOptions(srv, dirPrefix(dir))), g4.TierOptions{Capacity: capacity})
			if err != nil {
				t.Fatal(err)
			}
			return tr
		}
	}
	tiertest.Run(t, tiertest.Harness{
		Open: open(0),
		Corrupt: func(t *testing.T, dir string, k tier.Key) error {
			p := blockFile(srv, dirPrefix(dir), k)
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			b[len(b)-1] ^= 0x01
			return os.WriteFile(p, b, 0o644)
		},
		OpenSmall:     open(1 << 20),
		SmallCapacity: 1 << 20,
		Reclaims:      false,
	})
}

// TestTierCorruptHeader: a damaged header in the server's file is a
// header error, the object is deleted from the server, never wrong bytes.
func TestTierCorruptHeader(t *testing.T) {
	srv := s3test.StartServer(t)
	tr := openTier(t, srv, "hdr", g4.TierOptions{})
	k := tier.Key{Namespace: "ns", Object: 9, Index: 2, Gen: 3}
	mustPutBlock(t, tr, k, tiertest.Pattern(k, 70_000, 0))
	p := blockFile(srv, "hdr", k)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[10] ^= 0x40 // inside key.Object
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if n, err := tr.Get(bg, k, make([]byte, 100), 0); !errors.Is(err, tier.ErrCorrupt) || n != 0 {
		t.Fatalf("Get = %d, %v; want 0, ErrCorrupt", n, err)
	}
	if s := tr.Stats(); s.HeaderErrors != 1 || s.Quarantined != 1 {
		t.Fatalf("Stats = %+v", s)
	}
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("quarantined object still on the server: %v", err)
	}
	if _, err := tr.Get(bg, k, make([]byte, 100), 0); !errors.Is(err, tier.ErrNotFound) {
		t.Fatalf("Get after quarantine = %v", err)
	}
}

// TestTierAwkwardNamespaces: namespaces with spaces, %, +, '/', unicode
// and the empty one round-trip through object names, and a reopened tier
// lists exactly the blocks written.
func TestTierAwkwardNamespaces(t *testing.T) {
	srv := s3test.StartServer(t)
	tr := openTier(t, srv, "ns", g4.TierOptions{})
	want := map[tier.Key][]byte{}
	for i, ns := range []string{"sp ace", "per%cent", "%", "plus+sign", "ünï/日本 😀", "", "..", "a/../b", "x%2Fy"} {
		for idx := range 2 {
			k := tier.Key{Namespace: ns, Object: uint64(i), Index: uint32(idx), Gen: 1}
			want[k] = tiertest.Pattern(k, 1+i*1000+idx, 0)
			mustPutBlock(t, tr, k, want[k])
		}
	}
	tr2 := openTier(t, srv, "ns", g4.TierOptions{})
	got := map[tier.Key]int64{}
	if err := tr2.Range(context.Background(), func(k tier.Key, n int64) bool { got[k] = n; return true }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("reopened tier lists %d blocks; want %d: %v", len(got), len(want), got)
	}
	for k, d := range want {
		if got[k] != int64(len(d)) {
			t.Fatalf("block %v: listed length %d; want %d", k, got[k], len(d))
		}
		p := make([]byte, len(d))
		if n, err := tr2.Get(bg, k, p, 0); err != nil || n != len(d) || !bytes.Equal(p, d) {
			t.Fatalf("Get(%v) = %d, %v", k, n, err)
		}
	}
}

// TestTierExpire: the TTL sweeper works from S3 listing times.
func TestTierExpire(t *testing.T) {
	srv := s3test.StartServer(t)
	tr := openTier(t, srv, "exp", g4.TierOptions{})
	for i := range 5 {
		k := tier.Key{Namespace: "e", Object: 1, Index: uint32(i), Gen: 1}
		mustPutBlock(t, tr, k, tiertest.Pattern(k, 4096, 0))
	}
	if n, err := tr.ExpireBefore(bg, time.Now().Add(-time.Hour)); err != nil || n != 0 {
		t.Fatalf("ExpireBefore(an hour ago) = %d, %v; want 0", n, err)
	}
	if n, err := tr.ExpireBefore(bg, time.Now().Add(time.Minute)); err != nil || n != 5 {
		t.Fatalf("ExpireBefore(future) = %d, %v; want 5", n, err)
	}
	if u := tr.Usage(); u.Blocks != 0 {
		t.Fatalf("Usage after expiry = %+v", u)
	}
	if _, err := os.Stat(srv.ObjectPath("exp/" + g4.BlockName(g4.DefaultPrefix, tier.Key{Namespace: "e", Object: 1, Gen: 1}))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("expired object still on the server: %v", err)
	}
}

func mustPutBlock(t testing.TB, tr tier.Tier, k tier.Key, data []byte) {
	t.Helper()
	if err := tr.Put(bg, k, data); err != nil {
		t.Fatalf("Put(%v): %v", k, err)
	}
}

// TestTierPacks: on S3, a pack of 64 blocks is one PUT, a reopened tier
// rebuilds it from the listing alone, members read in order take a few
// ranged GETs (read-ahead, plus the header once), a byte flipped in one
// member's bytes on the server makes that member alone corrupt, and the
// pack goes with its last live member.
func TestTierPacks(t *testing.T) {
	srv := s3test.StartServer(t)
	tr := openTier(t, srv, "pack", g4.TierOptions{})
	const n, bs = 64, 16 << 10
	keys := make([]tier.Key, n)
	blocks := make([][]byte, n)
	for i := range keys {
		keys[i] = tier.Key{Namespace: "p", Object: 3, Index: uint32(i), Gen: 2}
		blocks[i] = tiertest.Pattern(keys[i], bs, 0)
	}
	st := tr.Store().(*s3.Store)
	before := st.RequestCounts()
	if got, err := tr.PutPack(bg, keys, blocks); err != nil || got != n {
		t.Fatalf("PutPack = %d, %v", got, err)
	}
	if d := st.RequestCounts().Put - before.Put; d != 1 {
		t.Fatalf("PutPack of %d blocks sent %d PUTs; want 1", n, d)
	}
	tr2 := openTier(t, srv, "pack", g4.TierOptions{})
	st2 := tr2.Store().(*s3.Store)
	if r := st2.RequestCounts(); r.Get != 0 || r.Head != 0 || r.List == 0 {
		t.Fatalf("open sent %+v; want listings only", r)
	}
	if r := tr2.Requests(); r != st2.RequestCounts() {
		t.Fatalf("tier Requests %+v, store counts %+v", r, st2.RequestCounts())
	}
	var names []string
	if err := st2.List(bg, g4.DefaultPrefix+"/", func(a g4.ObjectAttrs) bool { names = append(names, a.Name); return true }); err != nil {
		t.Fatal(err)
	}
	if len(names) != 1 {
		t.Fatalf("objects: %v", names)
	}
	file := srv.ObjectPath("pack/" + names[0])
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-(n-9)*bs-1] ^= 0x10 // the last byte of block 8
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	before = st2.RequestCounts()
	for i, k := range keys {
		p := make([]byte, bs)
		got, err := tr2.Get(bg, k, p, 0)
		if i == 8 {
			if !errors.Is(err, tier.ErrCorrupt) || got != 0 {
				t.Fatalf("Get of the damaged member = %d, %v; want ErrCorrupt", got, err)
			}
			continue
		}
		if err != nil || !bytes.Equal(p, blocks[i]) {
			t.Fatalf("Get(%v) = %d, %v", k, got, err)
		}
	}
	// In order, Gets read ahead (windows of 2, 4, 8, ... members): the
	// header and 7 ranged GETs, the damaged member read alone.
	if d := st2.RequestCounts().Get - before.Get; d != 8 {
		t.Fatalf("%d GETs for %d members read in order; want 8", d, n)
	}
	for _, k := range keys {
		if err := tr2.Delete(bg, k); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("pack still on the server after its last member died: %v", err)
	}
}
