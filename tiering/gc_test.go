package tiering_test

import (
	"context"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/tiering"
	"github.com/ctxmem/ctxmemd/tiering/faulttier"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// gcFill creates n objects of one 16 KiB block each, flushes them to G3
// and deletes them, leaving n G3 records for the garbage collector.
func gcFill(t *testing.T, fs *faultStack, n int) {
	t.Helper()
	ctx := context.Background()
	buf := make([]byte, 16<<10)
	for i := range n {
		id, err := fs.store.Create("ns", 16<<10, "file")
		if err != nil {
			t.Fatal(err)
		}
		buf[0] = byte(i)
		if _, err := fs.store.WriteAt(ctx, id, buf, 0); err != nil {
			t.Fatal(err)
		}
		flushWithin(t, fs.store, id, 10*time.Second)
		if err := fs.store.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
}

// waitGCDone waits until the store has no garbage pending and G3 holds no
// block, and fails the test when that takes longer than d.
func waitGCDone(t *testing.T, fs *faultStack, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		st, u := fs.store.Stats(), fs.g3s.Usage()
		if st.GCPending == 0 && u.Blocks == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %d garbage block copies pending, G3 holds %d blocks (%d bytes); gc deleted %d, failed %d",
				d, st.GCPending, u.Blocks, u.UsedBytes, st.GCDeleted, st.GCFailed)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestGCRetriesFailedDeletes is issue 18 item 1: a delete that fails is
// tried again (with backoff) until it works, instead of being dropped
// until the next start, and the pending count shows it meanwhile.
func TestGCRetriesFailedDeletes(t *testing.T) {
	fs := openFaultStack(t, t.TempDir(), 8<<20, 0, false, nil)
	defer fs.close(t)
	// Every delete fails three times over: 40 keys, 120 failures.
	remove := fs.g3.Inject(faulttier.Fault{Op: faulttier.Delete, Times: 120, Err: tier.ErrUnavailable})
	defer remove()
	gcFill(t, fs, 40)
	waitGCDone(t, fs, 20*time.Second)
	st := fs.store.Stats()
	if st.GCFailed < 120 || st.GCDeleted < 40 {
		t.Fatalf("gc failed %d (want >= 120), deleted %d (want >= 40)", st.GCFailed, st.GCDeleted)
	}
}

// TestGCSlowDeletesEachHaveTheirOwnDeadline: 250 deletes of 50 ms each
// (12.5 s one after another) all complete. With one 10 s deadline for the
// whole batch, as before, the last fifty failed and were dropped.
func TestGCSlowDeletesEachHaveTheirOwnDeadline(t *testing.T) {
	fs := openFaultStack(t, t.TempDir(), 8<<20, 0, false, nil)
	defer fs.close(t)
	gate := faulttier.NewGate() // hold the deletes until all are queued
	remove := fs.g3.Inject(faulttier.Fault{Op: faulttier.Delete, Times: 1, Gate: gate})
	defer remove()
	delay := fs.g3.Inject(faulttier.Fault{Op: faulttier.Delete, Delay: 50 * time.Millisecond})
	defer delay()
	gcFill(t, fs, 250)
	gate.Release()
	waitGCDone(t, fs, 30*time.Second)
	if st := fs.store.Stats(); st.GCFailed != 0 {
		t.Fatalf("%d deletes failed", st.GCFailed)
	}
}

// TestHungG3DeletesDoNotPileUp: GC deletes into a G3 whose device stops
// answering are given up after LocalWriteTimeout, and once one is past
// its deadline no other delete is sent to the device (each would leave
// one more goroutine in it) until it returns; once it answers, GC deletes
// everything.
func TestHungG3DeletesDoNotPileUp(t *testing.T) {
	fs := openFaultStack(t, t.TempDir(), 8<<20, 0, false, func(c *tiering.Config) { c.LocalWriteTimeout = 100 * time.Millisecond })
	defer fs.close(t)
	stall := faulttier.NewGate()
	defer stall.Release()
	remove := fs.g3.Inject(faulttier.Fault{Op: faulttier.Delete, Stall: stall})
	gcFill(t, fs, 20)
	// The deletes of one GC round may all be sent before the first one's
	// deadline (gcParallel of them); once one is past it, no more are.
	time.Sleep(time.Second)
	sent := fs.g3.Calls(faulttier.Delete)
	time.Sleep(time.Second)
	if n := fs.g3.Calls(faulttier.Delete); n != sent || n > 8 {
		t.Fatalf("%d deletes sent into the hung G3 after 1 s, %d after 2 s; want at most 8 (one GC round), then none (the rest wait for them)", sent, n)
	}
	if st := fs.store.Stats(); st.LocalWritesAbandoned != sent || st.GCPending != 20 {
		t.Fatalf("LocalWritesAbandoned %d, GCPending %d; want %d and 20", st.LocalWritesAbandoned, st.GCPending, sent)
	}
	remove()
	stall.Release()
	waitGCDone(t, fs, 30*time.Second)
}
