package tiertest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

const kib = 1 << 10

func testPutGet(t *testing.T, h Harness) {
	tr, _ := open(t, h)
	if tr.Name() == "" {
		t.Error("Name() is empty")
	}
	k := key(1, 0, 1)
	want := Pattern(k, 256*kib, 0)
	mustPut(t, tr, k, want)
	checkBlock(t, tr, k, want)
	// Exact-size buffer: full count, no error.
	p := make([]byte, len(want))
	if n, err := tr.Get(context.Background(), k, p, 0); err != nil || n != len(want) {
		t.Fatalf("Get exact buffer = %d, %v", n, err)
	}
	// The tier must not keep a reference to the caller's buffer.
	for i := range want {
		want[i] = ^want[i]
	}
	checkBlock(t, tr, k, Pattern(k, 256*kib, 0))
	// A never-written key is not found.
	expectNotFound(t, tr, key(1, 1, 1))
}

func testLengths(t *testing.T, h Harness) {
	ctx := context.Background()
	tr, _ := open(t, h)
	lengths := []int{1, 2, 511, 512, 4095, 4096, 4097, 8191, 12345, 64 * kib,
		256*kib - 1, 256 * kib, 256*kib + 1, 1<<20 + 3, tier.MaxBlockSize - 1, tier.MaxBlockSize}
	for i, n := range lengths {
		k := key(2, uint32(i), 1)
		mustPut(t, tr, k, Pattern(k, n, 0))
	}
	for i, n := range lengths {
		k := key(2, uint32(i), 1)
		checkBlock(t, tr, k, Pattern(k, n, 0))
		if got, err := tr.Stat(ctx, k); err != nil || got != int64(n) {
			t.Errorf("Stat(%v) = %d, %v; want %d", k, got, err, n)
		}
	}
}

func testTooLarge(t *testing.T, h Harness) {
	tr, _ := open(t, h)
	k := key(3, 0, 1)
	err := tr.Put(context.Background(), k, make([]byte, tier.MaxBlockSize+1))
	if !errors.Is(err, tier.ErrTooLarge) {
		t.Fatalf("Put(MaxBlockSize+1) = %v; want ErrTooLarge", err)
	}
	expectNotFound(t, tr, k)
}

func testRangeReads(t *testing.T, h Harness) {
	tr, _ := open(t, h)
	k := key(4, 0, 1)
	size := int64(256*kib + 123)
	mustPut(t, tr, k, Pattern(k, int(size), 7))
	offs := []int64{0, 1, 511, 512, 4095, 4096, 4097, 8191, 8192, 100000,
		size - 4097, size - 4096, size - 123, size - 1}
	lens := []int{1, 7, 512, 4095, 4096, 4097, 3*4096 + 7, 64 * kib, int(size)}
	for _, off := range offs {
		for _, n := range lens {
			p := make([]byte, n)
			got, err := tr.Get(context.Background(), k, p, off)
			want := int(min(int64(n), size-off))
			if err != nil || got != want {
				t.Fatalf("Get(off=%d, len=%d) = %d, %v; want %d, nil", off, n, got, err, want)
			}
			if i := firstDiff(p[:got], PatternAt(k, 7, off, want)); i >= 0 {
				t.Fatalf("Get(off=%d, len=%d): byte %d wrong", off, n, i)
			}
		}
	}
	// At the end of the block: zero bytes, no error.
	if n, err := tr.Get(context.Background(), k, make([]byte, 10), size); n != 0 || err != nil {
		t.Errorf("Get(off=len) = %d, %v; want 0, nil", n, err)
	}
	// Negative offset is an error (any), never data.
	if n, err := tr.Get(context.Background(), k, make([]byte, 10), -1); err == nil || n != 0 {
		t.Errorf("Get(off=-1) = %d, %v; want an error", n, err)
	}
	// Empty buffer: zero bytes.
	if n, err := tr.Get(context.Background(), k, nil, 5); n != 0 || err != nil {
		t.Errorf("Get(empty p) = %d, %v; want 0, nil", n, err)
	}
}

func testShortLastBlock(t *testing.T, h Harness) {
	tr, _ := open(t, h)
	// An object of 700 KiB in 256 KiB blocks: two full blocks and a 188 KiB
	// tail; and a 4 KiB-block object whose last block is 1 byte.
	type obj struct {
		id        uint64
		size, bsz int
	}
	for _, o := range []obj{{5, 700 * kib, 256 * kib}, {6, 3*4*kib + 1, 4 * kib}} {
		for i := 0; i*o.bsz < o.size; i++ {
			n := min(o.bsz, o.size-i*o.bsz)
			k := key(o.id, uint32(i), 1)
			mustPut(t, tr, k, Pattern(k, n, 0))
		}
		for i := 0; i*o.bsz < o.size; i++ {
			n := min(o.bsz, o.size-i*o.bsz)
			k := key(o.id, uint32(i), 1)
			checkBlock(t, tr, k, Pattern(k, n, 0))
			// A block-sized read of the tail at an offset inside it is short.
			p := make([]byte, o.bsz)
			off := int64(n / 2)
			got, err := tr.Get(context.Background(), k, p, off)
			if err != nil || got != n-int(off) {
				t.Fatalf("Get(%v, off=%d) = %d, %v; want %d", k, off, got, err, n-int(off))
			}
		}
	}
}

func testOverwrite(t *testing.T, h Harness) {
	ctx := context.Background()
	tr, _ := open(t, h)
	k := key(7, 0, 1)
	for v, n := range []int{10000, 5000, 300 * kib, 4096, 1} {
		mustPut(t, tr, k, Pattern(k, n, uint64(v)))
		checkBlock(t, tr, k, Pattern(k, n, uint64(v)))
		if got, err := tr.Stat(ctx, k); err != nil || got != int64(n) {
			t.Fatalf("Stat after overwrite %d = %d, %v; want %d", v, got, err, n)
		}
	}
	if l := list(t, tr); len(l) != 1 || l[k] != 1 {
		t.Fatalf("Range after overwrites = %v; want only %v:1", l, k)
	}
	if u := tr.Usage(); u.Blocks != 1 || u.UsedBytes != 1 {
		t.Fatalf("Usage after overwrites = %+v; want 1 block, 1 byte", u)
	}
}

func testGenerations(t *testing.T, h Harness) {
	tr, _ := open(t, h)
	g1, g2 := key(8, 3, 1), key(8, 3, 2)
	mustPut(t, tr, g1, Pattern(g1, 50*kib, 0))
	mustPut(t, tr, g2, Pattern(g2, 20*kib, 0))
	checkBlock(t, tr, g1, Pattern(g1, 50*kib, 0))
	checkBlock(t, tr, g2, Pattern(g2, 20*kib, 0))
	// Keys differing in one field only are distinct blocks too.
	other := []tier.Key{
		{Namespace: "ns2", Object: 8, Index: 3, Gen: 1},
		{Namespace: "ns", Object: 9, Index: 3, Gen: 1},
		{Namespace: "ns", Object: 8, Index: 4, Gen: 1},
	}
	for _, k := range other {
		expectNotFound(t, tr, k)
	}
	if err := tr.Delete(context.Background(), g1); err != nil {
		t.Fatal(err)
	}
	expectNotFound(t, tr, g1)
	checkBlock(t, tr, g2, Pattern(g2, 20*kib, 0))
}

func testDelete(t *testing.T, h Harness) {
	tr, _ := open(t, h)
	ctx := context.Background()
	k, keep := key(10, 0, 1), key(10, 1, 1)
	mustPut(t, tr, k, Pattern(k, 9000, 0))
	mustPut(t, tr, keep, Pattern(keep, 9000, 0))
	if err := tr.Delete(ctx, k); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	expectNotFound(t, tr, k)
	checkBlock(t, tr, keep, Pattern(keep, 9000, 0))
	if err := tr.Delete(ctx, k); err != nil {
		t.Fatalf("Delete of a deleted key = %v; want nil", err)
	}
	if err := tr.Delete(ctx, key(10, 99, 1)); err != nil {
		t.Fatalf("Delete of a missing key = %v; want nil", err)
	}
	// Put after delete brings the key back with the new bytes.
	mustPut(t, tr, k, Pattern(k, 100, 1))
	checkBlock(t, tr, k, Pattern(k, 100, 1))
}

func testStat(t *testing.T, h Harness) {
	ctx := context.Background()
	tr, _ := open(t, h)
	for i, n := range []int{1, 4096, 4097, 256 * kib} {
		k := key(11, uint32(i), 1)
		if _, err := tr.Stat(ctx, k); !errors.Is(err, tier.ErrNotFound) {
			t.Fatalf("Stat before Put = %v; want ErrNotFound", err)
		}
		mustPut(t, tr, k, Pattern(k, n, 0))
		if got, err := tr.Stat(ctx, k); err != nil || got != int64(n) {
			t.Fatalf("Stat(%v) = %d, %v; want %d", k, got, err, n)
		}
	}
}

func testRangeList(t *testing.T, h Harness) {
	tr, _ := open(t, h)
	ctx := context.Background()
	want := map[tier.Key]int64{}
	for i := range 40 {
		k := tier.Key{Namespace: fmt.Sprintf("ns%d", i%3), Object: uint64(i % 7), Index: uint32(i), Gen: uint64(1 + i%2)}
		n := 1 + i*997
		mustPut(t, tr, k, Pattern(k, n, 0))
		want[k] = int64(n)
	}
	i := 0
	for k := range want {
		if i%3 == 0 {
			if err := tr.Delete(ctx, k); err != nil {
				t.Fatal(err)
			}
			delete(want, k)
		}
		i++
	}
	got := list(t, tr)
	if len(got) != len(want) {
		t.Errorf("Range listed %d blocks, want %d", len(got), len(want))
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("Range: %v length %d, want %d", k, got[k], n)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("Range listed %v, which is not live", k)
		}
	}
	// fn returning false stops the walk.
	calls := 0
	if err := tr.Range(ctx, func(tier.Key, int64) bool { calls++; return false }); err != nil {
		t.Fatal(err)
	}
	if calls != 1 {
		t.Errorf("Range called fn %d times after it returned false; want 1", calls)
	}
}

func testUsage(t *testing.T, h Harness) {
	tr, _ := open(t, h)
	ctx := context.Background()
	if u := tr.Usage(); u.Blocks != 0 || u.UsedBytes != 0 {
		t.Fatalf("Usage of an empty tier = %+v", u)
	}
	var used int64
	for i, n := range []int{1, 4096, 5000, 256 * kib} {
		mustPut(t, tr, key(12, uint32(i), 1), Pattern(key(12, uint32(i), 1), n, 0))
		used += int64(n)
	}
	check := func(blocks, bytes int64, when string) {
		t.Helper()
		if u := tr.Usage(); u.Blocks != blocks || u.UsedBytes != bytes {
			t.Fatalf("Usage %s = %d blocks %d bytes; want %d blocks %d bytes", when, u.Blocks, u.UsedBytes, blocks, bytes)
		}
	}
	check(4, used, "after 4 puts")
	mustPut(t, tr, key(12, 2, 1), Pattern(key(12, 2, 1), 100, 1)) // 5000 → 100
	used += 100 - 5000
	check(4, used, "after overwrite")
	if err := tr.Delete(ctx, key(12, 3, 1)); err != nil {
		t.Fatal(err)
	}
	used -= 256 * kib
	check(3, used, "after delete")
	if err := tr.Delete(ctx, key(12, 3, 1)); err != nil {
		t.Fatal(err)
	}
	check(3, used, "after deleting a missing key")
}

func testCapacity(t *testing.T, h Harness) {
	if h.OpenSmall == nil || h.SmallCapacity <= 0 {
		t.Skip("harness has no small tier")
	}
	dir := t.TempDir()
	tr := h.OpenSmall(t, dir)
	t.Cleanup(func() { _ = tr.Close() })
	ctx := context.Background()
	if u := tr.Usage(); u.CapacityBytes != h.SmallCapacity {
		t.Errorf("Usage.CapacityBytes = %d; want %d", u.CapacityBytes, h.SmallCapacity)
	}
	const bsz = 64 * kib
	total := int(3*h.SmallCapacity/bsz) + 1
	var acked []tier.Key
	sawNoSpace := false
	for i := range total {
		k := key(13, uint32(i), 1)
		err := tr.Put(ctx, k, Pattern(k, bsz, 0))
		if errors.Is(err, tier.ErrNoSpace) {
			if h.Reclaims {
				t.Fatalf("Put %d: ErrNoSpace from a tier that reclaims", i)
			}
			sawNoSpace = true
			expectNotFound(t, tr, k)
			break
		}
		if err != nil {
			t.Fatalf("Put %d: %v", i, err)
		}
		acked = append(acked, k)
		if u := tr.Usage(); u.UsedBytes > h.SmallCapacity {
			t.Fatalf("after Put %d Usage.UsedBytes = %d > capacity %d", i, u.UsedBytes, h.SmallCapacity)
		}
		// The block just stored is readable.
		checkBlock(t, tr, k, Pattern(k, bsz, 0))
	}
	if !h.Reclaims && !sawNoSpace {
		t.Fatalf("wrote %d bytes into a %d-byte tier without ErrNoSpace", total*bsz, h.SmallCapacity)
	}
	// Every acknowledged block either reads exactly or (reclaiming tiers
	// only) is gone; the listing and Usage agree with what reads.
	listed := list(t, tr)
	present := 0
	for _, k := range acked {
		p := make([]byte, bsz)
		n, err := tr.Get(ctx, k, p, 0)
		switch {
		case err == nil:
			present++
			if n != bsz || firstDiff(p, Pattern(k, bsz, 0)) >= 0 {
				t.Fatalf("Get(%v) after fill returned wrong bytes", k)
			}
			if listed[k] != bsz {
				t.Errorf("readable %v missing from Range", k)
			}
		case errors.Is(err, tier.ErrNotFound) && h.Reclaims:
			if _, ok := listed[k]; ok {
				t.Errorf("Range lists %v, which reads as not found", k)
			}
		default:
			t.Fatalf("Get(%v) after fill: %v", k, err)
		}
	}
	if u := tr.Usage(); u.Blocks != int64(present) || u.UsedBytes != int64(present)*bsz {
		t.Errorf("Usage after fill = %+v; %d blocks are readable", u, present)
	}
	if h.Reclaims {
		if present == len(acked) {
			t.Fatalf("all %d blocks (%d bytes) still present in a %d-byte tier", present, present*bsz, h.SmallCapacity)
		}
		if present == 0 {
			t.Fatalf("no block left after fill")
		}
		return
	}
	// A full tier takes blocks again once some are deleted (unless its
	// deletes free no space: then they are only gone).
	for _, k := range acked[:4] {
		if err := tr.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if h.DeleteKeepsSpace {
		for _, k := range acked[:4] {
			expectNotFound(t, tr, k)
		}
		if u := tr.Usage(); u.Blocks != int64(present-4) || u.UsedBytes != int64(present-4)*bsz {
			t.Errorf("Usage after 4 deletes = %+v; want %d blocks", u, present-4)
		}
		return
	}
	k := key(13, uint32(total+1), 1)
	mustPut(t, tr, k, Pattern(k, bsz, 0))
	checkBlock(t, tr, k, Pattern(k, bsz, 0))
}

func testCorruption(t *testing.T, h Harness) {
	if h.Corrupt == nil {
		t.Skip("harness cannot corrupt blocks")
	}
	tr, dir := open(t, h)
	ctx := context.Background()
	for i, n := range []int{1, 4096, 100 * kib} {
		k, ok := key(14, uint32(i), 1), key(15, uint32(i), 1)
		mustPut(t, tr, k, Pattern(k, n, 0))
		mustPut(t, tr, ok, Pattern(ok, n, 0))
		if err := h.Corrupt(t, dir, k); err != nil {
			t.Fatalf("Corrupt(%v): %v", k, err)
		}
		p := make([]byte, n)
		got, err := tr.Get(ctx, k, p, 0)
		if !errors.Is(err, tier.ErrCorrupt) {
			t.Fatalf("Get of corrupted %v = %d, %v; want ErrCorrupt", k, got, err)
		}
		if got != 0 {
			t.Fatalf("Get of corrupted %v returned %d bytes with ErrCorrupt", k, got)
		}
		// Quarantined: gone from reads, Stat, Range and Usage.
		expectNotFound(t, tr, k)
		if _, listed := list(t, tr)[k]; listed {
			t.Fatalf("Range lists quarantined %v", k)
		}
		checkBlock(t, tr, ok, Pattern(ok, n, 0))
		if u := tr.Usage(); u.Blocks != int64(i+1) {
			t.Fatalf("Usage.Blocks = %d after %d quarantines; want %d", u.Blocks, i+1, i+1)
		}
		// The key can be stored again.
		mustPut(t, tr, k, Pattern(k, n, 1))
		checkBlock(t, tr, k, Pattern(k, n, 1))
		if err := tr.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
}

func testRestart(t *testing.T, h Harness) {
	dir := t.TempDir()
	tr := h.Open(t, dir)
	ctx := context.Background()
	want := map[tier.Key][]byte{}
	for i := range 30 {
		k := key(16, uint32(i), 1)
		d := Pattern(k, 1+i*7001, 0)
		mustPut(t, tr, k, d)
		want[k] = d
	}
	// Overwrites and deletes must survive the restart as well.
	ow := key(16, 3, 1)
	want[ow] = Pattern(ow, 777, 9)
	mustPut(t, tr, ow, want[ow])
	del := key(16, 4, 1)
	if err := tr.Delete(ctx, del); err != nil {
		t.Fatal(err)
	}
	delete(want, del)
	if err := tr.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if h.MemoryOnly {
		testRestartEmpty(t, h, dir, want)
		return
	}
	for round := range 2 {
		tr = h.Open(t, dir)
		for k, d := range want {
			checkBlock(t, tr, k, d)
		}
		expectNotFound(t, tr, del)
		if l := list(t, tr); len(l) != len(want) {
			t.Fatalf("round %d: Range after reopen lists %d blocks; want %d", round, len(l), len(want))
		}
		var used int64
		for _, d := range want {
			used += int64(len(d))
		}
		if u := tr.Usage(); u.Blocks != int64(len(want)) || u.UsedBytes != used {
			t.Fatalf("round %d: Usage after reopen = %+v; want %d blocks %d bytes", round, u, len(want), used)
		}
		// Write more in the reopened tier; the next round checks it too.
		k := key(17, uint32(round), 1)
		want[k] = Pattern(k, 12345, 0)
		mustPut(t, tr, k, want[k])
		if err := tr.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
}

// testRestartEmpty is the Restart case of a MemoryOnly tier: reopened,
// it holds none of the blocks written before, lists nothing, uses
// nothing, and stores and reads blocks again.
func testRestartEmpty(t *testing.T, h Harness, dir string, before map[tier.Key][]byte) {
	tr := h.Open(t, dir)
	t.Cleanup(func() { _ = tr.Close() })
	for k := range before {
		expectNotFound(t, tr, k)
	}
	if l := list(t, tr); len(l) != 0 {
		t.Fatalf("Range after reopen lists %d blocks of a memory-only tier", len(l))
	}
	if u := tr.Usage(); u.Blocks != 0 || u.UsedBytes != 0 {
		t.Fatalf("Usage after reopen = %+v; want empty", u)
	}
	for i := range 3 {
		k := key(17, uint32(i), 1)
		mustPut(t, tr, k, Pattern(k, 12345, 0))
		checkBlock(t, tr, k, Pattern(k, 12345, 0))
	}
}

func testConcurrency(t *testing.T, h Harness) {
	tr, _ := open(t, h)
	ctx := context.Background()
	const workers, perWorker = 6, 25
	shared := key(18, 0, 1)
	sharedLen := func(salt uint64) int { return 4096 + int(salt)*1000 }
	mustPut(t, tr, shared, Pattern(shared, sharedLen(0), 0))
	errc := make(chan error, workers*2)
	done := make(chan struct{})
	for w := range workers {
		go func() {
			errc <- func() error {
				for i := range perWorker {
					// Distinct keys: put then read back.
					k := key(19, uint32(w*perWorker+i), 1)
					d := Pattern(k, 1+(w*7919+i*104729)%(96*kib), 0)
					if err := tr.Put(ctx, k, d); err != nil {
						return fmt.Errorf("Put %v: %w", k, err)
					}
					p := make([]byte, len(d))
					if n, err := tr.Get(ctx, k, p, 0); err != nil || n != len(d) || firstDiff(p, d) >= 0 {
						return fmt.Errorf("Get %v after Put: n=%d err=%v", k, n, err)
					}
					// Shared key: every writer writes its own version.
					salt := uint64(w + 1)
					if err := tr.Put(ctx, shared, Pattern(shared, sharedLen(salt), salt)); err != nil {
						return fmt.Errorf("Put shared: %w", err)
					}
				}
				return nil
			}()
		}()
		go func() {
			// Readers of the shared key: every read is one whole version.
			errc <- func() error {
				p := make([]byte, 64*kib)
				for {
					select {
					case <-done:
						return nil
					default:
					}
					n, err := tr.Get(ctx, shared, p, 0)
					if err != nil {
						return fmt.Errorf("Get shared: %w", err)
					}
					if !isVersion(shared, p[:n], workers, sharedLen) {
						return fmt.Errorf("Get shared returned %d bytes matching no written version", n)
					}
				}
			}()
		}()
	}
	var firstErr error
	for range workers {
		if err := <-errc; err != nil && firstErr == nil {
			firstErr = err
		}
	}
	close(done)
	for range workers {
		if err := <-errc; err != nil && firstErr == nil {
			firstErr = err
		}
	}
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	if u := tr.Usage(); u.Blocks != workers*perWorker+1 {
		t.Fatalf("Usage.Blocks = %d; want %d", u.Blocks, workers*perWorker+1)
	}
	// Concurrent deletes and reads of the same keys: reads give the right
	// bytes or ErrNotFound.
	errc2 := make(chan error, 2)
	go func() {
		for i := range workers * perWorker {
			if err := tr.Delete(ctx, key(19, uint32(i), 1)); err != nil {
				errc2 <- err
				return
			}
		}
		errc2 <- nil
	}()
	go func() {
		p := make([]byte, 96*kib)
		for i := range workers * perWorker {
			k := key(19, uint32(i), 1)
			n, err := tr.Get(ctx, k, p, 0)
			if errors.Is(err, tier.ErrNotFound) {
				continue
			}
			if err != nil || firstDiff(p[:n], Pattern(k, n, 0)) >= 0 {
				errc2 <- fmt.Errorf("Get %v racing Delete: n=%d err=%v", k, n, err)
				return
			}
		}
		errc2 <- nil
	}()
	for range 2 {
		if err := <-errc2; err != nil {
			t.Fatal(err)
		}
	}
	if u := tr.Usage(); u.Blocks != 1 {
		t.Fatalf("Usage.Blocks after deleting all but one = %d", u.Blocks)
	}
}

// isVersion reports whether b is exactly one version (salt 0..n) of k.
func isVersion(k tier.Key, b []byte, n int, length func(uint64) int) bool {
	for s := uint64(0); s <= uint64(n); s++ {
		if len(b) == length(s) && firstDiff(b, Pattern(k, len(b), s)) < 0 {
			return true
		}
	}
	return false
}

func testClosed(t *testing.T, h Harness) {
	dir := t.TempDir()
	tr := h.Open(t, dir)
	ctx := context.Background()
	k := key(20, 0, 1)
	mustPut(t, tr, k, Pattern(k, 100, 0))
	if err := tr.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := tr.Put(ctx, k, []byte("x")); !errors.Is(err, tier.ErrClosed) {
		t.Errorf("Put after Close = %v; want ErrClosed", err)
	}
	if n, err := tr.Get(ctx, k, make([]byte, 10), 0); !errors.Is(err, tier.ErrClosed) || n != 0 {
		t.Errorf("Get after Close = %d, %v; want ErrClosed", n, err)
	}
	if _, err := tr.Stat(ctx, k); !errors.Is(err, tier.ErrClosed) {
		t.Errorf("Stat after Close = %v; want ErrClosed", err)
	}
	if err := tr.Delete(ctx, k); !errors.Is(err, tier.ErrClosed) {
		t.Errorf("Delete after Close = %v; want ErrClosed", err)
	}
	if err := tr.Range(ctx, func(tier.Key, int64) bool { return true }); !errors.Is(err, tier.ErrClosed) {
		t.Errorf("Range after Close = %v; want ErrClosed", err)
	}
	_ = tr.Close() // a second Close must not panic (nil or ErrClosed)
}
