package pool

import (
	"github.com/ctxmem/ctxmemd/internal/directio"

	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/internal/testenv"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// TestConcurrentHosts: two hosts, each with its own handle on one pool
// file and its own Writer, share an in-memory lease table and put records
// of random sizes from several goroutines each while reading each other's
// records. No two records overlap, every record stays inside one extent
// leased to its writer under its epoch, and every record reads back
// exactly from both hosts.
func TestConcurrentHosts(t *testing.T) {
	for _, pl := range places(t) {
		t.Run(pl.name, func(t *testing.T) {
			seed := uint64(time.Now().UnixNano())
			t.Logf("seed %d", seed)
			ctx := context.Background()
			const extents = 32
			p0, path := newPool(t, pl.dir, pl.buffered, extents, mib)
			pools := []*Pool{p0, openPool(t, path, pl.buffered)}
			leases := NewMemLeases(extents, MemLeaseOptions{})
			type rec struct {
				host int
				k    tier.Key
				loc  Location
				data []byte
			}
			var mu sync.Mutex
			var recs []rec
			writers := make([]*Writer, 2)
			readers := make([]*Reader, 2)
			for h := range 2 {
				name := fmt.Sprintf("host-%d", h)
				writers[h] = newWriter(t, pools[h], leases.Leaser(name), WriterOptions{Host: name})
				readers[h] = NewReader(pools[h])
			}
			const workers, perWorker = 3, 25
			errs := make(chan error, 2*workers)
			var wg sync.WaitGroup
			for h := range 2 {
				for g := range workers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						rng := rand.New(rand.NewPCG(seed, uint64(h*workers+g)))
						for i := range perWorker {
							n := 1 + rng.IntN(128*kib)
							if rng.IntN(4) == 0 {
								n = (1 + rng.IntN(32)) * pageSize // zero-copy path when aligned
							}
							data := randBytes(rng, n)
							if n%pageSize == 0 {
								a := directio.AlignedAlloc(n)
								copy(a, data)
								data = a
							}
							k := key(fmt.Sprintf("ns%d", h), uint64(g), uint32(i), seed)
							loc, err := writers[h].Put(ctx, k, data)
							if err != nil {
								errs <- err
								return
							}
							mu.Lock()
							recs = append(recs, rec{h, k, loc, data})
							other := recs[rng.IntN(len(recs))]
							mu.Unlock()
							// Read a random published record from the other host.
							dst := make([]byte, other.loc.Length)
							if n, err := readers[1-h].Get(ctx, other.k, other.loc, dst); err != nil || string(dst[:n]) != string(other.data) {
								errs <- fmt.Errorf("cross read of %v: n=%d err=%v", other.loc, n, err)
								return
							}
						}
					}()
				}
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if len(recs) != 2*workers*perWorker {
				t.Fatalf("%d records", len(recs))
			}
			// Leases: which host holds which extent under which epoch.
			held := map[uint32]Lease{}
			for h, w := range writers {
				for _, l := range w.Leases() {
					if _, dup := held[l.Extent]; dup {
						t.Fatalf("extent %d held by two writers", l.Extent)
					}
					if l.Holder != fmt.Sprintf("host-%d", h) {
						t.Fatalf("writer %d holds %v", h, l)
					}
					held[l.Extent] = l
				}
			}
			slices.SortFunc(recs, func(a, b rec) int { return int(a.loc.Offset - b.loc.Offset) })
			sb := pools[0].Superblock()
			for i, rc := range recs {
				l, ok := held[rc.loc.Extent]
				if !ok || l.Epoch != rc.loc.Epoch || l.Holder != fmt.Sprintf("host-%d", rc.host) {
					t.Fatalf("record %v of host %d: extent lease %v", rc.loc, rc.host, l)
				}
				start, end := rc.loc.Offset, rc.loc.Offset+recordLen(int(rc.loc.Length))
				if start < sb.ExtentOffset(rc.loc.Extent)+pageSize || end > sb.ExtentOffset(rc.loc.Extent)+sb.ExtentSize {
					t.Fatalf("record %v leaves its extent", rc.loc)
				}
				if i > 0 {
					prev := recs[i-1]
					if prevEnd := prev.loc.Offset + recordLen(int(prev.loc.Length)); prevEnd > start {
						t.Fatalf("records overlap: %v and %v", prev.loc, rc.loc)
					}
				}
				for _, r := range readers {
					mustGet(t, r, rc.k, rc.loc, rc.data)
				}
			}
			t.Logf("%d records in %d extents", len(recs), len(held))
		})
	}
}

// TestLeaseExpired: with renewals stopped, a writer refuses to write
// within the safety margin and reports the lease lost at expiry; a later
// Put continues in a new extent.
func TestLeaseExpired(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	p, _ := newPool(t, t.TempDir(), false, 3, mib)
	leases := NewMemLeases(3, MemLeaseOptions{TTL: 10 * time.Second, Clock: clk.Now})
	var mu sync.Mutex
	var lost []Lease
	w := newWriter(t, p, leases.Leaser("a"), WriterOptions{Host: "a", Clock: clk.Now, RenewEvery: time.Hour, Margin: time.Second,
		OnLost: func(l Lease) { mu.Lock(); lost = append(lost, l); mu.Unlock() }})
	r := NewReader(p)
	first, err := w.Put(ctx, key("ns", 1, 0, 1), []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(9500 * time.Millisecond) // inside the 1 s margin
	if loc, err := w.Put(ctx, key("ns", 2, 0, 1), []byte("two")); !errors.Is(err, ErrLeaseLost) || loc != (Location{}) {
		t.Fatalf("Put within margin: %v, %v", loc, err)
	}
	if len(lost) != 0 {
		t.Fatalf("lease reported lost before expiry: %v", lost)
	}
	clk.Advance(time.Second) // expired
	if loc, err := w.Put(ctx, key("ns", 2, 0, 1), []byte("two")); !errors.Is(err, ErrLeaseLost) || loc != (Location{}) {
		t.Fatalf("Put after expiry: %v, %v", loc, err)
	}
	if len(lost) != 1 || lost[0].Extent != first.Extent || lost[0].Epoch != first.Epoch {
		t.Fatalf("OnLost: %v", lost)
	}
	second, err := w.Put(ctx, key("ns", 2, 0, 1), []byte("two"))
	if err != nil {
		t.Fatal(err)
	}
	if second.Extent == first.Extent || second.Epoch <= first.Epoch {
		t.Fatalf("new lease %v after %v", second, first)
	}
	mustGet(t, r, key("ns", 2, 0, 1), second, []byte("two"))
}

// TestLeaseLostDuringWrite: a lease that lapses, or is taken by another
// host, while a record is being written makes Put fail with ErrLeaseLost
// and return no Location.
func TestLeaseLostDuringWrite(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	p, path := newPool(t, t.TempDir(), false, 1, mib)
	pb := openPool(t, path, false)
	leases := NewMemLeases(1, MemLeaseOptions{TTL: 10 * time.Second, Clock: clk.Now})
	w := newWriter(t, p, leases.Leaser("a"), WriterOptions{Host: "a", Clock: clk.Now, RenewEvery: time.Hour, Margin: time.Second})
	wb := newWriter(t, pb, leases.Leaser("b"), WriterOptions{Host: "b", Clock: clk.Now, RenewEvery: time.Hour, Margin: time.Second})
	if _, err := w.Put(ctx, key("ns", 1, 0, 1), []byte("one")); err != nil {
		t.Fatal(err)
	}
	w.afterWrite = func() { clk.Advance(9 * time.Second) } // 1 s + 9 s = expiry
	clk.Advance(time.Second)
	if loc, err := w.Put(ctx, key("ns", 2, 0, 1), []byte("two")); !errors.Is(err, ErrLeaseLost) || loc != (Location{}) {
		t.Fatalf("Put whose lease lapsed mid-write: %v, %v", loc, err)
	}
	// Another host takes the extent while A's record is in flight.
	w.afterWrite = nil
	if _, err := w.Put(ctx, key("ns", 3, 0, 1), []byte("x")); err != nil {
		t.Fatal(err) // new lease of the same (only) extent
	}
	w.afterWrite = func() {
		clk.Advance(11 * time.Second)
		if _, err := wb.Put(ctx, key("ns", 4, 0, 1), []byte("b")); err != nil {
			t.Error(err)
		}
	}
	if loc, err := w.Put(ctx, key("ns", 5, 0, 1), []byte("five")); !errors.Is(err, ErrLeaseLost) || loc != (Location{}) {
		t.Fatalf("Put whose extent was taken mid-write: %v, %v", loc, err)
	}
}

// TestRenewLoop: the writer's own loop keeps its leases alive across many
// TTLs of (fake) time, and drops a lease the leaser says is lost.
func TestRenewLoop(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	p, _ := newPool(t, t.TempDir(), false, 2, mib)
	leases := NewMemLeases(2, MemLeaseOptions{TTL: 10 * time.Second, Clock: clk.Now})
	var mu sync.Mutex
	var lost []Lease
	w := newWriter(t, p, leases.Leaser("a"), WriterOptions{Host: "a", Clock: clk.Now, RenewEvery: time.Millisecond, Margin: time.Second,
		OnLost: func(l Lease) { mu.Lock(); lost = append(lost, l); mu.Unlock() }})
	r := NewReader(p)
	first, err := w.Put(ctx, key("ns", 0, 0, 1), []byte("zero"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		clk.Advance(6 * time.Second)
		want := clk.Now().Add(10 * time.Second)
		testenv.Eventually(t, 20*time.Second, func() bool {
			ls := w.Leases()
			return len(ls) == 1 && ls[0].Expires.Equal(want) && leases.Leases()[ls[0].Extent].Expires.Equal(want)
		}, "lease renewal %d to expire at %v", i+1, want)
		loc, err := w.Put(ctx, key("ns", uint64(i+1), 0, 1), []byte("more"))
		if err != nil {
			t.Fatalf("Put after %d renewals: %v", i+1, err)
		}
		if loc.Extent != first.Extent || loc.Epoch != first.Epoch {
			t.Fatalf("renewed writer moved to %v", loc)
		}
	}
	mustGet(t, r, key("ns", 0, 0, 1), first, []byte("zero"))
	// Close stops the loop: the lease then lapses.
	w.Close()
	clk.Advance(11 * time.Second)
	if l := leases.Leases()[first.Extent]; l.Epoch != 0 {
		t.Fatalf("lease %v still live after Close and TTL", l)
	}
}

// TestRenewDropsLost: renewAll drops a lease the leaser no longer has.
func TestRenewDropsLost(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	p, _ := newPool(t, t.TempDir(), false, 2, mib)
	leases := NewMemLeases(2, MemLeaseOptions{TTL: 10 * time.Second, Clock: clk.Now})
	var lost []Lease
	w := newWriter(t, p, leases.Leaser("a"), WriterOptions{Host: "a", Clock: clk.Now, RenewEvery: time.Hour, Margin: time.Second,
		OnLost: func(l Lease) { lost = append(lost, l) }})
	loc, err := w.Put(ctx, key("ns", 0, 0, 1), []byte("zero"))
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(5 * time.Second)
	w.renewAll(ctx)
	if ls := w.Leases(); len(ls) != 1 || !ls[0].Expires.Equal(clk.Now().Add(10*time.Second)) {
		t.Fatalf("after renewal: %v", ls)
	}
	clk.Advance(10 * time.Second)
	w.renewAll(ctx)
	if len(w.Leases()) != 0 || len(lost) != 1 || lost[0].Epoch != loc.Epoch {
		t.Fatalf("after expiry: held %v, lost %v", w.Leases(), lost)
	}
}

func TestPutErrors(t *testing.T) {
	ctx := context.Background()
	p, _ := newPool(t, t.TempDir(), false, 1, mib)
	leases := NewMemLeases(1, MemLeaseOptions{})
	if _, err := NewWriter(ctx, p, leases.Leaser("a"), WriterOptions{Host: strings.Repeat("h", MaxHost+1)}); err == nil {
		t.Fatal("NewWriter took a 65-byte host name")
	}
	w := newWriter(t, p, leases.Leaser("a"), WriterOptions{Host: strings.Repeat("h", MaxHost)})
	r := NewReader(p)
	if _, err := w.Put(ctx, key("ns", 1, 0, 1), nil); err == nil {
		t.Fatal("empty Put succeeded")
	}
	if _, err := w.Put(ctx, key(strings.Repeat("n", MaxNamespace+1), 1, 0, 1), []byte("x")); err == nil {
		t.Fatal("Put took a 256-byte namespace")
	}
	maxData := int(mib - 2*pageSize) // extent less extent header and record header
	if _, err := w.Put(ctx, key("ns", 1, 0, 1), make([]byte, maxData+1)); !errors.Is(err, tier.ErrTooLarge) {
		t.Fatalf("oversized Put: %v", err)
	}
	k := key(strings.Repeat("n", MaxNamespace), 1, 0, 1)
	big := randBytes(rand.New(rand.NewPCG(1, 1)), maxData)
	loc, err := w.Put(ctx, k, big)
	if err != nil {
		t.Fatalf("Put filling the extent: %v", err)
	}
	mustGet(t, r, k, loc, big)
	if _, err := w.Put(ctx, key("ns", 2, 0, 1), []byte("x")); !errors.Is(err, ErrNoExtent) {
		t.Fatalf("Put into a full pool: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := w.Put(cctx, key("ns", 2, 0, 1), []byte("x")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put with cancelled ctx: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Put(ctx, key("ns", 2, 0, 1), []byte("x")); !errors.Is(err, tier.ErrClosed) {
		t.Fatalf("Put after Close: %v", err)
	}
	p.Close()
	if _, err := r.Get(ctx, k, loc, make([]byte, 10)); !errors.Is(err, tier.ErrClosed) {
		t.Fatalf("Get after pool Close: %v", err)
	}
}

// TestPutVerifiesReadBack: a write that did not reach the device as sent
// (here: damaged between write and read-back) fails Put with ErrCorrupt
// and returns no Location; the next Put goes on.
func TestPutVerifiesReadBack(t *testing.T) {
	ctx := context.Background()
	p, path := newPool(t, t.TempDir(), false, 1, mib)
	w := newWriter(t, p, NewMemLeases(1, MemLeaseOptions{}).Leaser("a"), WriterOptions{Host: "a"})
	for _, off := range []int64{100, headerSize + 5000} { // header, payload
		w.beforeReadBack = func(loc Location) { flip(t, path, loc.Offset+off) }
		if loc, err := w.Put(ctx, key("ns", 1, 0, 1), make([]byte, 10_000)); !errors.Is(err, tier.ErrCorrupt) || loc != (Location{}) {
			t.Fatalf("Put with damaged read-back at +%d: %v, %v", off, loc, err)
		}
	}
	w.beforeReadBack = nil
	loc, err := w.Put(ctx, key("ns", 1, 0, 1), []byte("ok"))
	if err != nil {
		t.Fatal(err)
	}
	mustGet(t, NewReader(p), key("ns", 1, 0, 1), loc, []byte("ok"))
}
