package g35

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/ctxmem/ctxmemd/fabric/pool"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// newTiers returns two hosts' tiers over one pool file.
func newTiers(t *testing.T) (a, b *Tier) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "pool.img")
	if _, err := pool.Format(path, pool.FormatOptions{Size: 16 << 20, ExtentSize: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	leases := pool.NewMemLeases(15, pool.MemLeaseOptions{})
	mk := func(host string) *Tier {
		p, err := pool.Open(path, pool.OpenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		w, err := pool.NewWriter(context.Background(), p, leases.Leaser(host), pool.WriterOptions{Host: host})
		if err != nil {
			t.Fatal(err)
		}
		tr := New(p, w, Options{})
		t.Cleanup(func() { tr.Close() })
		return tr
	}
	return mk("a"), mk("b")
}

func TestPutGetAliasAcrossHosts(t *testing.T) {
	ctx := context.Background()
	a, b := newTiers(t)
	ka := tier.Key{Namespace: "ns", Object: 7, Index: 2, Gen: 1}
	data := bytes.Repeat([]byte("pool"), 20000)
	if err := a.Put(ctx, ka, data); err != nil {
		t.Fatal(err)
	}
	ref, ok := a.Location(ka)
	if !ok {
		t.Fatal("no location after Put")
	}
	got := make([]byte, len(data))
	if n, err := a.Get(ctx, ka, got, 0); err != nil || n != len(data) || !bytes.Equal(got, data) {
		t.Fatalf("own get: n=%d err=%v", n, err)
	}
	// Host b reads the record under its own key through an alias.
	kb := tier.Key{Namespace: "ns", Object: 99, Index: 2, Gen: 1}
	if _, err := b.Get(ctx, kb, got, 0); !errors.Is(err, tier.ErrNotFound) {
		t.Fatalf("get without alias: %v", err)
	}
	b.Alias(kb, ref)
	clear(got)
	if n, err := b.Get(ctx, kb, got[:100], 1000); err != nil || n != 100 || !bytes.Equal(got[:100], data[1000:1100]) {
		t.Fatalf("aliased get at an offset: n=%d err=%v", n, err)
	}
	// An alias to a record under another key misses (header check).
	b.Alias(kb, Ref{Key: tier.Key{Namespace: "ns", Object: 8, Index: 2, Gen: 1}, Loc: ref.Loc})
	if _, err := b.Get(ctx, kb, got, 0); err == nil {
		t.Fatal("a record of another key was served")
	}
	// Bypass: gets miss, puts are refused.
	a.SetBypass(true)
	if a.Healthy() {
		t.Fatal("healthy in bypass")
	}
	if _, err := a.Get(ctx, ka, got, 0); !errors.Is(err, tier.ErrNotFound) {
		t.Fatalf("get in bypass: %v", err)
	}
	if err := a.Put(ctx, ka, data); !errors.Is(err, tier.ErrUnavailable) {
		t.Fatalf("put in bypass: %v", err)
	}
	a.SetBypass(false)
	// The mismatched alias read was reported stale.
	if e := <-b.Events(); e.Kind != EventStale || e.Key != kb {
		t.Fatalf("event %+v; want EventStale of %v", e, kb)
	}
	// Deleting an own block emits EventDeleted (b deleting its alias does
	// not); forgetting an extent drops it.
	b.Alias(kb, ref)
	if err := b.Delete(ctx, kb); err != nil {
		t.Fatal(err)
	}
	if err := a.Delete(ctx, ka); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-a.Events():
		if e.Kind != EventDeleted || e.Key != ka {
			t.Fatalf("event %+v; want EventDeleted of %v", e, ka)
		}
	default:
		t.Fatal("no event for a deleted own block")
	}
	if len(b.Events()) != 0 {
		t.Fatal("deleting an alias emitted an event")
	}
	k2 := tier.Key{Namespace: "ns", Object: 7, Index: 3, Gen: 1}
	if err := a.Put(ctx, k2, data[:5000]); err != nil {
		t.Fatal(err)
	}
	r2, _ := a.Location(k2)
	if keys := a.ForgetExtent(r2.Loc.Extent); len(keys) != 1 || keys[0] != k2 {
		t.Fatalf("ForgetExtent returned %v", keys)
	}
	if _, err := a.Stat(ctx, k2); !errors.Is(err, tier.ErrNotFound) {
		t.Fatalf("stat after ForgetExtent: %v", err)
	}
	if u := a.Usage(); u.Blocks != 0 || u.CapacityBytes != 15<<20 {
		t.Fatalf("usage %+v", u)
	}
	if len(a.ExtentUse()) == 0 {
		t.Fatal("no extent use recorded")
	}
}

func TestCorruptRecordIsAMissAndReported(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "pool.img")
	if _, err := pool.Format(path, pool.FormatOptions{Size: 8 << 20, ExtentSize: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	p, err := pool.Open(path, pool.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := pool.NewWriter(ctx, p, pool.NewMemLeases(7, pool.MemLeaseOptions{}).Leaser("a"), pool.WriterOptions{Host: "a"})
	if err != nil {
		t.Fatal(err)
	}
	tr := New(p, w, Options{EventBuffer: 1})
	defer tr.Close()
	k := tier.Key{Namespace: "ns", Object: 1, Index: 0, Gen: 1}
	data := bytes.Repeat([]byte{0xab}, 8192)
	if err := tr.Put(ctx, k, data); err != nil {
		t.Fatal(err)
	}
	ref, _ := tr.Location(k)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Flip one payload byte (the record header is the first 4 KiB).
	if _, err := f.WriteAt([]byte{0x00}, ref.Loc.Offset+4096+100); err != nil {
		t.Fatal(err)
	}
	f.Close()
	got := make([]byte, len(data))
	if _, err := tr.Get(ctx, k, got, 0); !errors.Is(err, tier.ErrCorrupt) {
		t.Fatalf("read of a corrupt record: %v, want ErrCorrupt", err)
	}
	if bytes.Contains(got, []byte{0xab}) {
		t.Fatal("bytes of the corrupt record reached the caller")
	}
	if e := <-tr.Events(); e.Kind != EventStale || e.Key != k || !errors.Is(e.Err, tier.ErrCorrupt) {
		t.Fatalf("event %+v; want EventStale of %v", e, k)
	}
	// Unread events past the buffer are dropped and counted; the tier
	// never blocks on its reader.
	for i := uint32(1); i <= 2; i++ {
		ki := tier.Key{Namespace: "ns", Object: 1, Index: i, Gen: 1}
		if err := tr.Put(ctx, ki, data); err != nil {
			t.Fatal(err)
		}
		if err := tr.Delete(ctx, ki); err != nil {
			t.Fatal(err)
		}
	}
	if len(tr.Events()) != 1 || tr.DroppedEvents() != 1 {
		t.Fatalf("%d events queued, %d dropped; want 1 and 1", len(tr.Events()), tr.DroppedEvents())
	}
	if _, err := tr.Stat(ctx, k); !errors.Is(err, tier.ErrNotFound) {
		t.Fatalf("the corrupt record is still mapped: %v", err)
	}
}

// TestCancelledGetKeepsRecord: a read that is cancelled is an error of
// that read, not a record that stopped matching: the record stays and the
// next read gets the bytes.
func TestCancelledGetKeepsRecord(t *testing.T) {
	a, _ := newTiers(t)
	k := tier.Key{Namespace: "ns", Object: 3, Index: 0, Gen: 1}
	data := bytes.Repeat([]byte("kept"), 4096)
	if err := a.Put(context.Background(), k, data); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	got := make([]byte, len(data))
	if _, err := a.Get(ctx, k, got, 0); err == nil || errors.Is(err, tier.ErrNotFound) {
		t.Fatalf("cancelled get: %v, want the context error", err)
	}
	if _, ok := a.Location(k); !ok {
		t.Fatal("record forgotten after a cancelled read")
	}
	if n, err := a.Get(context.Background(), k, got, 0); err != nil || n != len(data) || !bytes.Equal(got, data) {
		t.Fatalf("read after the cancelled one: n=%d err=%v", n, err)
	}
}
