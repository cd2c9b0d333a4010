package poolkv

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/ctxmem/ctxmemd/fabric/pool"
)

// TestLeases mirrors pool.TestMemLeases against the KV bucket: exclusive
// leases, growing epochs, holder-only renew and release, expiry + grace.
func TestLeases(t *testing.T) {
	ctx := context.Background()
	_, kv, _ := busWithBuckets(t)
	clk := newFakeClock()
	opts := LeaseOptions{TTL: 10 * time.Second, Grace: 2 * time.Second, Clock: clk.Now}
	a, b := NewLeases(kv, 3, "a", opts), NewLeases(kv, 3, "b", opts)
	var got []pool.Lease
	for range 3 {
		l, err := a.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if l.Holder != "a" || !l.Expires.Equal(clk.Now().Add(10*time.Second)) {
			t.Fatalf("lease %v", l)
		}
		got = append(got, l)
	}
	seen := map[uint32]bool{}
	for i, l := range got {
		if seen[l.Extent] || l.Extent >= 3 || (i > 0 && l.Epoch <= got[i-1].Epoch) {
			t.Fatalf("leases %v", got)
		}
		seen[l.Extent] = true
	}
	if _, err := b.Acquire(ctx); !errors.Is(err, pool.ErrNoExtent) {
		t.Fatalf("Acquire on a full bucket: %v", err)
	}
	if _, err := a.Acquire(ctx); !errors.Is(err, pool.ErrNoExtent) {
		t.Fatalf("Acquire by the holder on a full bucket: %v", err)
	}
	// Only the holder renews or releases, and only the current epoch.
	if _, err := b.Renew(ctx, got[0]); !errors.Is(err, pool.ErrLeaseLost) {
		t.Fatalf("Renew by another host: %v", err)
	}
	stale := got[0]
	stale.Epoch--
	if _, err := a.Renew(ctx, stale); !errors.Is(err, pool.ErrLeaseLost) {
		t.Fatalf("Renew of a stale epoch: %v", err)
	}
	if err := b.Release(ctx, got[0]); !errors.Is(err, pool.ErrLeaseLost) {
		t.Fatalf("Release by another host: %v", err)
	}
	forged := got[0]
	forged.Holder = "b" // b claims a's lease as its own
	if err := b.Release(ctx, forged); !errors.Is(err, pool.ErrLeaseLost) {
		t.Fatalf("Release of a forged lease: %v", err)
	}
	// Renew extends from now and keeps the epoch, several times.
	var r0 pool.Lease
	for range 3 {
		clk.Advance(6 * time.Second)
		var err error
		r0, err = a.Renew(ctx, got[0])
		if err != nil || r0.Epoch != got[0].Epoch || r0.Extent != got[0].Extent || r0.Holder != "a" ||
			!r0.Expires.Equal(clk.Now().Add(10*time.Second)) {
			t.Fatalf("Renew: %v, %v", r0, err)
		}
	}
	// The others expired at +10 s and are free since +12 s (grace): only
	// r0 is listed, and b takes one of the two.
	list, err := a.List(ctx)
	if err != nil || len(list) != 1 || list[0] != r0 {
		t.Fatalf("List: %v, %v (want only %v)", list, err, r0)
	}
	l1, err := b.Acquire(ctx)
	if err != nil || l1.Holder != "b" || l1.Extent == r0.Extent || l1.Epoch <= got[2].Epoch {
		t.Fatalf("Acquire of an expired extent: %v, %v", l1, err)
	}
	// The old holder has lost both: renew and release fail, nothing changes.
	for _, old := range got[1:] {
		if _, err := a.Renew(ctx, old); !errors.Is(err, pool.ErrLeaseLost) {
			t.Fatalf("Renew of %v after expiry: %v", old, err)
		}
		if err := a.Release(ctx, old); !errors.Is(err, pool.ErrLeaseLost) {
			t.Fatalf("Release of %v after expiry: %v", old, err)
		}
	}
	if _, err := b.Renew(ctx, l1); err != nil {
		t.Fatalf("Renew by the new holder: %v", err)
	}
	// Release frees at once; the extent comes back with a larger epoch.
	if err := a.Release(ctx, r0); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx, r0); !errors.Is(err, pool.ErrLeaseLost) {
		t.Fatalf("double Release: %v", err)
	}
	if _, err := a.Renew(ctx, r0); !errors.Is(err, pool.ErrLeaseLost) {
		t.Fatalf("Renew after Release: %v", err)
	}
	seenEpoch, taken := l1.Epoch, map[uint32]bool{l1.Extent: true}
	for range 2 { // b takes the other expired extent and r0's
		l, err := b.Acquire(ctx)
		if err != nil || l.Epoch <= seenEpoch || taken[l.Extent] {
			t.Fatalf("Acquire: %v, %v (last epoch %d, taken %v)", l, err, seenEpoch, taken)
		}
		seenEpoch, taken[l.Extent] = l.Epoch, true
	}
	if !taken[r0.Extent] {
		t.Fatalf("released extent %d not re-leased: %v", r0.Extent, taken)
	}
	if _, err := a.Acquire(ctx); !errors.Is(err, pool.ErrNoExtent) {
		t.Fatalf("Acquire on a full bucket: %v", err)
	}
	list, err = b.List(ctx)
	if err != nil || len(list) != 3 {
		t.Fatalf("List: %v, %v", list, err)
	}
	for i, l := range list {
		if l.Holder != "b" || l.Extent != uint32(i) {
			t.Fatalf("List: %v", list)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := a.Acquire(cctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire with cancelled ctx: %v", err)
	}
}

// TestLeasesGrace: with skewed clocks, a host cannot take an extent before
// expiry + grace by its own clock; once it has, the old holder (whose clock
// says the lease is still live) gets ErrLeaseLost from the compare-and-set.
func TestLeasesGrace(t *testing.T) {
	ctx := context.Background()
	_, kv, _ := busWithBuckets(t)
	ca, cb := newFakeClock(), newFakeClock()
	a := NewLeases(kv, 2, "a", LeaseOptions{TTL: 10 * time.Second, Grace: 3 * time.Second, Clock: ca.Now})
	b := NewLeases(kv, 2, "b", LeaseOptions{TTL: 10 * time.Second, Grace: 3 * time.Second, Clock: cb.Now})
	var la, lb [2]pool.Lease
	for i := range la {
		var err error
		if la[i], err = a.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	cb.Advance(10 * time.Second) // b: expired, within grace
	if _, err := b.Acquire(ctx); !errors.Is(err, pool.ErrNoExtent) {
		t.Fatalf("Acquire at expiry: %v", err)
	}
	cb.Advance(3*time.Second - time.Nanosecond)
	if _, err := b.Acquire(ctx); !errors.Is(err, pool.ErrNoExtent) {
		t.Fatalf("Acquire 1 ns before grace ends: %v", err)
	}
	cb.Advance(time.Nanosecond)
	for i := range lb {
		var err error
		lb[i], err = b.Acquire(ctx)
		if err != nil || lb[i].Holder != "b" || lb[i].Epoch <= la[1].Epoch {
			t.Fatalf("Acquire after grace: %v, %v (old %v)", lb[i], err, la)
		}
	}
	// a's clock lags: it thinks its leases are live and still remembers
	// their revisions, so only the compare-and-set can stop it.
	ca.Advance(5 * time.Second)
	if _, err := a.Renew(ctx, la[0]); !errors.Is(err, pool.ErrLeaseLost) {
		t.Fatalf("Renew after takeover: %v", err)
	}
	if err := a.Release(ctx, la[1]); !errors.Is(err, pool.ErrLeaseLost) {
		t.Fatalf("Release after takeover: %v", err)
	}
	if _, err := a.Renew(ctx, la[1]); !errors.Is(err, pool.ErrLeaseLost) {
		t.Fatalf("Renew after takeover: %v", err)
	}
	if err := a.Release(ctx, la[0]); !errors.Is(err, pool.ErrLeaseLost) {
		t.Fatalf("Release after takeover: %v", err)
	}
	// b still holds both.
	list, err := a.List(ctx)
	if err != nil || len(list) != 2 || list[0].Holder != "b" || list[1].Holder != "b" {
		t.Fatalf("List after failed renew/release: %v, %v", list, err)
	}
	for _, l := range lb {
		if got, err := b.Renew(ctx, l); err != nil || got.Epoch != l.Epoch {
			t.Fatalf("Renew by the new holder: %v, %v", got, err)
		}
	}
	// Expired by the holder's own clock: lost even before anyone took it.
	cb.Advance(11 * time.Second)
	if _, err := b.Renew(ctx, lb[0]); !errors.Is(err, pool.ErrLeaseLost) {
		t.Fatalf("Renew after expiry: %v", err)
	}
	if err := b.Release(ctx, lb[1]); !errors.Is(err, pool.ErrLeaseLost) {
		t.Fatalf("Release after expiry: %v", err)
	}
}

// TestLeasesOtherHandle: a second handle of the same host (a restarted
// daemon) renews and releases a lease it did not acquire, and a renewal
// whose write landed without its reply reaching the host is not mistaken
// for a takeover.
func TestLeasesOtherHandle(t *testing.T) {
	ctx := context.Background()
	_, kv, _ := busWithBuckets(t)
	clk := newFakeClock()
	opts := LeaseOptions{TTL: 10 * time.Second, Clock: clk.Now}
	a1 := NewLeases(kv, 2, "a", opts)
	l, err := a1.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a2 := NewLeases(kv, 2, "a", opts)
	clk.Advance(time.Second)
	r, err := a2.Renew(ctx, l)
	if err != nil || r.Epoch != l.Epoch {
		t.Fatalf("Renew through another handle: %v, %v", r, err)
	}
	// a1's remembered revision is now stale: its renewal conflicts, re-reads
	// the key, finds its own lease and succeeds.
	clk.Advance(time.Second)
	r, err = a1.Renew(ctx, l)
	if err != nil || r.Epoch != l.Epoch || !r.Expires.Equal(clk.Now().Add(10*time.Second)) {
		t.Fatalf("Renew after an unseen write of the same lease: %v, %v", r, err)
	}
	// The value now carries the epoch explicitly; List reports it.
	list, err := a2.List(ctx)
	if err != nil || len(list) != 1 || list[0] != r {
		t.Fatalf("List: %v, %v (want %v)", list, err, r)
	}
	if err := a2.Release(ctx, l); err != nil {
		t.Fatalf("Release through another handle: %v", err)
	}
	if _, err := a1.Renew(ctx, l); !errors.Is(err, pool.ErrLeaseLost) {
		t.Fatalf("Renew after Release by another handle: %v", err)
	}
}

// TestLeasesMalformed: garbage in a lease key is taken over (logged); a
// lease of a newer schema is left alone; keys outside the extent range
// and foreign keys are ignored.
func TestLeasesMalformed(t *testing.T) {
	ctx := context.Background()
	_, kv, _ := busWithBuckets(t)
	log, buf := newLog()
	newer, _ := msgpack.Marshal(map[string]any{"v": 2, "holder": "z"})
	for k, v := range map[string][]byte{
		"extent.0":  []byte("not msgpack \xff\x00"),
		"extent.1":  newer,
		"extent.2":  nil,
		"extent.9":  mustLease(t, leaseValue{Holder: "z", Expires: time.Now().Add(time.Hour).UnixNano()}),
		"extent.01": mustLease(t, leaseValue{Holder: "z", Expires: time.Now().Add(time.Hour).UnixNano()}),
		"other":     []byte("x"),
	} {
		if _, err := kv.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	a := NewLeases(kv, 3, "a", LeaseOptions{Log: log})
	got := map[uint32]bool{}
	for range 2 {
		l, err := a.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got[l.Extent] = true
	}
	if !got[0] || !got[2] {
		t.Fatalf("acquired %v, want extents 0 and 2", got)
	}
	if _, err := a.Acquire(ctx); !errors.Is(err, pool.ErrNoExtent) {
		t.Fatalf("Acquire with a newer-schema lease in the way: %v", err)
	}
	list, err := a.List(ctx)
	if err != nil || len(list) != 2 || list[0].Extent != 0 || list[1].Extent != 2 {
		t.Fatalf("List: %v, %v", list, err)
	}
	for _, want := range []string{"malformed pool lease; taking the extent over", "newer schema", "malformed pool lease skipped"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, buf)
		}
	}
}

func mustLease(t *testing.T, v leaseValue) []byte {
	t.Helper()
	b, err := encodeLease(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestLeasesRace: two hosts, each with several goroutines, race for a
// random number of extents: every extent is won exactly once; then they
// churn (acquire, hold, release) and a shared ownership table proves no
// two holders overlap and epochs only grow per extent.
func TestLeasesRace(t *testing.T) {
	ctx := context.Background()
	emb, kv, _ := busWithBuckets(t)
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	n := uint32(3 + rng.IntN(10)) // 3..12: below and above probeLimit
	t.Logf("seed %d, %d extents", seed, n)
	hosts := []*Leases{
		NewLeases(kv, n, "a", LeaseOptions{}),
		// Host b has its own connection.
		NewLeases(mustKV(t, connect(t, emb, ""), kv.Bucket()), n, "b", LeaseOptions{}),
	}
	const perHost = 4

	// Phase 1: fill.
	var mu sync.Mutex
	won := map[uint32]pool.Lease{}
	epochs := map[uint64]bool{}
	var wg sync.WaitGroup
	errc := make(chan error, 2*perHost)
	for _, h := range hosts {
		for range perHost {
			wg.Go(func() {
				for {
					l, err := h.Acquire(ctx)
					if errors.Is(err, pool.ErrNoExtent) {
						return
					}
					if err != nil {
						errc <- err
						return
					}
					mu.Lock()
					if prev, dup := won[l.Extent]; dup || epochs[l.Epoch] {
						errc <- fmt.Errorf("extent %d won twice: %v and %v", l.Extent, prev, l)
					}
					won[l.Extent], epochs[l.Epoch] = l, true
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if len(won) != int(n) {
		t.Fatalf("%d of %d extents leased", len(won), n)
	}
	list, err := hosts[0].List(ctx)
	if err != nil || len(list) != int(n) {
		t.Fatalf("List: %v, %v", list, err)
	}
	for _, l := range list {
		if l != won[l.Extent] {
			t.Fatalf("List has %v, Acquire returned %v", l, won[l.Extent])
		}
	}
	for _, l := range won {
		h := hosts[0]
		if l.Holder == "b" {
			h = hosts[1]
		}
		if err := h.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
	}

	// Phase 2: churn.
	owner := make([]string, n)
	lastEpoch := make([]uint64, n)
	rounds := 12
	errc = make(chan error, 2*perHost)
	for hi, h := range hosts {
		for g := range perHost {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(seed, uint64(2+hi*perHost+g)))
				me := fmt.Sprintf("%s/%d", h.host, g)
				for i := 0; i < rounds; {
					l, err := h.Acquire(ctx)
					if errors.Is(err, pool.ErrNoExtent) {
						time.Sleep(time.Millisecond)
						continue
					}
					if err != nil {
						errc <- err
						return
					}
					i++
					mu.Lock()
					if owner[l.Extent] != "" || l.Epoch <= lastEpoch[l.Extent] {
						errc <- fmt.Errorf("%s got %v while %q holds it (last epoch %d)", me, l, owner[l.Extent], lastEpoch[l.Extent])
						mu.Unlock()
						return
					}
					owner[l.Extent], lastEpoch[l.Extent] = me, l.Epoch
					mu.Unlock()
					if r.IntN(2) == 0 {
						if _, err := h.Renew(ctx, l); err != nil {
							errc <- fmt.Errorf("renew %v: %w", l, err)
							return
						}
					}
					time.Sleep(time.Duration(r.IntN(500)) * time.Microsecond)
					mu.Lock()
					owner[l.Extent] = ""
					mu.Unlock()
					if err := h.Release(ctx, l); err != nil {
						errc <- fmt.Errorf("release %v: %w", l, err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if list, err := hosts[1].List(ctx); err != nil || len(list) != 0 {
		t.Fatalf("List after churn: %v, %v", list, err)
	}
}

// mustKV opens bucket through nc.
func mustKV(t testing.TB, nc *nats.Conn, bucket string) jetstream.KeyValue {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(context.Background(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}
