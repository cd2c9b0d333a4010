package g4_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/g4"
	"github.com/ctxmem/ctxmemd/tiering/tier"
	"github.com/ctxmem/ctxmemd/tiering/tiertest"
)

func openTier(t testing.TB, store g4.ObjectStore, opts g4.TierOptions) *g4.Tier {
	t.Helper()
	tr, err := g4.NewTier(context.Background(), store, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

// blockPath is the file that holds block k of a Tier over Local on dir
// with the default prefix.
func blockPath(t testing.TB, dir string, k tier.Key) string {
	t.Helper()
	p, err := newLocal(t, dir).Path(g4.BlockName(g4.DefaultPrefix, k))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConformance(t *testing.T) {
	tiertest.Run(t, tiertest.Harness{
		Open: func(t *testing.T, dir string) tier.Tier {
			tr, err := g4.NewTier(context.Background(), newLocal(t, dir), g4.TierOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return tr
		},
		// Flip the last payload byte of the stored object.
		Corrupt: func(t *testing.T, dir string, k tier.Key) error {
			p := blockPath(t, dir, k)
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			b[len(b)-1] ^= 0x01
			return os.WriteFile(p, b, 0o600)
		},
		OpenSmall: func(t *testing.T, dir string) tier.Tier {
			tr, err := g4.NewTier(context.Background(), newLocal(t, dir), g4.TierOptions{Capacity: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			return tr
		},
		SmallCapacity: 1 << 20,
		Reclaims:      false,
	})
}

func key(obj uint64, idx uint32) tier.Key {
	return tier.Key{Namespace: "ns", Object: obj, Index: idx, Gen: 1}
}

func get(tr tier.Tier, k tier.Key, p []byte, off int64) (int, error) {
	return tr.Get(bg, k, p, off)
}

func mustPutBlock(t testing.TB, tr tier.Tier, k tier.Key, data []byte) {
	t.Helper()
	if err := tr.Put(bg, k, data); err != nil {
		t.Fatal(err)
	}
}

func expectGone(t *testing.T, tr *g4.Tier, dir string, k tier.Key) {
	t.Helper()
	// Stat first: it must not take a Get miss to drop the index entry.
	if _, err := tr.Stat(context.Background(), k); !errors.Is(err, tier.ErrNotFound) {
		t.Fatalf("Stat after quarantine = %v; want ErrNotFound", err)
	}
	if _, err := os.Stat(blockPath(t, dir, k)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("quarantined object still stored: %v", err)
	}
	if _, err := get(tr, k, make([]byte, 10), 0); !errors.Is(err, tier.ErrNotFound) {
		t.Fatalf("Get after quarantine = %v; want ErrNotFound", err)
	}
}

// rewrite applies f to the stored object file of k.
func rewrite(t *testing.T, dir string, k tier.Key, f func([]byte) []byte) {
	t.Helper()
	p := blockPath(t, dir, k)
	b, err := os.ReadFile(p)
	must(t, err)
	must(t, os.WriteFile(p, f(b), 0o600))
}

func TestCorruptPayload(t *testing.T) {
	dir := t.TempDir()
	tr := openTier(t, newLocal(t, dir), g4.TierOptions{})
	k, ok := key(1, 0), key(1, 1)
	data := tiertest.Pattern(k, 100_000, 0)
	mustPutBlock(t, tr, k, data)
	mustPutBlock(t, tr, ok, tiertest.Pattern(ok, 100_000, 0))
	// Flip one byte far from the range read below: the whole block is
	// verified, not just the bytes returned.
	rewrite(t, dir, k, func(b []byte) []byte { b[len(b)-50_000] ^= 0x80; return b })
	p := make([]byte, 100)
	n, err := get(tr, k, p, 4096)
	if !errors.Is(err, tier.ErrCorrupt) || n != 0 {
		t.Fatalf("Get of a corrupted block = %d, %v; want 0, ErrCorrupt", n, err)
	}
	if s := tr.Stats(); s.CRCErrors != 1 || s.HeaderErrors != 0 || s.Quarantined != 1 {
		t.Fatalf("Stats = %+v; want 1 CRC error, 1 quarantined", s)
	}
	expectGone(t, tr, dir, k)
	if u := tr.Usage(); u.Blocks != 1 || u.UsedBytes != 100_000 {
		t.Fatalf("Usage = %+v", u)
	}
	got := make([]byte, 100_000)
	if n, err := get(tr, ok, got, 0); err != nil || n != len(got) || !bytes.Equal(got, tiertest.Pattern(ok, 100_000, 0)) {
		t.Fatalf("intact neighbour: %d, %v", n, err)
	}
}

func TestHeaderOfAnotherBlock(t *testing.T) {
	for _, other := range []tier.Key{
		{Namespace: "ns", Object: 2, Index: 1, Gen: 1}, // another index
		{Namespace: "ns", Object: 2, Index: 0, Gen: 2}, // another generation
		{Namespace: "nt", Object: 2, Index: 0, Gen: 1}, // another namespace
		{Namespace: "ns", Object: 3, Index: 0, Gen: 1}, // another object
	} {
		dir := t.TempDir()
		tr := openTier(t, newLocal(t, dir), g4.TierOptions{})
		k := tier.Key{Namespace: "ns", Object: 2, Index: 0, Gen: 1}
		mustPutBlock(t, tr, k, tiertest.Pattern(k, 5000, 0))
		mustPutBlock(t, tr, other, tiertest.Pattern(other, 5000, 0))
		// The object of k now holds other's header and (valid) payload.
		b, err := os.ReadFile(blockPath(t, dir, other))
		must(t, err)
		rewrite(t, dir, k, func([]byte) []byte { return b })
		if n, err := get(tr, k, make([]byte, 5000), 0); !errors.Is(err, tier.ErrCorrupt) || n != 0 {
			t.Fatalf("Get(%v) holding %v's object = %d, %v; want ErrCorrupt", k, other, n, err)
		}
		if s := tr.Stats(); s.HeaderErrors != 1 || s.CRCErrors != 0 || s.Quarantined != 1 {
			t.Fatalf("Stats = %+v; want 1 header error", s)
		}
		expectGone(t, tr, dir, k)
		if n, err := get(tr, other, make([]byte, 5000), 0); err != nil || n != 5000 {
			t.Fatalf("Get(%v) = %d, %v", other, n, err)
		}
	}
}

func TestDamagedObjects(t *testing.T) {
	k := key(4, 0)
	data := tiertest.Pattern(k, 9000, 0)
	hdrAt := func(b []byte) int { return bytes.Index(b, []byte("CXG4")) }
	for name, damage := range map[string]func([]byte) []byte{
		"header gen byte":   func(b []byte) []byte { b[hdrAt(b)+16] ^= 1; return b },
		"header length":     func(b []byte) []byte { b[hdrAt(b)+28]++; return b },
		"header crc":        func(b []byte) []byte { b[hdrAt(b)+60] ^= 4; return b },
		"magic":             func(b []byte) []byte { b[hdrAt(b)] = 'X'; return b },
		"truncated payload": func(b []byte) []byte { return b[:len(b)-1] },
		"truncated header":  func(b []byte) []byte { return b[:hdrAt(b)+30] },
		"trailing garbage":  func(b []byte) []byte { return append(b, 0) },
		"payload crc field": func(b []byte) []byte { b[hdrAt(b)+32] ^= 1; return b },
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			tr := openTier(t, newLocal(t, dir), g4.TierOptions{})
			mustPutBlock(t, tr, k, data)
			rewrite(t, dir, k, damage)
			if n, err := get(tr, k, make([]byte, len(data)), 0); !errors.Is(err, tier.ErrCorrupt) || n != 0 {
				t.Fatalf("Get = %d, %v; want ErrCorrupt", n, err)
			}
			if s := tr.Stats(); s.HeaderErrors+s.CRCErrors != 1 || s.Quarantined != 1 {
				t.Fatalf("Stats = %+v", s)
			}
			expectGone(t, tr, dir, k)
		})
	}
}

func TestOddNamespaces(t *testing.T) {
	dir := t.TempDir()
	tr := openTier(t, newLocal(t, dir), g4.TierOptions{})
	keys := []tier.Key{
		{Namespace: "", Object: 1}, {Namespace: ".", Object: 1}, {Namespace: "..", Object: 1},
		{Namespace: "a/b", Object: 1}, {Namespace: "../../etc", Object: 1}, {Namespace: "100% é", Object: 1},
		{Namespace: "x\xff", Object: 1},
	}
	for i, k := range keys {
		mustPutBlock(t, tr, k, tiertest.Pattern(k, 100+i, 0))
	}
	tr2 := openTier(t, newLocal(t, dir), g4.TierOptions{}) // index from listing
	listed := map[tier.Key]int64{}
	must(t, tr2.Range(context.Background(), func(k tier.Key, n int64) bool { listed[k] = n; return true }))
	for i, k := range keys {
		if listed[k] != int64(100+i) {
			t.Errorf("Range: %q length %d; want %d", k.Namespace, listed[k], 100+i)
		}
		p := make([]byte, 200)
		if n, err := get(tr2, k, p, 0); err != nil || !bytes.Equal(p[:n], tiertest.Pattern(k, 100+i, 0)) {
			t.Errorf("Get(%q) = %d, %v", k.Namespace, n, err)
		}
	}
	if len(listed) != len(keys) {
		t.Errorf("Range listed %d blocks; want %d", len(listed), len(keys))
	}
}

// TestRangeRefresh: Range lists the store, so it sees blocks that another
// tier (another process or host) stored or deleted, and ignores foreign
// objects under the prefix.
func TestRangeRefresh(t *testing.T) {
	dir := t.TempDir()
	l := newLocal(t, dir)
	a := openTier(t, l, g4.TierOptions{})
	b := openTier(t, l, g4.TierOptions{})
	k1, k2 := key(5, 0), key(5, 1)
	mustPutBlock(t, a, k1, make([]byte, 1000))
	mustPutBlock(t, a, k2, make([]byte, 2000))
	for _, junk := range []string{"blocks/README", "blocks/ns/zz/0000000000000001/00000001", "other/ns/0000000000000005/0000000000000001/00000000"} {
		must(t, l.Put(bg, junk, strings.NewReader("junk"), 4, nil))
	}
	if _, err := b.Stat(context.Background(), k1); !errors.Is(err, tier.ErrNotFound) {
		t.Fatalf("b.Stat before Range = %v", err)
	}
	got := map[tier.Key]int64{}
	must(t, b.Range(context.Background(), func(k tier.Key, n int64) bool { got[k] = n; return true }))
	if len(got) != 2 || got[k1] != 1000 || got[k2] != 2000 {
		t.Fatalf("b.Range = %v", got)
	}
	if n, err := b.Stat(context.Background(), k2); err != nil || n != 2000 {
		t.Fatalf("b.Stat after Range = %d, %v", n, err)
	}
	must(t, a.Delete(bg, k1))
	must(t, b.Range(context.Background(), func(tier.Key, int64) bool { return true }))
	if u := b.Usage(); u.Blocks != 1 || u.UsedBytes != 2000 {
		t.Fatalf("b.Usage after a's delete and Range = %+v", u)
	}
	// A Get miss also drops the stale entry without a Range.
	must(t, a.Delete(bg, k2))
	if _, err := get(b, k2, make([]byte, 10), 0); !errors.Is(err, tier.ErrNotFound) {
		t.Fatalf("b.Get of a block deleted by a = %v", err)
	}
	if u := b.Usage(); u.Blocks != 0 || u.UsedBytes != 0 {
		t.Fatalf("b.Usage after a miss = %+v", u)
	}
}

func TestMaxBlockSizeOption(t *testing.T) {
	tr := openTier(t, newLocal(t, t.TempDir()), g4.TierOptions{MaxBlockSize: 8 << 20})
	k := key(6, 0)
	data := tiertest.Pattern(k, 8<<20, 0)
	mustPutBlock(t, tr, k, data)
	p := make([]byte, len(data))
	if n, err := get(tr, k, p, 0); err != nil || n != len(data) || !bytes.Equal(p, data) {
		t.Fatalf("Get of an 8 MiB block = %d, %v", n, err)
	}
	if err := tr.Put(bg, k, make([]byte, 8<<20+1)); !errors.Is(err, tier.ErrTooLarge) {
		t.Fatalf("Put over MaxBlockSize = %v", err)
	}
}

// TestExpiry stores two blocks, back-dates one object's mtime by 80 h, and
// expires with an injected clock.
func TestExpiry(t *testing.T) {
	dir := t.TempDir()
	retained := tier.Key{Namespace: "nbd-export", Object: 1, Gen: 1}
	tr := openTier(t, newLocal(t, dir), g4.TierOptions{
		Retain: func(k tier.Key) bool { return k.Namespace == "nbd-export" },
	})
	old, fresh := key(7, 0), key(7, 1)
	for _, k := range []tier.Key{old, fresh, retained} {
		mustPutBlock(t, tr, k, tiertest.Pattern(k, 4096, 0))
	}
	now := time.Now()
	for _, k := range []tier.Key{old, retained} {
		past := now.Add(-80 * time.Hour)
		must(t, os.Chtimes(blockPath(t, dir, k), past, past))
	}
	clock := now
	var sweeps []int
	s := g4.NewSweeper(tr, g4.SweeperOptions{
		Now:     func() time.Time { return clock },
		OnSweep: func(n int, err error) { must(t, err); sweeps = append(sweeps, n) },
	})
	if n, err := s.SweepOnce(bg); err != nil || n != 1 {
		t.Fatalf("sweep at now with TTL 72h = %d, %v; want 1 (the 80 h old block)", n, err)
	}
	if _, err := tr.Stat(context.Background(), old); !errors.Is(err, tier.ErrNotFound) {
		t.Fatalf("expired block Stat = %v", err)
	}
	if _, err := get(tr, old, make([]byte, 10), 0); !errors.Is(err, tier.ErrNotFound) {
		t.Fatalf("expired block Get = %v", err)
	}
	for _, k := range []tier.Key{fresh, retained} {
		if n, err := tr.Stat(context.Background(), k); err != nil || n != 4096 {
			t.Fatalf("Stat(%v) after sweep = %d, %v", k, n, err)
		}
	}
	// 73 hours later the fresh block expires too; the retained one never.
	clock = now.Add(73 * time.Hour)
	if n, err := s.SweepOnce(bg); err != nil || n != 1 {
		t.Fatalf("sweep 73 h later = %d, %v; want 1", n, err)
	}
	if u := tr.Usage(); u.Blocks != 1 {
		t.Fatalf("Usage after sweeps = %+v; want only the retained block", u)
	}
	if s := tr.Stats(); s.Expired != 2 {
		t.Fatalf("Stats.Expired = %d", s.Expired)
	}
	if len(sweeps) != 2 || sweeps[0] != 1 || sweeps[1] != 1 {
		t.Fatalf("OnSweep saw %v", sweeps)
	}
}

// TestExpiryKeepsRestoredBlock: a block stored again after the listing
// that found it old must survive (ExpireBefore re-checks under the lock).
func TestExpiryKeepsRestoredBlock(t *testing.T) {
	dir := t.TempDir()
	l := newLocal(t, dir)
	k := key(8, 0)
	hook := &listHook{ObjectStore: l}
	tr := openTier(t, hook, g4.TierOptions{})
	mustPutBlock(t, tr, k, []byte("old"))
	past := time.Now().Add(-100 * time.Hour)
	must(t, os.Chtimes(blockPath(t, dir, k), past, past))
	hook.after = func() { mustPutBlock(t, tr, k, []byte("new")) } // runs after the listing
	n, err := tr.ExpireBefore(bg, time.Now().Add(-72*time.Hour))
	if err != nil || n != 0 {
		t.Fatalf("ExpireBefore = %d, %v; want 0", n, err)
	}
	p := make([]byte, 3)
	if n, err := get(tr, k, p, 0); err != nil || string(p[:n]) != "new" {
		t.Fatalf("Get = %q, %v", p[:n], err)
	}
}

// listHook runs after once after the next List.
type listHook struct {
	g4.ObjectStore
	after func()
}

func (h *listHook) List(ctx context.Context, prefix string, fn func(g4.ObjectAttrs) bool) error {
	err := h.ObjectStore.List(ctx, prefix, fn)
	if f := h.after; f != nil {
		h.after = nil
		f()
	}
	return err
}

func TestSweeperRunStopsWithContext(t *testing.T) {
	tr := openTier(t, newLocal(t, t.TempDir()), g4.TierOptions{})
	ctx, cancel := context.WithCancel(bg)
	swept := make(chan struct{}, 100)
	s := g4.NewSweeper(tr, g4.SweeperOptions{Interval: time.Millisecond,
		OnSweep: func(int, error) { swept <- struct{}{} }})
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	<-swept
	<-swept // the timer fires again
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v; want context.Canceled", err)
	}
}

// deadStore wraps a store; when dead, every call blocks until its context
// ends, like an object store endpoint that accepts connections and never
// answers.
type deadStore struct {
	g4.ObjectStore
	dead atomic.Bool
}

func (d *deadStore) hang(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

func (d *deadStore) Put(ctx context.Context, name string, r io.Reader, size int64, meta map[string]string) error {
	if d.dead.Load() {
		return d.hang(ctx)
	}
	return d.ObjectStore.Put(ctx, name, r, size, meta)
}

func (d *deadStore) Get(ctx context.Context, name string) (io.ReadCloser, map[string]string, error) {
	if d.dead.Load() {
		return nil, nil, d.hang(ctx)
	}
	return d.ObjectStore.Get(ctx, name)
}

func (d *deadStore) Delete(ctx context.Context, name string) error {
	if d.dead.Load() {
		return d.hang(ctx)
	}
	return d.ObjectStore.Delete(ctx, name)
}

func (d *deadStore) List(ctx context.Context, prefix string, fn func(g4.ObjectAttrs) bool) error {
	if d.dead.Load() {
		return d.hang(ctx)
	}
	return d.ObjectStore.List(ctx, prefix, fn)
}

func TestDeadBackend(t *testing.T) {
	d := &deadStore{ObjectStore: newLocal(t, t.TempDir())}
	tr := openTier(t, d, g4.TierOptions{Timeout: 250 * time.Millisecond, ListTimeout: 250 * time.Millisecond})
	k := key(9, 0)
	mustPutBlock(t, tr, k, []byte("stored while alive"))
	d.dead.Store(true)
	if err := tr.Put(bg, key(9, 1), []byte("x")); !errors.Is(err, tier.ErrUnavailable) {
		t.Fatalf("Put on a dead backend = %v; want ErrUnavailable", err)
	}
	if n, err := get(tr, k, make([]byte, 100), 0); !errors.Is(err, tier.ErrUnavailable) || n != 0 {
		t.Fatalf("Get on a dead backend = %d, %v; want ErrUnavailable", n, err)
	}
	if err := tr.Delete(bg, k); !errors.Is(err, tier.ErrUnavailable) {
		t.Fatalf("Delete on a dead backend = %v; want ErrUnavailable", err)
	}
	if err := tr.Range(context.Background(), func(tier.Key, int64) bool { return true }); !errors.Is(err, tier.ErrUnavailable) {
		t.Fatalf("Range on a dead backend = %v; want ErrUnavailable", err)
	}
	if _, err := tr.ExpireBefore(bg, time.Now()); !errors.Is(err, tier.ErrUnavailable) {
		t.Fatalf("ExpireBefore on a dead backend = %v; want ErrUnavailable", err)
	}
	// The index still answers, and nothing was lost or quarantined.
	if n, err := tr.Stat(context.Background(), k); err != nil || n != 18 {
		t.Fatalf("Stat during the outage = %d, %v", n, err)
	}
	if s := tr.Stats(); s.Unavailable != 5 || s.Quarantined != 0 {
		t.Fatalf("Stats = %+v; want 5 unavailable", s)
	}
	// The caller's own cancellation is reported as such, not as an outage.
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if err := tr.Put(ctx, key(9, 2), []byte("x")); !errors.Is(err, context.Canceled) || errors.Is(err, tier.ErrUnavailable) {
		t.Fatalf("Put with a cancelled context = %v; want context.Canceled only", err)
	}
	d.dead.Store(false)
	p := make([]byte, 100)
	if n, err := get(tr, k, p, 0); err != nil || string(p[:n]) != "stored while alive" {
		t.Fatalf("Get after recovery = %q, %v", p[:n], err)
	}
}

func TestVanishedDirectory(t *testing.T) {
	dir := t.TempDir()
	l := newLocal(t, dir)
	tr := openTier(t, l, g4.TierOptions{})
	k := key(10, 0)
	mustPutBlock(t, tr, k, []byte("data"))
	must(t, os.RemoveAll(dir))
	if err := tr.Put(bg, key(10, 1), []byte("x")); !errors.Is(err, tier.ErrUnavailable) {
		t.Fatalf("Put = %v; want ErrUnavailable", err)
	}
	if _, err := get(tr, k, make([]byte, 10), 0); !errors.Is(err, tier.ErrUnavailable) {
		t.Fatalf("Get = %v; want ErrUnavailable", err)
	}
	if err := tr.Range(context.Background(), func(tier.Key, int64) bool { return true }); !errors.Is(err, tier.ErrUnavailable) {
		t.Fatalf("Range = %v; want ErrUnavailable", err)
	}
	if _, err := g4.NewTier(context.Background(), l, g4.TierOptions{}); !errors.Is(err, tier.ErrUnavailable) {
		t.Fatalf("NewTier = %v; want ErrUnavailable", err)
	}
}

func TestNewTierOptions(t *testing.T) {
	l := newLocal(t, t.TempDir())
	for _, p := range []string{"/abs", "a//b", "a/", "../x"} {
		if _, err := g4.NewTier(context.Background(), l, g4.TierOptions{Prefix: p}); err == nil {
			t.Errorf("NewTier(prefix %q) succeeded", p)
		}
	}
	tr := openTier(t, l, g4.TierOptions{Prefix: "ctxmem/g4"})
	k := key(11, 0)
	mustPutBlock(t, tr, k, []byte("x"))
	if tr.Name() != "G4" || tr.ObjectName(k) != "ctxmem/g4/ns/000000000000000b/0000000000000001/00000000" {
		t.Fatalf("Name %q, ObjectName %q", tr.Name(), tr.ObjectName(k))
	}
	if _, err := l.Head(bg, tr.ObjectName(k)); err != nil {
		t.Fatal(err)
	}
}

// getHook runs before once inside the next Get, then reports the object
// missing: a miss observed just before a concurrent Put finished.
type getHook struct {
	g4.ObjectStore
	before func()
}

func (h *getHook) Get(ctx context.Context, name string) (io.ReadCloser, map[string]string, error) {
	if f := h.before; f != nil {
		h.before = nil
		f()
		return nil, nil, g4.ErrNotExist
	}
	return h.ObjectStore.Get(ctx, name)
}

func TestMissRacingPut(t *testing.T) {
	h := &getHook{ObjectStore: newLocal(t, t.TempDir())}
	tr := openTier(t, h, g4.TierOptions{})
	k := key(12, 0)
	h.before = func() { mustPutBlock(t, tr, k, []byte("raced")) }
	if _, err := get(tr, k, make([]byte, 10), 0); !errors.Is(err, tier.ErrNotFound) {
		t.Fatalf("Get = %v; want the staged miss", err)
	}
	if n, err := tr.Stat(context.Background(), k); err != nil || n != 5 {
		t.Fatalf("a stale miss dropped the entry of a newer Put: Stat = %d, %v", n, err)
	}
}

// TestRangeRacingMutations: a Put and a Delete that finish while Range's
// listing runs must win over the listing.
func TestRangeRacingMutations(t *testing.T) {
	h := &listHook{ObjectStore: newLocal(t, t.TempDir())}
	tr := openTier(t, h, g4.TierOptions{})
	gone, added := key(13, 0), key(13, 1)
	mustPutBlock(t, tr, gone, []byte("listed, then deleted"))
	h.after = func() {
		must(t, tr.Delete(bg, gone))
		mustPutBlock(t, tr, added, []byte("put after the listing"))
	}
	listed := map[tier.Key]bool{}
	must(t, tr.Range(context.Background(), func(k tier.Key, _ int64) bool { listed[k] = true; return true }))
	if listed[gone] || !listed[added] {
		t.Fatalf("Range = %v; want %v and not %v", listed, added, gone)
	}
	if _, err := tr.Stat(context.Background(), gone); !errors.Is(err, tier.ErrNotFound) {
		t.Fatalf("Stat(deleted) = %v", err)
	}
	if u := tr.Usage(); u.Blocks != 1 || u.UsedBytes != int64(len("put after the listing")) {
		t.Fatalf("Usage = %+v", u)
	}
}
