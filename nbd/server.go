package nbd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ctxmem/ctxmemd/catalog"
	"github.com/ctxmem/ctxmemd/tiering"
)

// Options configures a Server. Zero values take the documented defaults.
type Options struct {
	// StateDir holds StateFile, the export name → object id map. Required;
	// use the tiering store's data directory.
	StateDir string
	// Logger receives the server's logs (default slog.Default()).
	Logger *slog.Logger
	// Workers is the number of goroutines per connection that run the
	// requests the reader does not run inline (default 16); with the
	// reader's queue it bounds the requests in flight (2 × Workers + 1).
	Workers int
	// MaxInFlightBytes bounds the WRITE payload and READ buffer bytes per
	// connection held for requests in flight (default 128 MiB; at least
	// MaxPayload).
	MaxInFlightBytes int64
	// MaxConns bounds concurrent connections per Serve call (default 256);
	// connections past it are closed at once.
	MaxConns int
	// HandshakeTimeout bounds the option haggling of one connection
	// (default 30 s).
	HandshakeTimeout time.Duration
	// ObserveLatency, when set, is called once per transmission request
	// answered, with its op (OpName) and the time its execution took
	// (from the request read to the reply encoded). It must be safe for
	// concurrent use and fast.
	ObserveLatency func(op string, d time.Duration)
	// ShutdownGrace is how long requests in flight may run after Serve's
	// context ends before their contexts are cancelled and connections
	// closed (default 10 s).
	ShutdownGrace time.Duration
}

func (o Options) withDefaults() (Options, error) {
	if o.StateDir == "" {
		return o, errors.New("nbd: Options.StateDir is required")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Workers <= 0 {
		o.Workers = 16
	}
	if o.MaxInFlightBytes <= 0 {
		o.MaxInFlightBytes = 128 << 20
	}
	o.MaxInFlightBytes = max(o.MaxInFlightBytes, MaxPayload)
	if o.MaxConns <= 0 {
		o.MaxConns = 256
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = 30 * time.Second
	}
	if o.ShutdownGrace <= 0 {
		o.ShutdownGrace = 10 * time.Second
	}
	return o, nil
}

// Server serves a fixed set of exports over the NBD protocol (fixed
// newstyle negotiation, simple and structured replies, base:allocation
// block status). Create it with NewServer and run it with Serve, once per
// listener; Serve may run on several listeners at once.
type Server struct {
	be      Backend
	opts    Options
	log     *slog.Logger
	exports []*export // in configuration order
	byName  map[string]*export
	bufs    *bufPool
	zeros   []byte    // read-only zeros for WRITE_ZEROES with NO_HOLE
	ops     sync.Pool // of *op

	st counters
}

// counters are the server's statistics since NewServer.
type counters struct {
	conns, connsActive, requests, errors, bytesRead, bytesWritten atomic.Int64
}

// Stats is a snapshot of the server's counters.
type Stats struct {
	Connections       int64 // accepted since start
	ActiveConnections int64
	Requests          int64 // transmission requests answered
	Errors            int64 // requests answered with an error
	BytesRead         int64 // READ payload bytes sent
	BytesWritten      int64 // WRITE payload bytes stored
}

// Stats returns a snapshot of the counters.
func (s *Server) Stats() Stats {
	return Stats{Connections: s.st.conns.Load(), ActiveConnections: s.st.connsActive.Load(),
		Requests: s.st.requests.Load(), Errors: s.st.errors.Load(),
		BytesRead: s.st.bytesRead.Load(), BytesWritten: s.st.bytesWritten.Load()}
}

// ExportInfo describes a served export and its backing object.
type ExportInfo struct {
	Export
	Object tiering.ObjectID
}

// Exports lists the served exports in configuration order, with defaults
// filled in and the block size the object really has.
func (s *Server) Exports() []ExportInfo {
	out := make([]ExportInfo, 0, len(s.exports))
	for _, e := range s.exports {
		x := ExportInfo{Export: e.Export, Object: e.id}
		x.BlockSize = e.bs
		out = append(out, x)
	}
	return out
}

// NewServer binds every export to its object in be: the object named for
// it in opts.StateDir/StateFile when that object still exists, else a new
// one (kind label tiering.KindNBD, class tiering.DurabilityDevice, sized
// Export.Size, a hole that reads as zeros). An existing export smaller than
// its configured Size is grown; a larger one, or one not of that kind and
// class, is an error. An object of kind tiering.KindNBD with size 0 that
// no export names (left by a crash between Create and the map update) is
// deleted. Errors: a bad Export or Options, a duplicate name, a failing
// backend, an unreadable or unwritable state file.
//
// When the map names an object that no longer exists (the store dropped
// it, e.g. after a crash with writes never flushed), the export starts
// empty and an error is logged. ctx bounds the backend calls (creating,
// sizing and flushing the objects, deleting orphans); the server does not
// keep it.
func NewServer(ctx context.Context, be Backend, exports []Export, opts Options) (*Server, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if len(exports) == 0 {
		return nil, errors.New("nbd: no exports")
	}
	s := &Server{be: be, opts: o, log: o.Logger.With("component", "nbd"), byName: map[string]*export{},
		bufs: newBufPool(), zeros: make([]byte, 1<<20)}
	doc, err := catalog.LoadExports(o.StateDir)
	if err != nil {
		return nil, err
	}
	var reserved []Export // quota reservations to give back if NewServer fails
	defer func() {
		if reserved != nil {
			for _, e := range reserved {
				e.Quota.Adjust(-e.Size)
				e.Quota.AddAlloc(-e.Size)
			}
		}
	}()
	for _, cfg := range exports {
		e, err := cfg.withDefaults()
		if err != nil {
			return nil, err
		}
		if _, dup := s.byName[e.Name]; dup {
			return nil, fmt.Errorf("nbd: export %q declared twice", e.Name)
		}
		if e.Quota != nil {
			// Before the object exists: an export that does not fit is
			// not created.
			if !e.Quota.Reserve(e.Size) {
				return nil, fmt.Errorf("nbd: export %q: %w: its %d bytes do not fit namespace %q's quota (%d of %d bytes used)",
					e.Name, ErrQuota, e.Size, e.QuotaName, e.Quota.Used(), e.Quota.Limit)
			}
			e.Quota.AddAlloc(e.Size)
			reserved = append(reserved, e)
		}
		x, created, err := s.bind(ctx, e, &doc)
		if err != nil {
			return nil, err
		}
		if created {
			// Persist the name before the object gets a size, so that a
			// crash in between leaves only an empty orphan (deleted below
			// at the next start).
			if err := doc.Save(o.StateDir); err != nil {
				return nil, err
			}
		}
		if err := s.size(ctx, x); err != nil {
			return nil, err
		}
		if created {
			// Record the new object clean now, so a crash before the first
			// client FLUSH does not make the store drop it.
			if err := be.Flush(ctx, x.id); err != nil {
				return nil, fmt.Errorf("nbd: export %q: flush new object: %w", x.Name, err)
			}
		}
		s.exports = append(s.exports, x)
		s.byName[x.Name] = x
	}
	s.deleteOrphans(ctx, doc)
	reserved = nil // served: the reservations stand
	return s, nil
}

// ErrQuota is returned (wrapped) by NewServer for an export whose size
// does not fit its namespace's quota.
var ErrQuota = errors.New("quota exceeded")

// bind finds or creates the object of e; created reports a new object
// (doc updated, not yet saved).
func (s *Server) bind(ctx context.Context, e Export, doc *catalog.ExportMap) (*export, bool, error) {
	if ent, ok := doc.Exports[e.Name]; ok {
		info, err := s.be.Stat(ent.ID)
		switch {
		case err == nil && info.Kind == tiering.KindNBD && info.Durability == tiering.DurabilityDevice:
			if info.BlockSize != e.BlockSize {
				s.log.Warn("export keeps the block size it was created with", "export", e.Name,
					"block_size", info.BlockSize, "configured", e.BlockSize)
			}
			return &export{Export: e, id: ent.ID, bs: info.BlockSize}, false, nil
		case err == nil && info.Kind != tiering.KindNBD:
			return nil, false, fmt.Errorf("nbd: export %q: object %d has kind %q, not %q", e.Name, ent.ID, info.Kind, tiering.KindNBD)
		case err == nil:
			return nil, false, fmt.Errorf("nbd: export %q: object %d is of durability class %v, not %v", e.Name, ent.ID, info.Durability, tiering.DurabilityDevice)
		case errors.Is(err, tiering.ErrNotExist):
			s.log.Error("export object is gone from the store; the export starts empty (were writes not flushed before a crash?)",
				"export", e.Name, "object", ent.ID)
		default:
			return nil, false, fmt.Errorf("nbd: export %q: stat object %d: %w", e.Name, ent.ID, err)
		}
	}
	id, err := s.be.CreateWith(e.Namespace, e.BlockSize, tiering.CreateOptions{Kind: tiering.KindNBD, Durability: tiering.DurabilityDevice})
	if err != nil {
		return nil, false, fmt.Errorf("nbd: export %q: create object: %w", e.Name, err)
	}
	doc.Exports[e.Name] = catalog.ExportEntry{ID: id, Namespace: e.Namespace, Created: time.Now().UTC()}
	s.log.Info("export created", "export", e.Name, "object", id, "size", e.Size, "block_size", e.BlockSize)
	return &export{Export: e, id: id, bs: e.BlockSize}, true, nil
}

// size makes x's object exactly x.Size bytes (growing only).
func (s *Server) size(ctx context.Context, x *export) error {
	info, err := s.be.Stat(x.id)
	if err != nil {
		return fmt.Errorf("nbd: export %q: stat object %d: %w", x.Name, x.id, err)
	}
	switch {
	case info.Size == x.Size:
		return nil
	case info.Size > x.Size:
		return fmt.Errorf("nbd: export %q is %d bytes, configured %d: shrinking an export is refused", x.Name, info.Size, x.Size)
	}
	if err := s.be.Truncate(ctx, x.id, x.Size); err != nil {
		return fmt.Errorf("nbd: export %q: grow to %d bytes: %w", x.Name, x.Size, err)
	}
	return nil
}

// deleteOrphans deletes empty NBD objects that no map entry names.
func (s *Server) deleteOrphans(ctx context.Context, doc catalog.ExportMap) {
	for _, id := range doc.Orphans(s.be.Objects(), tiering.KindNBD) {
		if err := s.be.Delete(ctx, id); err != nil {
			s.log.Warn("delete orphan export object", "object", id, "err", err)
			continue
		}
		s.log.Info("deleted orphan export object", "object", id)
	}
}

// lookup returns the export a client names; "" is the first export.
func (s *Server) lookup(name string) *export {
	if name == "" {
		return s.exports[0]
	}
	return s.byName[name]
}

// Serve accepts connections on ln and serves them until ctx ends, then
// closes ln, lets requests in flight finish (up to Options.ShutdownGrace),
// closes every connection and returns nil once all its goroutines have
// stopped. It returns early with an error when Accept fails for good.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[*conn]struct{}{}
	stopped := make(chan struct{})
	defer func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.shutdown()
		}
		mu.Unlock()
		wg.Wait()
	}()
	// Close the listener when ctx ends so Accept returns.
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-ctx.Done():
			ln.Close()
		case <-stopped:
		}
	}()
	defer close(stopped)

	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.log.Warn("accept", "err", err, "retry_in", backoff)
				select {
				case <-time.After(backoff):
					continue
				case <-ctx.Done():
					return nil
				}
			}
			return fmt.Errorf("nbd: accept: %w", err)
		}
		backoff = 0
		mu.Lock()
		if len(conns) >= s.opts.MaxConns {
			mu.Unlock()
			s.log.Warn("connection refused: too many connections", "max", s.opts.MaxConns, "remote", nc.RemoteAddr().String())
			nc.Close()
			continue
		}
		c := s.newConn(nc)
		conns[c] = struct{}{}
		mu.Unlock()
		s.st.conns.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.st.connsActive.Add(1)
			defer s.st.connsActive.Add(-1)
			c.serve(ctx)
			mu.Lock()
			delete(conns, c)
			mu.Unlock()
		}()
	}
}
