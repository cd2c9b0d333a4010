package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"
)

// Client talks to a daemon's admin socket. It is safe for concurrent use.
type Client struct {
	socket string
	hc     *http.Client
	// long shares hc's transport without its overall timeout: for the
	// requests that take as long as the work does (Fsck), bounded by the
	// caller's context.
	long *http.Client
}

// NewClient returns a client for the socket at path. It does not connect
// until a request is made.
func NewClient(socket string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		MaxIdleConns:    1,
		IdleConnTimeout: 10 * time.Second,
	}
	return &Client{socket: socket, hc: &http.Client{Transport: tr, Timeout: requestTimeout}, long: &http.Client{Transport: tr}}
}

// Close releases idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// Status fetches GET /status. A socket nobody listens on yields an error
// wrapping ErrNotRunning.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var st Status
	err := c.do(ctx, http.MethodGet, "/status", nil, &st)
	return st, err
}

// Prestage asks the daemon to bring path's blocks up to G2.
func (c *Client) Prestage(ctx context.Context, path string) error {
	return c.do(ctx, http.MethodPost, "/prestage", pathRequest{Path: path}, nil)
}

// Evict asks the daemon to demote path's blocks out of G2.
func (c *Client) Evict(ctx context.Context, path string) error {
	return c.do(ctx, http.MethodPost, "/evict", pathRequest{Path: path}, nil)
}

// SetPinned pins or unpins path.
func (c *Client) SetPinned(ctx context.Context, path string, pinned bool) error {
	return c.do(ctx, http.MethodPost, "/pin", pathRequest{Path: path, Pinned: &pinned}, nil)
}

// Cluster fetches GET /cluster into out (a JSON document of the control
// plane's cluster view). A daemon without a control plane answers with an
// error wrapping ErrUnsupported.
func (c *Client) Cluster(ctx context.Context, out any) error {
	return c.do(ctx, http.MethodGet, "/cluster", nil, out)
}

// ClusterPrestage sends a prestage request through the daemon to the
// cluster's scheduler and decodes the reply into out.
func (c *Client) ClusterPrestage(ctx context.Context, req ClusterPrestageRequest, out any) error {
	return c.do(ctx, http.MethodPost, "/cluster/prestage", req, out)
}

func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	return c.doWith(ctx, c.hc, method, path, body, out)
}

func (c *Client) doWith(ctx context.Context, hc *http.Client, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://ctxmemd"+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(req)
	if err != nil {
		return c.dialError(ctx, method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("admin: %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var eb errorBody
		_ = json.Unmarshal(data, &eb)
		msg := eb.Error
		if msg == "" {
			msg = resp.Status
		}
		switch resp.StatusCode {
		case http.StatusNotFound:
			return fmt.Errorf("%w: %s", ErrNotFound, msg)
		case http.StatusNotImplemented:
			return fmt.Errorf("%w: %s", ErrUnsupported, msg)
		case http.StatusBadRequest:
			return fmt.Errorf("%w: %s", ErrBadRequest, msg)
		case http.StatusConflict:
			return fmt.Errorf("%w: %s", ErrBusy, msg)
		}
		return fmt.Errorf("admin: %s %s: %s", method, path, msg)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("admin: decode %s: %w", path, err)
		}
	}
	return nil
}

// Sink asks the daemon to move the object at path (mount-relative,
// "ns/file") to G4.
func (c *Client) Sink(ctx context.Context, path string) error {
	return c.do(ctx, http.MethodPost, "/sink", pathRequest{Path: path}, nil)
}

// Warmup asks the daemon to bring the object at path to G2 and waits
// until it is there.
func (c *Client) Warmup(ctx context.Context, path string) error {
	return c.do(ctx, http.MethodPost, "/warmup", pathRequest{Path: path}, nil)
}

// requestTimeout bounds one admin request (not the long ones: warmup,
// fsck, gc use their own client): a daemon that takes the connection and
// does not answer within it is reported as not answering (ErrNotRunning).
// It is longer than the daemon's own bound on a request that waits for
// write-back (write_timeout, 30 s by default): an `evict` of a file whose
// flush cannot progress (its G4 down) then gets the daemon's answer, not
// "no daemon answers" (both were 30 s, and which one came was a race).
const requestTimeout = 45 * time.Second

// dialError names why a request could not reach the daemon: a socket the
// caller may not open (it is mode 0600, the daemon's user only) wraps
// ErrPermission; one nobody listens on, or a daemon that took the
// connection and closed it or sent nothing in time (still starting, hung,
// stopping), ErrNotRunning.
func (c *Client) dialError(ctx context.Context, method, path string, err error) error {
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "dial" {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() && ctx.Err() == nil { // the client's timeout, not the caller's deadline
			return fmt.Errorf("%w on %s: the daemon is not answering: it took the connection but sent no answer to %s %s in time (still starting, hung or stopped? see its log): %v",
				ErrNotRunning, c.socket, method, path, err)
		}
		if ctx.Err() == nil && (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) {
			// A daemon binds its socket before it mounts and serves it
			// once up: a request sent meanwhile waits unaccepted, and is
			// reset if that daemon exits (its start failed) or closes
			// the connection while stopping.
			return fmt.Errorf("%w on %s: the daemon closed the connection without answering %s %s (still starting, or it stopped; see its log): %v",
				ErrNotRunning, c.socket, method, path, err)
		}
		return fmt.Errorf("admin: %s %s: %w", method, path, err)
	}
	if errors.Is(op.Err, os.ErrPermission) {
		return fmt.Errorf("%w on %s: run as root (or the daemon's user), or pass --admin a socket you may open", ErrPermission, c.socket)
	}
	return fmt.Errorf("%w on %s: %v", ErrNotRunning, c.socket, op.Err)
}
