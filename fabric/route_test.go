package fabric

import (
	"context"
	"errors"
	"net"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/ctxmem/ctxmemd/internal/testenv"
)

// needNetns skips the test when network namespaces cannot be made here
// (not root, or no netns support), or fails it under
// CTXMEM_REQUIRE_TOOLS=1, as `make test` sets.
func needNetns(t *testing.T, why string) {
	t.Helper()
	testenv.Skip(t, "%s", why)
}

// newNamespaces creates n network namespaces and returns their handles;
// they vanish when the handles are closed (at test cleanup).
func newNamespaces(t *testing.T, n int) []netns.NsHandle {
	t.Helper()
	if os.Geteuid() != 0 {
		needNetns(t, "needs root to create network namespaces")
	}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		needNetns(t, "cannot read this thread's network namespace: "+err.Error())
	}
	var out []netns.NsHandle
	var newErr error
	for i := 0; i < n && newErr == nil; i++ {
		ns, err := netns.New() // switches this thread into it
		if err != nil {
			newErr = err
			break
		}
		out = append(out, ns)
	}
	if err := netns.Set(orig); err != nil {
		// This thread is stuck in a test namespace: keep it locked so
		// that it dies with the test goroutine instead of being reused.
		t.Fatalf("cannot return to the original network namespace: %v", err)
	}
	runtime.UnlockOSThread()
	orig.Close()
	t.Cleanup(func() {
		for _, ns := range out {
			ns.Close()
		}
	})
	if newErr != nil {
		needNetns(t, "cannot create a network namespace: "+newErr.Error())
	}
	return out
}

func mustAddr(t *testing.T, h *netlink.Handle, l netlink.Link, cidr string) {
	t.Helper()
	a, err := netlink.ParseAddr(cidr)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.AddrAdd(l, a); err != nil {
		t.Fatalf("add %s to %s: %v", cidr, l.Attrs().Name, err)
	}
}

func mustLink(t *testing.T, h *netlink.Handle, name string) netlink.Link {
	t.Helper()
	l, err := h.LinkByName(name)
	if err != nil {
		t.Fatalf("link %s: %v", name, err)
	}
	return l
}

// TestRouteToInNamespace builds, in two fresh namespaces, a host with two
// veth links (192.0.2.1/24 towards the target at 192.0.2.2, and
// 198.51.100.1/24 with a gateway to 203.0.113.0/24) and checks that
// RouteTo names the interface and source the kernel uses, follows link
// down and up, and asks the namespace it is given.
func TestRouteToInNamespace(t *testing.T) {
	nss := newNamespaces(t, 2)
	host, target := nss[0], nss[1]
	hh, err := netlink.NewHandleAt(host)
	if err != nil {
		t.Fatal(err)
	}
	defer hh.Close()
	th, err := netlink.NewHandleAt(target)
	if err != nil {
		t.Fatal(err)
	}
	defer th.Close()

	for _, v := range []*netlink.Veth{
		{LinkAttrs: netlink.LinkAttrs{Name: "ctxr0"}, PeerName: "ctxr1", PeerNamespace: netlink.NsFd(target)},
		{LinkAttrs: netlink.LinkAttrs{Name: "ctxr2"}, PeerName: "ctxr3", PeerNamespace: netlink.NsFd(target)},
	} {
		if err := hh.LinkAdd(v); err != nil {
			t.Fatalf("add veth %s: %v", v.Name, err)
		}
	}
	for _, x := range []struct {
		h          *netlink.Handle
		name, cidr string
	}{
		{hh, "ctxr0", "192.0.2.1/24"}, {hh, "ctxr2", "198.51.100.1/24"},
		{th, "ctxr1", "192.0.2.2/24"}, {th, "ctxr3", "198.51.100.2/24"},
	} {
		l := mustLink(t, x.h, x.name)
		mustAddr(t, x.h, l, x.cidr)
		if err := x.h.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range []*netlink.Handle{hh, th} {
		if err := h.LinkSetUp(mustLink(t, h, "lo")); err != nil {
			t.Fatal(err)
		}
	}
	_, dst, _ := net.ParseCIDR("203.0.113.0/24")
	if err := hh.RouteAdd(&netlink.Route{Dst: dst, Gw: net.ParseIP("198.51.100.2"), LinkIndex: mustLink(t, hh, "ctxr2").Attrs().Index}); err != nil {
		t.Fatalf("add route: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	expect := func(ns netns.NsHandle, dst, wantIf, wantSrc string) {
		t.Helper()
		ifname, src, err := RouteTo(ctx, net.ParseIP(dst), RouteInNamespace(ns))
		if err != nil {
			t.Fatalf("RouteTo(%s): %v", dst, err)
		}
		if ifname != wantIf || !src.Equal(net.ParseIP(wantSrc)) {
			t.Fatalf("RouteTo(%s) = %s, %v; want %s, %s", dst, ifname, src, wantIf, wantSrc)
		}
	}
	expect(host, "192.0.2.2", "ctxr0", "192.0.2.1")
	expect(host, "203.0.113.9", "ctxr2", "198.51.100.1")
	expect(host, "192.0.2.1", "lo", "192.0.2.1")
	expect(target, "192.0.2.1", "ctxr1", "192.0.2.2") // the option picks the namespace

	if _, _, err := RouteTo(ctx, net.ParseIP("10.66.0.1"), RouteInNamespace(host)); !errors.Is(err, syscall.ENETUNREACH) {
		t.Fatalf("RouteTo(10.66.0.1) with no default route = %v; want ENETUNREACH", err)
	}

	// Link down withdraws the connected route; up restores it.
	l0 := mustLink(t, hh, "ctxr0")
	if err := hh.LinkSetDown(l0); err != nil {
		t.Fatal(err)
	}
	if ifname, _, err := RouteTo(ctx, net.ParseIP("192.0.2.2"), RouteInNamespace(host)); err == nil {
		t.Fatalf("RouteTo(192.0.2.2) with ctxr0 down = %s; want an error", ifname)
	}
	if err := hh.LinkSetUp(l0); err != nil {
		t.Fatal(err)
	}
	expect(host, "192.0.2.2", "ctxr0", "192.0.2.1")
}

// TestRouteToLoopback runs in the caller's namespace and needs no root.
func TestRouteToLoopback(t *testing.T) {
	ifname, src, err := RouteTo(context.Background(), net.IPv4(127, 0, 0, 1))
	if err != nil {
		t.Fatal(err)
	}
	if ifname != "lo" || !src.Equal(net.IPv4(127, 0, 0, 1)) {
		t.Fatalf("RouteTo(127.0.0.1) = %s, %v; want lo, 127.0.0.1", ifname, src)
	}
}

func TestRouteToBadInput(t *testing.T) {
	if _, _, err := RouteTo(context.Background(), nil); err == nil {
		t.Error("RouteTo(nil) succeeded")
	}
	if _, _, err := RouteTo(context.Background(), net.IPv4zero); err == nil {
		t.Error("RouteTo(0.0.0.0) succeeded")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := RouteTo(ctx, net.IPv4(127, 0, 0, 1)); !errors.Is(err, context.Canceled) {
		t.Errorf("RouteTo with an ended ctx = %v", err)
	}
}
