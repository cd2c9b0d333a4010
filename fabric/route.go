package fabric

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// routeConfig holds RouteTo's options.
type routeConfig struct {
	ns *netns.NsHandle
}

// RouteOption configures RouteTo.
type RouteOption func(*routeConfig)

// RouteInNamespace asks the routing table of network namespace ns instead
// of the caller's (the RouteTo counterpart of InNamespace).
func RouteInNamespace(ns netns.NsHandle) RouteOption {
	return func(c *routeConfig) { c.ns = &ns }
}

// RouteTo asks the kernel which interface, and which source address, it
// would use to send to ip now: an rtnetlink RTM_GETROUTE lookup (RFC 3549;
// what `ip route get IP` prints as "dev" and "src"). The answer follows
// the routing policy, so it names the interface whose link state decides
// whether an NVMe-oF target at ip is reachable. A local address answers
// "lo". src is nil when the kernel picks none.
//
// ctx's deadline bounds the netlink exchange. Errors: ip is nil or
// unspecified; ctx already ended; netlink unavailable or the namespace
// unusable; no route (the syscall.Errno, usually ENETUNREACH, is wrapped);
// a route with no output interface.
func RouteTo(ctx context.Context, ip net.IP, opts ...RouteOption) (ifname string, src net.IP, err error) {
	var cfg routeConfig
	for _, o := range opts {
		o(&cfg)
	}
	if ip == nil || ip.IsUnspecified() {
		return "", nil, fmt.Errorf("fabric: route to %v: not a destination address", ip)
	}
	if err := ctx.Err(); err != nil {
		return "", nil, fmt.Errorf("fabric: route to %v: %w", ip, err)
	}
	var h *netlink.Handle
	if cfg.ns != nil {
		h, err = netlink.NewHandleAt(*cfg.ns)
	} else {
		h, err = netlink.NewHandle()
	}
	if err != nil {
		return "", nil, fmt.Errorf("fabric: netlink: %w", err)
	}
	defer h.Close()
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		if left <= 0 {
			return "", nil, fmt.Errorf("fabric: route to %v: %w", ip, context.DeadlineExceeded)
		}
		if err := h.SetSocketTimeout(left); err != nil {
			return "", nil, fmt.Errorf("fabric: netlink timeout: %w", err)
		}
	}
	routes, err := h.RouteGet(ip)
	if err != nil {
		return "", nil, fmt.Errorf("fabric: no route to %v: %w", ip, err)
	}
	if len(routes) == 0 {
		return "", nil, fmt.Errorf("fabric: no route to %v", ip)
	}
	r := routes[0]
	if r.LinkIndex == 0 {
		return "", nil, errors.New("fabric: route to " + ip.String() + " has no output interface")
	}
	l, err := h.LinkByIndex(r.LinkIndex)
	if err != nil {
		return "", nil, fmt.Errorf("fabric: route to %v: interface %d: %w", ip, r.LinkIndex, err)
	}
	return l.Attrs().Name, r.Src, nil
}
