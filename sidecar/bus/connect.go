// Package bus connects ctxmemd to its control bus: an embedded NATS server
// (the single-host default) or an existing NATS cluster, and creates the
// JetStream streams and key-value buckets named by package msg.
package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
)

// Options say how to reach NATS. Credentials are used as given: at most
// one of User/Password, Token, NKeySeedFile and CredsFile; TLS client
// certificates can be combined with any of them.
type Options struct {
	// URL is the server list ("nats://h1:4222,nats://h2:4222"); empty
	// with Embedded set means the in-process server.
	URL string
	// Embedded, when set, is used instead of URL (in-process connection).
	Embedded *Embedded
	// Name is the client name shown by the server (e.g. "ctxmemd host-a").
	Name               string
	User, Password     string
	Token              string
	NKeySeedFile       string // file holding an nkey user seed ("SU...")
	CredsFile          string // JWT + seed .creds file
	TLSCert, TLSKey    string // client certificate and key (PEM files)
	TLSCA              string // CA bundle to verify the server (PEM file)
	ConnectTimeout     time.Duration
	ReconnectWait      time.Duration
	ReconnectBufferCap int // bytes buffered by the client while reconnecting (default 8 MiB)
	Log                *slog.Logger
}

// Connect opens a connection that reconnects forever (every ReconnectWait,
// default 1 s): callers see a disconnected bus as failed publishes, not as
// a dead connection. The first connection attempt fails with the server's
// error (bad URL, refused, authentication) unless RetryOnFailedConnect
// semantics are wanted: then pass retry=true and Connect returns at once
// with a connection that keeps trying in the background.
func Connect(o Options, retry bool) (*nats.Conn, error) {
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	if o.ConnectTimeout == 0 {
		o.ConnectTimeout = 5 * time.Second
	}
	if o.ReconnectWait == 0 {
		o.ReconnectWait = time.Second
	}
	if o.ReconnectBufferCap == 0 {
		o.ReconnectBufferCap = 8 << 20
	}
	opts := []nats.Option{
		nats.Name(o.Name),
		nats.Timeout(o.ConnectTimeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(o.ReconnectWait),
		nats.ReconnectBufSize(o.ReconnectBufferCap),
		nats.RetryOnFailedConnect(retry),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("control bus disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("control bus reconnected", "server", nc.ConnectedUrlRedacted())
		}),
		nats.ErrorHandler(func(_ *nats.Conn, s *nats.Subscription, err error) {
			subj := ""
			if s != nil {
				subj = s.Subject
			}
			log.Warn("control bus error", "subject", subj, "err", err)
		}),
	}
	n := 0
	if o.User != "" || o.Password != "" {
		opts = append(opts, nats.UserInfo(o.User, o.Password))
		n++
	}
	if o.Token != "" {
		opts = append(opts, nats.Token(o.Token))
		n++
	}
	if o.NKeySeedFile != "" {
		opt, err := nats.NkeyOptionFromSeed(o.NKeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("nats nkey seed %s: %w", o.NKeySeedFile, err)
		}
		opts = append(opts, opt)
		n++
	}
	if o.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(o.CredsFile))
		n++
	}
	if n > 1 {
		return nil, errors.New("nats: give at most one of user/password, token, nkey seed and creds file")
	}
	if (o.TLSCert == "") != (o.TLSKey == "") {
		return nil, errors.New("nats: a TLS client certificate needs both cert and key")
	}
	if o.TLSCert != "" {
		opts = append(opts, nats.ClientCert(o.TLSCert, o.TLSKey))
	}
	if o.TLSCA != "" {
		opts = append(opts, nats.RootCAs(o.TLSCA))
	}
	url := o.URL
	if o.Embedded != nil {
		opts = append(opts, nats.InProcessServer(o.Embedded.srv))
		url = ""
	} else if url == "" {
		return nil, errors.New("nats: no URL and no embedded server")
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS %s: %w", redact(url), err)
	}
	return nc, nil
}

// redact hides a password in a URL for error messages.
func redact(url string) string {
	if url == "" {
		return "(in-process)"
	}
	return url
}

// WaitConnected waits until nc is connected or ctx ends.
func WaitConnected(ctx context.Context, nc *nats.Conn) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for !nc.IsConnected() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for NATS: %w", ctx.Err())
		case <-t.C:
		}
	}
	return nil
}
