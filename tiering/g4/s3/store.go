package s3

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/ctxmem/ctxmemd/tiering/g4"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// Store is a g4.ObjectStore on an S3 bucket, through minio-go. Object name
// n is stored under key Prefix + "/" + n (or n when Prefix is empty), user
// metadata as x-amz-meta-* headers (meta.go). A Put of at most PartSize
// bytes is one PUT, buffered so it can be retried; a larger one is a
// multipart upload. Every HTTP attempt has an idle deadline (Timeout) and
// failed attempts are retried at most Retries times, so no call hangs on
// a dead server. Safe for concurrent use.
type Store struct {
	client   *minio.Client
	core     minio.Core
	opts     Options
	prefix   string // Prefix + "/", or ""
	endpoint string // scheme://host[:port], for messages

	credSource  string // where the credentials came from, for messages
	accessKeyID string // the access key in use ("" if anonymous), for messages

	health *health
	reqs   *requestCounters
	bufs   sync.Pool // *[]byte of up to PartSize bytes for single PUTs
	// tagExpirable: this store's lifecycle rule is installed and the server
	// took a tagged PUT (SetLifecycleTTL), so PutExpirable tags.
	tagExpirable atomic.Bool
}

var _ g4.ObjectStore = (*Store)(nil)

// New opens the bucket described by opts and checks, with one listing
// request, that the endpoint answers, the credentials are accepted and
// the bucket exists (creating it if opts.CreateBucket). Errors name the
// problem: ErrBucketNotFound ("bucket X does not exist at endpoint Y"),
// ErrAccessDenied (with what to check: access key, secret key, token,
// permissions), an error wrapping tier.ErrUnavailable when the endpoint
// does not answer, or a configuration error (bad endpoint, prefix, CA
// file). ctx bounds the check.
func New(ctx context.Context, opts Options) (*Store, error) {
	host, secure, err := opts.normalize()
	if err != nil {
		return nil, err
	}
	s := &Store{opts: opts, health: newHealth(), reqs: &requestCounters{}}
	scheme := "https"
	if !secure {
		scheme = "http"
	}
	s.endpoint = scheme + "://" + host
	if opts.Prefix != "" {
		s.prefix = opts.Prefix + "/"
	}
	base, err := minio.DefaultTransport(secure)
	if err != nil {
		return nil, fmt.Errorf("s3: transport: %w", err)
	}
	base.DialContext = (&net.Dialer{Timeout: opts.Timeout, KeepAlive: 30 * time.Second}).DialContext
	base.TLSHandshakeTimeout = opts.Timeout
	base.ResponseHeaderTimeout = 0 // the idle watchdog covers it
	base.MaxIdleConnsPerHost = 64
	if opts.CAFile != "" {
		if !secure {
			return nil, fmt.Errorf("s3: ca=%s given for a plain-HTTP endpoint %s", opts.CAFile, s.endpoint)
		}
		pool, err := loadCA(opts.CAFile)
		if err != nil {
			return nil, err
		}
		if base.TLSClientConfig == nil {
			base.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		base.TLSClientConfig.RootCAs = pool
	}
	creds := s.credentials()
	lookup := minio.BucketLookupAuto
	switch opts.Addressing {
	case AddressPath:
		lookup = minio.BucketLookupPath
	case AddressVirtualHost:
		lookup = minio.BucketLookupDNS
	}
	s.client, err = minio.New(host, &minio.Options{
		Creds:        creds,
		Secure:       secure,
		Transport:    &idleTransport{base: base, idle: opts.Timeout, stats: s.reqs},
		Region:       opts.Region,
		BucketLookup: lookup,
		MaxRetries:   opts.Retries + 1, // minio-go counts the first attempt
	})
	if err != nil {
		return nil, fmt.Errorf("s3: client for %s: %w", s.endpoint, err)
	}
	s.core = minio.Core{Client: s.client}
	if err := s.check(ctx); err != nil {
		var cfgErr *startConfigError
		if opts.AllowUnreachable && errors.Is(err, tier.ErrUnavailable) && !errors.As(err, &cfgErr) {
			return s, nil // unhealthy (health records err) until a call is answered
		}
		return nil, err
	}
	return s, nil
}

// startConfigError marks a start-check failure that no retry can cure
// (HTTP against HTTPS, an untrusted certificate) although the HTTP client,
// not the server, reported it.
type startConfigError struct{ err error }

func (e *startConfigError) Error() string { return e.err.Error() }
func (e *startConfigError) Unwrap() error { return e.err }

// Is makes errors.Is(err, ErrEndpointConfig) true.
func (e *startConfigError) Is(target error) bool { return target == ErrEndpointConfig }

// credentials picks the credential source (config, environment, shared
// file, anonymous) and remembers it for error messages. The environment
// and file are read through minio-go's providers, which also refresh them.
func (s *Store) credentials() *credentials.Credentials {
	o := s.opts
	if o.AccessKey != "" {
		s.credSource, s.accessKeyID = "from the config", o.AccessKey
		return credentials.NewStaticV4(o.AccessKey, o.SecretKey, o.SessionToken)
	}
	file := &credentials.FileAWSCredentials{Filename: o.CredentialsFile, Profile: o.Profile}
	env := &credentials.EnvAWS{}
	if v, _ := env.Retrieve(); v.AccessKeyID != "" && v.SecretAccessKey != "" {
		s.credSource, s.accessKeyID = "from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY", v.AccessKeyID
	} else if v, err := file.Retrieve(); err == nil && v.AccessKeyID != "" {
		where := o.CredentialsFile
		if where == "" {
			where = "the AWS shared credentials file"
		}
		s.credSource, s.accessKeyID = "from "+where, v.AccessKeyID
	} else {
		s.credSource = "none found: anonymous"
	}
	return credentials.NewChainCredentials([]credentials.Provider{env, file})
}

// loadCA returns the system pool plus the PEM certificates of file.
func loadCA(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("s3: CA file: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("s3: CA file %s holds no PEM certificate", file)
	}
	return pool, nil
}

// check lists at most one key of the bucket: the cheapest request that
// proves the endpoint answers, the credentials are valid (a GET carries the
// S3 error code, unlike HEAD) and the bucket exists.
func (s *Store) check(ctx context.Context) error {
	err := s.listOne(ctx)
	if er, ok := s3Error(err); ok && er.Code == codeNoSuchBucket {
		if !s.opts.CreateBucket {
			return fmt.Errorf("s3: %w (create it, or set create_bucket=true)", s.bucketMissing())
		}
		if err := s.client.MakeBucket(ctx, s.opts.Bucket, minio.MakeBucketOptions{Region: s.opts.Region}); err != nil {
			if er, ok := s3Error(err); !ok || (er.Code != "BucketAlreadyOwnedByYou" && er.Code != "BucketAlreadyExists") {
				return s.startErr(ctx, fmt.Errorf("create bucket: %w", err))
			}
		}
		err = s.listOne(ctx)
	}
	return s.startErr(ctx, err)
}

func (s *Store) listOne(ctx context.Context) error {
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for obj := range s.client.ListObjectsIter(lctx, s.opts.Bucket, minio.ListObjectsOptions{
		Prefix: s.prefix, Recursive: true, MaxKeys: 1,
	}) {
		return obj.Err
	}
	return ctx.Err()
}

// startErr turns an error of the start check into the message New returns.
func (s *Store) startErr(ctx context.Context, err error) error {
	if err == nil {
		s.health.ok()
		return nil
	}
	if er, ok := s3Error(err); ok {
		switch {
		case er.Code == codeNoSuchBucket:
			return fmt.Errorf("s3: %w", s.bucketMissing())
		case errors.Is(s.classifyS3("", er), ErrAccessDenied):
			return fmt.Errorf("s3: %w", s.denied(er))
		}
	}
	msg := err.Error()
	hint := ""
	switch {
	case strings.Contains(msg, "server gave HTTP response to HTTPS client"):
		hint = " (the endpoint speaks plain HTTP: set insecure=true or an http:// endpoint)"
	case strings.Contains(msg, "certificate signed by unknown authority") || strings.Contains(msg, "x509:"):
		hint = " (TLS certificate not trusted: give the server's CA with ca=/path/to/ca.pem)"
	}
	e := s.classify(ctx, "open bucket "+s.opts.Bucket, "", err)
	if hint != "" {
		return &startConfigError{fmt.Errorf("%w%s", e, hint)}
	}
	return e
}

// Options returns the options in effect (defaults filled; secrets
// included, so do not log it: use Options.String).
func (s *Store) Options() Options { return s.opts }

// String describes the store without secrets (Options.String).
func (s *Store) String() string { return s.opts.String() }

// Healthy reports whether the last call was answered by the server (see
// Health).
func (s *Store) Healthy() bool { return s.health.get().Healthy }

// LastError returns the most recent unavailable error, or nil if there
// was none since New. It is kept after the store recovers; see Health for
// when it happened.
func (s *Store) LastError() error { return s.health.get().LastError }

// Health returns the store's health record.
func (s *Store) Health() Health { return s.health.get() }

// RequestStats returns the HTTP requests sent so far (every attempt).
func (s *Store) RequestStats() RequestStats { return s.reqs.snapshot() }

var _ g4.RequestCounter = (*Store)(nil)

// RequestCounts implements g4.RequestCounter: RequestStats by the types a
// provider bills (multipart POSTs count as PUTs; other methods are left
// out).
func (s *Store) RequestCounts() tier.Requests {
	r := s.reqs.snapshot()
	return tier.Requests{Put: int64(r.Put + r.Post), Get: int64(r.Get), Head: int64(r.Head),
		List: int64(r.List), Delete: int64(r.Delete)}
}

// Ping sends one request (a one-key listing of the bucket) and updates
// Health; a prober can call it while no traffic flows, so status recovers
// on its own. Errors as for the store's calls.
func (s *Store) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("s3 ping: %w", err)
	}
	return s.classify(ctx, "ping", "", s.listOne(ctx))
}

// key returns the S3 key of object name (already validated).
func (s *Store) key(name string) (string, error) {
	k := s.prefix + name
	if len(k) > g4.MaxNameBytes {
		return "", fmt.Errorf("%w: name of %d bytes is over %d with prefix %q", g4.ErrInvalid, len(name), g4.MaxNameBytes, s.opts.Prefix)
	}
	return k, nil
}

// checkName validates name and returns its key.
func (s *Store) checkName(ctx context.Context, op, name string) (string, error) {
	if err := g4.ValidateName(name); err != nil {
		return "", fmt.Errorf("s3 %s: %w", op, err)
	}
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("s3 %s %q: %w", op, name, err)
	}
	return s.key(name)
}
