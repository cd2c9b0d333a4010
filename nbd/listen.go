package nbd

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// DefaultTCPPort is the IANA port of NBD.
const DefaultTCPPort = 10809

// Listen opens the listener an --nbd URL names:
//
//   - unix:///PATH — a unix socket at the absolute PATH, mode 0600 from the
//     moment it is reachable (bound under a temporary name, chmod'ed, then
//     renamed into place). A stale socket at PATH is replaced; any other
//     kind of file there is an error. Closing the listener removes PATH.
//   - tcp://HOST:PORT — a TCP listener. An empty HOST means 127.0.0.1
//     (loopback unless an address is given); an empty PORT means 10809.
//
// Errors: a malformed URL or unknown scheme, or the failure to listen.
func Listen(rawURL string) (net.Listener, error) {
	network, addr, err := ParseListenURL(rawURL)
	if err != nil {
		return nil, err
	}
	if network == "unix" {
		return listenUnix(addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("nbd: %w", err)
	}
	return ln, nil
}

// ParseListenURL checks a listen URL as Listen takes it, without
// listening, and returns its network ("unix" or "tcp") and address (the
// cleaned socket path, or HOST:PORT with Listen's defaults filled in), so
// that a configuration front end can refuse a bad one before it creates
// anything. Errors: a malformed URL or an unknown scheme.
func ParseListenURL(rawURL string) (network, addr string, err error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", "", fmt.Errorf("nbd: listen URL %q: %w", rawURL, err)
	}
	switch u.Scheme {
	case "unix":
		if u.Host != "" || !filepath.IsAbs(u.Path) || u.RawQuery != "" {
			return "", "", fmt.Errorf("nbd: listen URL %q: want unix:///ABSOLUTE/PATH", rawURL)
		}
		return "unix", filepath.Clean(u.Path), nil
	case "tcp":
		if u.Path != "" && u.Path != "/" || u.RawQuery != "" {
			return "", "", fmt.Errorf("nbd: listen URL %q: want tcp://HOST:PORT", rawURL)
		}
		host, port := u.Hostname(), u.Port()
		if host == "" {
			host = "127.0.0.1"
		}
		if port == "" {
			port = strconv.Itoa(DefaultTCPPort)
		}
		return "tcp", net.JoinHostPort(host, port), nil
	}
	return "", "", fmt.Errorf("nbd: listen URL %q: scheme must be unix or tcp", rawURL)
}

func listenUnix(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&fs.ModeSocket == 0 {
			return nil, fmt.Errorf("nbd: %s exists and is not a socket", path)
		}
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil, fmt.Errorf("nbd: %s is in use by a running server", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("nbd: remove stale socket: %w", err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("nbd: %w", err)
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp"+strconv.Itoa(os.Getpid()))
	_ = os.Remove(tmp)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("nbd: %w", err)
	}
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, 0o600); err != nil {
		ln.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("nbd: chmod socket: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		ln.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("nbd: install socket: %w", err)
	}
	return &unixListener{UnixListener: ln, path: path}, nil
}

// unixListener removes its socket file on Close.
type unixListener struct {
	*net.UnixListener
	path string
	once sync.Once
	err  error
}

func (l *unixListener) Close() error {
	l.once.Do(func() {
		l.err = l.UnixListener.Close()
		if err := os.Remove(l.path); err != nil && !errors.Is(err, fs.ErrNotExist) && l.err == nil {
			l.err = err
		}
	})
	return l.err
}

// Addr reports the socket's final path.
func (l *unixListener) Addr() net.Addr { return &net.UnixAddr{Name: l.path, Net: "unix"} }

// dialURL connects to a server named like Listen's URLs, or by a plain
// socket path or HOST:PORT.
func dialURL(target string) (net.Conn, error) {
	switch {
	case strings.HasPrefix(target, "unix://"):
		u, err := url.Parse(target)
		if err != nil {
			return nil, err
		}
		return net.Dial("unix", u.Path)
	case strings.HasPrefix(target, "tcp://"):
		u, err := url.Parse(target)
		if err != nil {
			return nil, err
		}
		return net.Dial("tcp", u.Host)
	case strings.HasPrefix(target, "/"):
		return net.Dial("unix", target)
	}
	return net.Dial("tcp", target)
}
