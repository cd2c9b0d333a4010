package pool

import (
	"github.com/ctxmem/ctxmemd/internal/directio"

	"context"
	"errors"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// roundTrip puts blocks of awkward sizes, from aligned and unaligned
// buffers, and reads them back through p.
func roundTrip(t *testing.T, p *Pool) {
	t.Helper()
	ctx := context.Background()
	leases := NewMemLeases(p.Superblock().ExtentCount, MemLeaseOptions{})
	w := newWriter(t, p, leases.Leaser("host-a"), WriterOptions{Host: "host-a"})
	r := NewReader(p)
	rng := rand.New(rand.NewPCG(1, 2))
	type rec struct {
		k    tier.Key
		loc  Location
		data []byte
	}
	var recs []rec
	for i, n := range []int{1, 100, pageSize - 1, pageSize, pageSize + 1, 64 * kib, 256 * kib, 300*kib + 7} {
		data := randBytes(rng, n)
		if i%2 == 1 {
			// Page-aligned, page-multiple slices take the zero-copy path.
			a := directio.AlignedAlloc(n)
			copy(a, data)
			data = a
		}
		k := key("ns/model-a", uint64(i), uint32(i*3), 7)
		loc, err := w.Put(ctx, k, data)
		if err != nil {
			t.Fatalf("Put %d bytes: %v", n, err)
		}
		if loc.Length != uint32(n) || loc.Offset%pageSize != 0 {
			t.Fatalf("Put %d bytes: location %v", n, loc)
		}
		recs = append(recs, rec{k, loc, data})
	}
	for _, rc := range recs {
		mustGet(t, r, rc.k, rc.loc, rc.data)
		// A short dst gets a prefix of a fully verified block.
		dst := make([]byte, 1+len(rc.data)/2)
		n, err := r.Get(ctx, rc.k, rc.loc, dst)
		if err != nil || n != len(dst) || string(dst) != string(rc.data[:n]) {
			t.Fatalf("short Get of %v: n=%d err=%v", rc.loc, n, err)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	for _, pl := range places(t) {
		t.Run(pl.name, func(t *testing.T) {
			p, path := newPool(t, pl.dir, pl.buffered, 3, mib)
			roundTrip(t, p)
			// Another host sees the same records: reopen and read.
			q := openPool(t, path, pl.buffered)
			if q.Superblock().PoolID != p.Superblock().PoolID {
				t.Fatal("second handle sees another pool")
			}
			t.Logf("%v", q)
		})
	}
}

// TestReaderRejects: every header field and both checksums are checked;
// a failed Get leaves dst untouched; restoring the bytes makes the block
// readable again.
func TestReaderRejects(t *testing.T) {
	for _, pl := range places(t) {
		t.Run(pl.name, func(t *testing.T) {
			ctx := context.Background()
			p, path := newPool(t, pl.dir, pl.buffered, 3, mib)
			leases := NewMemLeases(3, MemLeaseOptions{})
			w := newWriter(t, p, leases.Leaser("a"), WriterOptions{Host: "a"})
			r := NewReader(p)
			rng := rand.New(rand.NewPCG(3, 4))
			k := key("ns", 42, 5, 9)
			data := randBytes(rng, 10_000)
			loc, err := w.Put(ctx, k, data)
			if err != nil {
				t.Fatal(err)
			}
			k2 := key("ns", 43, 0, 9)
			data2 := randBytes(rng, 5000)
			loc2, err := w.Put(ctx, k2, data2)
			if err != nil {
				t.Fatal(err)
			}
			mustGet(t, r, k, loc, data)

			// Wrong key fields or Location fields: ErrNotFound.
			for _, bad := range []tier.Key{
				key("nt", 42, 5, 9), key("n", 42, 5, 9), key("ns", 41, 5, 9),
				key("ns", 42, 6, 9), key("ns", 42, 5, 8), key("ns", 42, 5, 10),
			} {
				mustMiss(t, r, bad, loc, tier.ErrNotFound)
			}
			mod := func(f func(*Location)) Location { l := loc; f(&l); return l }
			for _, bad := range []Location{
				mod(func(l *Location) { l.Epoch++ }),
				mod(func(l *Location) { l.Epoch-- }),
				mod(func(l *Location) { l.Length++ }),
				mod(func(l *Location) { l.Length-- }),
				mod(func(l *Location) { l.Offset += pageSize }), // inside the payload
				mod(func(l *Location) { l.Offset += 512 }),      // unaligned
				mod(func(l *Location) { l.Offset = loc2.Offset }),
				mod(func(l *Location) { l.Offset = p.ExtentOffset(l.Extent) }), // the extent header
				mod(func(l *Location) { l.Extent++ }),
				mod(func(l *Location) { l.Extent = 99 }),
				mod(func(l *Location) { l.Length = 0 }),
			} {
				mustMiss(t, r, k, bad, tier.ErrNotFound)
			}
			// A well-formed record (valid header CRC) whose header names
			// another pool (an earlier format), epoch (a late write of an
			// earlier lease holder), extent, offset (a misdirected write),
			// length or key misses.
			hdr := readFile(t, path, loc.Offset, pageSize)
			for i, forge := range []func(h *recordHeader){
				func(h *recordHeader) { h.poolID[0] ^= 1 },
				func(h *recordHeader) { h.epoch-- },
				func(h *recordHeader) { h.extent++ },
				func(h *recordHeader) { h.offset += pageSize },
				func(h *recordHeader) { h.length-- },
				func(h *recordHeader) { h.key.Gen++ },
				func(h *recordHeader) { h.key.Namespace = "nt" },
			} {
				h, err := decodeHeader(hdr)
				if err != nil {
					t.Fatal(err)
				}
				forge(&h)
				forged := make([]byte, pageSize)
				encodeHeader(forged, &h)
				tamper(t, path, loc.Offset, forged)
				n, err := r.Get(ctx, k, loc, make([]byte, loc.Length))
				if !errors.Is(err, tier.ErrNotFound) {
					t.Fatalf("forged header %d: Get = %d, %v", i, n, err)
				}
			}
			tamper(t, path, loc.Offset, hdr)
			mustGet(t, r, k, loc, data)

			// Damage: ErrCorrupt, and the block reads again once repaired.
			for _, off := range []int64{
				loc.Offset + headerSize,         // first payload byte
				loc.Offset + headerSize + 9_999, // last payload byte
				loc.Offset + 8,                  // header CRC field
				loc.Offset + 13,                 // payload CRC field
				loc.Offset + 57,                 // object
				loc.Offset + 89,                 // host
				loc.Offset + hdrFixed + 1,       // namespace
				loc.Offset + 6,                  // header length
				p.ExtentOffset(loc.Extent) + 33, // extent header epoch
				p.ExtentOffset(loc.Extent) + 8,  // extent header CRC
			} {
				orig := readFile(t, path, off, 1)
				flip(t, path, off)
				mustMiss(t, r, k, loc, tier.ErrCorrupt)
				tamper(t, path, off, orig)
				mustGet(t, r, k, loc, data)
			}
			// Padding is not payload: damage there is harmless.
			flip(t, path, loc.Offset+headerSize+10_001)
			mustGet(t, r, k, loc, data)
			// Magic gone: not a record (ErrNotFound).
			flip(t, path, loc.Offset)
			mustMiss(t, r, k, loc, tier.ErrNotFound)
			mustGet(t, r, k2, loc2, data2)
		})
	}
}

// TestTornWrite: a record whose header reached the device but whose
// payload did not (wholly or in part), or a device that ends inside the
// record, reads as a miss.
func TestTornWrite(t *testing.T) {
	for _, pl := range places(t) {
		t.Run(pl.name, func(t *testing.T) {
			ctx := context.Background()
			p, path := newPool(t, pl.dir, pl.buffered, 2, mib)
			leases := NewMemLeases(2, MemLeaseOptions{})
			w := newWriter(t, p, leases.Leaser("a"), WriterOptions{Host: "a"})
			r := NewReader(p)
			rng := rand.New(rand.NewPCG(5, 6))
			firstData := randBytes(rng, 3000)
			first, err := w.Put(ctx, key("ns", 1, 0, 1), firstData)
			if err != nil {
				t.Fatal(err)
			}
			// The writer crashed after its next header write: build that
			// header where its next record would go.
			torn := func(k tier.Key, data []byte, off int64, payloadBytes int) Location {
				loc := Location{Extent: first.Extent, Offset: off, Length: uint32(len(data)), Epoch: first.Epoch}
				h := recordHeader{poolID: p.Superblock().PoolID, offset: off, extent: loc.Extent, length: loc.Length,
					epoch: loc.Epoch, key: k, payloadCRC: tier.Checksum(data), host: "a"}
				buf := make([]byte, headerSize+payloadBytes)
				encodeHeader(buf, &h)
				copy(buf[headerSize:], data[:payloadBytes])
				tamper(t, path, off, buf)
				return loc
			}
			off := first.Offset + recordLen(3000)
			k1, d1 := key("ns", 2, 0, 1), randBytes(rng, 40_000)
			loc1 := torn(k1, d1, off, 0)
			mustMiss(t, r, k1, loc1, tier.ErrCorrupt)
			off += recordLen(len(d1))
			k2, d2 := key("ns", 3, 0, 1), randBytes(rng, 40_000)
			loc2 := torn(k2, d2, off, 20_000) // payload cut at half
			mustMiss(t, r, k2, loc2, tier.ErrCorrupt)
			// The complete record at the same place reads: the test
			// would pass for the wrong reason otherwise.
			torn(k2, d2, off, len(d2))
			mustGet(t, r, k2, loc2, d2)
			// An earlier record torn later (sector-sized overwrite inside
			// the payload) misses too.
			tamper(t, path, off+headerSize+8192, make([]byte, pageSize))
			mustMiss(t, r, k2, loc2, tier.ErrCorrupt)
			// The device ends inside a record.
			if err := os.Truncate(path, off+headerSize+100); err != nil {
				t.Fatal(err)
			}
			torn(k2, d2, off, 100) // restore the header that Truncate kept
			mustMiss(t, r, k2, loc2, tier.ErrCorrupt)
			mustGet(t, r, key("ns", 1, 0, 1), first, firstData)
		})
	}
}

// TestExtentReuse: once an extent is leased again, every Location of its
// earlier lease misses (ErrNotFound), whether its record was overwritten
// or is still intact, and never yields old or new bytes; the new holder's
// records read correctly from both hosts.
func TestExtentReuse(t *testing.T) {
	for _, pl := range places(t) {
		t.Run(pl.name, func(t *testing.T) {
			ctx := context.Background()
			clk := newFakeClock()
			pa, path := newPool(t, pl.dir, pl.buffered, 1, mib)
			pb := openPool(t, path, pl.buffered)
			leases := NewMemLeases(1, MemLeaseOptions{TTL: 10 * time.Second, Clock: clk.Now})
			var lostA []Lease
			wa := newWriter(t, pa, leases.Leaser("a"), WriterOptions{Host: "a", Clock: clk.Now, RenewEvery: time.Hour, Margin: time.Second,
				OnLost: func(l Lease) { lostA = append(lostA, l) }})
			wb := newWriter(t, pb, leases.Leaser("b"), WriterOptions{Host: "b", Clock: clk.Now, RenewEvery: time.Hour, Margin: time.Second})
			ra, rb := NewReader(pa), NewReader(pb)
			rng := rand.New(rand.NewPCG(7, 8))

			type rec struct {
				k    tier.Key
				loc  Location
				data []byte
			}
			put := func(w *Writer, k tier.Key, n int) rec {
				t.Helper()
				d := randBytes(rng, n)
				loc, err := w.Put(ctx, k, d)
				if err != nil {
					t.Fatal(err)
				}
				return rec{k, loc, d}
			}
			var old []rec
			for i := range 6 {
				old = append(old, put(wa, key("ns", uint64(i), 0, 1), 10_000+rng.IntN(120_000)))
			}
			for _, o := range old {
				mustGet(t, rb, o.k, o.loc, o.data)
			}
			// A's lease lapses (no renewal); B takes the extent.
			clk.Advance(11 * time.Second)
			// Same key as A's first record, other bytes (a buggy reuse of
			// a generation must still never mix the two up).
			nb := []rec{put(wb, old[0].k, 3000)}
			if nb[0].loc.Extent != old[0].loc.Extent || nb[0].loc.Epoch <= old[0].loc.Epoch {
				t.Fatalf("B got %v after A's %v", nb[0].loc, old[0].loc)
			}
			// A's later records are still intact on disk...
			last := old[len(old)-1]
			if h, err := decodeHeader(readFile(t, path, last.loc.Offset, pageSize)); err != nil || h.epoch != last.loc.Epoch || h.key != last.k {
				t.Fatalf("old record not intact: %+v %v", h, err)
			}
			// ...yet every old Location misses on both hosts.
			check := func() {
				t.Helper()
				for _, o := range old {
					mustMiss(t, ra, o.k, o.loc, tier.ErrNotFound)
					mustMiss(t, rb, o.k, o.loc, tier.ErrNotFound)
				}
				for _, n := range nb {
					mustGet(t, ra, n.k, n.loc, n.data)
					mustGet(t, rb, n.k, n.loc, n.data)
					// Old location's key at the new location misses too.
					mustMiss(t, ra, key("ns", 99, 0, 1), n.loc, tier.ErrNotFound)
				}
			}
			check()
			// B overwrites most of the extent with records of other sizes
			// (old headers land inside new payloads and the reverse).
			for i := range 5 {
				nb = append(nb, put(wb, key("other", uint64(i), 1, 2), 5_000+rng.IntN(150_000)))
			}
			check()
			// A's writer finds its lease gone.
			if _, err := wa.Put(ctx, key("ns", 50, 0, 1), []byte("x")); !errors.Is(err, ErrLeaseLost) {
				t.Fatalf("A's Put after expiry: %v", err)
			}
			if len(lostA) != 1 || lostA[0].Epoch != old[0].loc.Epoch {
				t.Fatalf("OnLost got %v", lostA)
			}
			// With B holding the only extent, A gets ErrNoExtent.
			if _, err := wa.Put(ctx, key("ns", 50, 0, 1), []byte("x")); !errors.Is(err, ErrNoExtent) {
				t.Fatalf("A's Put with pool full: %v", err)
			}
			check()
		})
	}
}

// TestReclaim: after Reclaim every Location in the extent misses at once,
// the lease is free, and the next lease of the extent has a new epoch.
func TestReclaim(t *testing.T) {
	ctx := context.Background()
	p, _ := newPool(t, t.TempDir(), false, 2, mib)
	leases := NewMemLeases(2, MemLeaseOptions{})
	w := newWriter(t, p, leases.Leaser("a"), WriterOptions{Host: "a"})
	r := NewReader(p)
	rng := rand.New(rand.NewPCG(9, 10))
	var locs []Location
	var keys []tier.Key
	for i := range 4 {
		k := key("ns", uint64(i), 0, 1)
		loc, err := w.Put(ctx, k, randBytes(rng, 20_000))
		if err != nil {
			t.Fatal(err)
		}
		locs, keys = append(locs, loc), append(keys, k)
	}
	e := locs[0].Extent
	if err := w.Reclaim(ctx, e); err != nil {
		t.Fatal(err)
	}
	for i := range locs {
		mustMiss(t, r, keys[i], locs[i], tier.ErrNotFound)
	}
	if l := leases.Leases()[e]; l.Epoch != 0 {
		t.Fatalf("extent %d still leased: %v", e, l)
	}
	if len(w.Leases()) != 0 {
		t.Fatalf("writer still holds %v", w.Leases())
	}
	if err := w.Reclaim(ctx, e); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("second Reclaim: %v", err)
	}
	// The writer goes on in a new lease.
	loc, err := w.Put(ctx, keys[0], []byte("again"))
	if err != nil {
		t.Fatal(err)
	}
	if loc.Epoch <= locs[0].Epoch {
		t.Fatalf("new lease epoch %d ≤ old %d", loc.Epoch, locs[0].Epoch)
	}
	mustGet(t, r, keys[0], loc, []byte("again"))
	mustMiss(t, r, keys[0], locs[0], tier.ErrNotFound)
}
