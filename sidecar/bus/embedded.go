package bus

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// EmbeddedOptions configure the in-process NATS server.
type EmbeddedOptions struct {
	// StoreDir holds JetStream's file store (streams, consumers, buckets).
	StoreDir string
	// Listen is "host:port" for a client listener other processes (other
	// hosts, `ctxmemd scheduler` replicas, the nats CLI) can use; empty
	// means none: only in-process connections.
	Listen string
	// MaxStoreBytes caps JetStream's file store (default 1 GiB).
	MaxStoreBytes int64
	// ServerName names the server (default "ctxmemd").
	ServerName string
	Log        *slog.Logger
}

// Embedded is an in-process NATS server with JetStream.
type Embedded struct {
	srv *server.Server
}

// StartEmbedded starts the server and waits until it accepts clients (up
// to 10 s). Errors: a bad Listen address, the port in use, a store dir
// that cannot be created.
func StartEmbedded(o EmbeddedOptions) (*Embedded, error) {
	if o.MaxStoreBytes == 0 {
		o.MaxStoreBytes = 1 << 30
	}
	if o.ServerName == "" {
		o.ServerName = "ctxmemd"
	}
	opts := &server.Options{
		ServerName:         o.ServerName,
		JetStream:          true,
		StoreDir:           o.StoreDir,
		JetStreamMaxStore:  o.MaxStoreBytes,
		JetStreamMaxMemory: 64 << 20,
		NoSigs:             true,
		NoLog:              true,
		DontListen:         o.Listen == "",
		MaxPayload:         4 << 20,
	}
	if o.Listen != "" {
		host, port, err := net.SplitHostPort(o.Listen)
		if err != nil {
			return nil, fmt.Errorf("embedded NATS listen %q: %w", o.Listen, err)
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			return nil, fmt.Errorf("embedded NATS listen %q: bad port", o.Listen)
		}
		opts.Host, opts.Port = host, p
		// Fail at once on a port in use (the server would only report it
		// after its start-up timeout).
		ln, err := net.Listen("tcp", o.Listen)
		if err != nil {
			return nil, fmt.Errorf("embedded NATS listen %s: %w", o.Listen, err)
		}
		ln.Close()
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded NATS: %w", err)
	}
	go srv.Start() // owned by the Embedded: Shutdown stops it and waits
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("embedded NATS did not start within 10 s (listen %q, store %s)", o.Listen, o.StoreDir)
	}
	if o.Log != nil {
		o.Log.Info("embedded NATS started", "listen", o.Listen, "store", o.StoreDir)
	}
	return &Embedded{srv: srv}, nil
}

// ClientURL returns the URL of the client listener, or "" without one.
func (e *Embedded) ClientURL() string {
	if e.srv.Addr() == nil {
		return ""
	}
	return e.srv.ClientURL()
}

// Shutdown stops the server and waits for it to finish.
func (e *Embedded) Shutdown() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
}
