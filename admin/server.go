package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// Options configure a Server.
type Options struct {
	// Socket is the unix socket path (required).
	Socket string
	// Listener, when set, is Socket already opened by Listen (Serve then
	// serves on it and closes it).
	Listener net.Listener
	// Provider answers requests (required).
	Provider Provider
	// Version is reported in Status.Version.
	Version string
	// Started is the daemon's start time for Status.UptimeSeconds (default:
	// when Serve was called).
	Started time.Time
	// Logger receives request errors (default slog.Default()).
	Logger *slog.Logger
}

// Serve listens on opts.Socket and serves until ctx ends, then shuts the
// server down (in-flight requests get up to 5 s) and removes the socket
// file. Before listening it checks the path: a live daemon answering there
// is ErrInUse; a stale socket file is removed; a path that exists but is not
// a socket is an error (it is never removed). The socket is created under a
// temporary name, set to mode 0600 and renamed into place, so it is never
// reachable with looser permissions. Serve returns nil after a clean
// shutdown, or the listen/serve error.
func Serve(ctx context.Context, opts Options) error {
	if opts.Socket == "" || opts.Provider == nil {
		return errors.New("admin: Serve needs a socket path and a provider")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Started.IsZero() {
		opts.Started = time.Now()
	}
	ln := opts.Listener
	if ln == nil {
		var err error
		if ln, err = Listen(ctx, opts.Socket); err != nil {
			return err
		}
	}
	var err error
	srv := &http.Server{
		Handler:           Handler(opts),
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err = <-done:
		os.Remove(opts.Socket)
		return fmt.Errorf("admin: serve %s: %w", opts.Socket, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	<-done
	os.Remove(opts.Socket)
	if err != nil {
		return fmt.Errorf("admin: shutdown: %w", err)
	}
	return nil
}

// listen prepares path and returns a listener on it (mode 0600).
// Listen opens the admin socket at path with Serve's checks (a live
// daemon there is ErrInUse, a stale socket is replaced, anything else at
// the path is an error), so a daemon can bind it before it mounts and pass
// it to Serve in Options.Listener.
func Listen(ctx context.Context, path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("admin: %s exists and is not a socket; refusing to replace it", path)
		}
		d := net.Dialer{Timeout: time.Second}
		if c, err := d.DialContext(ctx, "unix", path); err == nil {
			c.Close()
			return nil, fmt.Errorf("%w: %s (another ctxmemd is running with this data directory: stop it, or give this one its own --data-dir, --mount and --metrics)", ErrInUse, path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("admin: remove stale socket: %w", err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("admin: %w", err)
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp"+strconv.Itoa(os.Getpid()))
	os.Remove(tmp)
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "unix", tmp)
	if err != nil {
		return nil, fmt.Errorf("admin: listen: %w", err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, 0o600); err != nil {
		ln.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("admin: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		ln.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("admin: %w", err)
	}
	return ln, nil
}

// pathRequest is the body of POST /prestage, /evict and /pin.
type pathRequest struct {
	Path   string `json:"path"`
	Pinned *bool  `json:"pinned,omitempty"`
}

// Handler returns the HTTP handler Serve uses (exported for tests and for
// mounting on another listener).
func Handler(opts Options) http.Handler {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Started.IsZero() {
		opts.Started = time.Now()
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		st, err := opts.Provider.Status(r.Context())
		if err != nil {
			writeErr(w, opts.Logger, r, err)
			return
		}
		st.Version = opts.Version
		st.UptimeSeconds = time.Since(opts.Started).Seconds()
		st.PID = os.Getpid()
		writeJSON(w, http.StatusOK, st)
	})
	mux.HandleFunc("GET /cluster", func(w http.ResponseWriter, r *http.Request) {
		cp, ok := opts.Provider.(ClusterProvider)
		if !ok {
			writeErr(w, opts.Logger, r, ErrUnsupported)
			return
		}
		doc, err := cp.Cluster(r.Context())
		if err != nil {
			writeErr(w, opts.Logger, r, err)
			return
		}
		writeJSON(w, http.StatusOK, doc)
	})
	mux.HandleFunc("POST /cluster/prestage", func(w http.ResponseWriter, r *http.Request) {
		cp, ok := opts.Provider.(ClusterProvider)
		if !ok {
			writeErr(w, opts.Logger, r, ErrUnsupported)
			return
		}
		var req ClusterPrestageRequest
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil || req.Namespace == "" || len(req.Paths) == 0 {
			writeJSON(w, http.StatusBadRequest, errorBody{"want {namespace, paths[], deadline_ms, host}"})
			return
		}
		doc, err := cp.ClusterPrestage(r.Context(), req)
		if err != nil {
			writeErr(w, opts.Logger, r, err)
			return
		}
		writeJSON(w, http.StatusOK, doc)
	})
	control := func(name string, do func(ctx context.Context, req pathRequest) error) {
		mux.HandleFunc("POST /"+name, func(w http.ResponseWriter, r *http.Request) {
			var req pathRequest
			dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&req); err != nil {
				writeJSON(w, http.StatusBadRequest, errorBody{fmt.Sprintf("bad request body: %v", err)})
				return
			}
			if req.Path == "" {
				writeJSON(w, http.StatusBadRequest, errorBody{"path is required"})
				return
			}
			if err := do(r.Context(), req); err != nil {
				writeErr(w, opts.Logger, r, err)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		})
	}
	control("prestage", pathOp(opts.Provider, Prestager.Prestage))
	control("evict", pathOp(opts.Provider, Evicter.Evict))
	control("sink", pathOp(opts.Provider, Sinker.Sink))
	control("warmup", pathOp(opts.Provider, Warmer.Warmup))
	control("pin", func(ctx context.Context, req pathRequest) error {
		p, ok := opts.Provider.(Pinner)
		if !ok {
			return ErrUnsupported
		}
		pinned := true
		if req.Pinned != nil {
			pinned = *req.Pinned
		}
		return p.SetPinned(ctx, req.Path, pinned)
	})
	maintenance(mux, opts)
	return mux
}

// pathOp adapts a control method of an optional Provider interface T to a
// POST handler body: ErrUnsupported (501) when prov does not implement T.
func pathOp[T any](prov Provider, do func(T, context.Context, string) error) func(context.Context, pathRequest) error {
	return func(ctx context.Context, req pathRequest) error {
		p, ok := prov.(T)
		if !ok {
			return ErrUnsupported
		}
		return do(p, ctx, req.Path)
	}
}

type errorBody struct {
	Error string `json:"error"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeErr(w http.ResponseWriter, log *slog.Logger, r *http.Request, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, ErrNotFound), errors.Is(err, fs.ErrNotExist):
		code = http.StatusNotFound
	case errors.Is(err, ErrUnsupported):
		code = http.StatusNotImplemented
	case errors.Is(err, ErrBadRequest):
		code = http.StatusBadRequest
	case errors.Is(err, ErrBusy):
		code = http.StatusConflict
	}
	if code == http.StatusInternalServerError {
		log.Error("admin request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	writeJSON(w, code, errorBody{err.Error()})
}
