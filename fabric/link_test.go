package fabric

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/ctxmem/ctxmemd/internal/testenv"
)

// TestLinkWatchInNamespace creates a network namespace with a veth pair,
// watches one end and sets it down and up: the watcher must report each.
func TestLinkWatchInNamespace(t *testing.T) {
	testenv.RequireRoot(t, "to create a network namespace")
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	ns, err := netns.New() // switches this thread into the new namespace
	if err != nil {
		runtime.UnlockOSThread()
		testenv.Skip(t, "cannot create a network namespace: %v", err)
	}
	if err := netns.Set(orig); err != nil {
		t.Fatal(err)
	}
	runtime.UnlockOSThread()
	defer ns.Close()
	defer orig.Close()

	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "ctxv0"}, PeerName: "ctxv1"}
	if err := h.LinkAdd(veth); err != nil {
		t.Fatalf("add veth: %v", err)
	}
	l0, _ := h.LinkByName("ctxv0")
	l1, _ := h.LinkByName("ctxv1")
	if err := h.LinkSetUp(l1); err != nil {
		t.Fatal(err)
	}

	changes := make(chan LinkState, 8)
	w, err := WatchLink("ctxv0", InNamespace(ns), OnChange(func(s LinkState) { changes <- s }))
	if err != nil {
		t.Fatal(err)
	}
	if w.State().Up {
		t.Fatalf("a new veth end reported up: %+v", w.State())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	time.Sleep(100 * time.Millisecond) // let the subscription start

	expect := func(up bool) {
		t.Helper()
		select {
		case s := <-changes:
			if s.Up != up || s.Name != "ctxv0" {
				t.Fatalf("got %+v, want up=%v", s, up)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no change to up=%v reported within 5 s (state %+v)", up, w.State())
		}
		if w.State().Up != up {
			t.Fatalf("State() %+v, want up=%v", w.State(), up)
		}
	}
	if err := h.LinkSetUp(l0); err != nil {
		t.Fatal(err)
	}
	expect(true)
	if err := h.LinkSetDown(l0); err != nil {
		t.Fatal(err)
	}
	expect(false)
	if err := h.LinkSetUp(l0); err != nil {
		t.Fatal(err)
	}
	expect(true)
}

func TestWatchLinkMissingInterface(t *testing.T) {
	if _, err := WatchLink("ctxmem-no-such-if0"); err == nil {
		t.Fatal("watching a missing interface succeeded")
	}
}
