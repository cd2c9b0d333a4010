package sidecar

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/sidecar/msg"
	"github.com/ctxmem/ctxmemd/tiering"
)

// TestDeviceObjectsNotReported: an object of the device durability class
// (an NBD export; labelled "vol" here: the class decides, not the kind) is
// not KV cache: even with a name, it is neither announced to the cluster
// nor offered as a cold object to move, while a cache file beside it is
// both.
func TestDeviceObjectsNotReported(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := tiering.Open(context.Background(), tiering.Config{DataDir: t.TempDir(), G2Bytes: 64 << 20, Logger: log, RankObjects: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	f := &files{byPath: map[string]tiering.ObjectID{}, st: st}
	a, err := New(Config{Host: "h", Names: msg.For("t"), Interval: time.Second, Log: log}, st, f)
	if err != nil {
		t.Fatal(err)
	}
	file := f.write(t, "kv/blk0", make([]byte, 8192))
	dev, err := st.CreateWith("default", 4096, tiering.CreateOptions{Kind: "vol", Durability: tiering.DurabilityDevice})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.WriteAt(context.Background(), dev, make([]byte, 8192), 0); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.byPath["export"] = dev
	f.mu.Unlock()

	drainStoreEvents(a) // what Run's event loop does

	now := time.Now().Add(time.Hour)
	stored := map[uint64]bool{}
	for _, evs := range a.takeEvents(now) {
		for _, ev := range evs.Events {
			if ev.Kind == msg.EvStored {
				stored[ev.ID] = true
			}
		}
	}
	if !stored[uint64(file)] || stored[uint64(dev)] {
		t.Fatalf("stored events %v (file %d, device %d)", stored, file, dev)
	}
	cold := map[uint64]bool{}
	for _, o := range a.BuildReport(now).Cold {
		cold[o.ID] = true
	}
	if !cold[uint64(file)] || cold[uint64(dev)] {
		t.Fatalf("cold objects %v (file %d, device %d)", cold, file, dev)
	}
}

// drainStoreEvents hands the store events queued so far to the agent, as
// Run's event loop would (for tests that do not Run the agent).
func drainStoreEvents(a *Agent) {
	for {
		select {
		case ev := <-a.subs.C():
			a.onStoreEvent(ev)
		default:
			return
		}
	}
}
