package fabric

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// LinkState is the state of one network interface as last reported by the
// kernel (rtnetlink RTM_NEWLINK, RFC 3549).
type LinkState struct {
	// Name is the interface name, e.g. "eth0".
	Name string `json:"name"`
	// Up is true when the link is administratively up and its operational
	// state is up (or unknown, as for devices without carrier reporting).
	Up bool `json:"up"`
	// OperState is the kernel's operational state: "up", "down",
	// "lowerlayerdown", "unknown", ...
	OperState string `json:"oper_state"`
	// Changed is when Up last changed (or when watching started).
	Changed time.Time `json:"changed"`
}

// LinkWatcher follows one interface's link state through an rtnetlink
// subscription. Create it with WatchLink; it is safe for concurrent use.
type LinkWatcher struct {
	name string
	ns   *netns.NsHandle

	mu       sync.Mutex
	state    LinkState
	onChange func(LinkState)
}

// LinkOption configures WatchLink.
type LinkOption func(*LinkWatcher)

// InNamespace watches the interface inside network namespace ns instead
// of the caller's.
func InNamespace(ns netns.NsHandle) LinkOption {
	return func(w *LinkWatcher) { w.ns = &ns }
}

// OnChange registers fn, called (from Run's goroutine) with the new state
// every time Up changes.
func OnChange(fn func(LinkState)) LinkOption {
	return func(w *LinkWatcher) { w.onChange = fn }
}

// WatchLink reads the current state of interface name and returns a watcher
// whose Run keeps it current. Errors: the interface does not exist, or
// netlink is not available.
func WatchLink(name string, opts ...LinkOption) (*LinkWatcher, error) {
	w := &LinkWatcher{name: name}
	for _, o := range opts {
		o(w)
	}
	h, err := w.handle()
	if err != nil {
		return nil, err
	}
	defer h.Close()
	l, err := h.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("fabric: interface %q: %w", name, err)
	}
	w.state = stateOf(l, time.Now())
	return w, nil
}

func (w *LinkWatcher) handle() (*netlink.Handle, error) {
	if w.ns != nil {
		return netlink.NewHandleAt(*w.ns)
	}
	return netlink.NewHandle()
}

func stateOf(l netlink.Link, now time.Time) LinkState {
	a := l.Attrs()
	oper := a.OperState.String()
	up := a.Flags&net.FlagUp != 0 && (a.OperState == netlink.OperUp || a.OperState == netlink.OperUnknown)
	return LinkState{Name: a.Name, Up: up, OperState: oper, Changed: now}
}

// State returns the latest known state.
func (w *LinkWatcher) State() LinkState {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.state
}

// Run follows link updates until ctx ends. It returns nil when ctx ends, or
// the subscription error.
func (w *LinkWatcher) Run(ctx context.Context) error {
	ch := make(chan netlink.LinkUpdate, 16)
	done := make(chan struct{})
	defer close(done)
	errc := make(chan error, 1)
	opts := netlink.LinkSubscribeOptions{Namespace: w.ns, ListExisting: true,
		ErrorCallback: func(err error) {
			select {
			case errc <- err:
			default:
			}
		}}
	if err := netlink.LinkSubscribeWithOptions(ch, done, opts); err != nil {
		return fmt.Errorf("fabric: subscribe to link updates: %w", err)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errc:
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("fabric: link updates: %w", err)
		case u, ok := <-ch:
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return errors.New("fabric: link update subscription closed")
			}
			if u.Link == nil || u.Link.Attrs().Name != w.name {
				continue
			}
			w.update(stateOf(u.Link, time.Now()))
		}
	}
}

func (w *LinkWatcher) update(s LinkState) {
	w.mu.Lock()
	changed := s.Up != w.state.Up
	if !changed {
		s.Changed = w.state.Changed
	}
	w.state = s
	fn := w.onChange
	w.mu.Unlock()
	if changed && fn != nil {
		fn(s)
	}
}
