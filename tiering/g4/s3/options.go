package s3

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/minio/minio-go/v7/pkg/s3utils"

	"github.com/ctxmem/ctxmemd/tiering/g4"
)

// Addressing selects how requests name the bucket.
type Addressing int

// Addressing styles.
const (
	// AddressAuto lets minio-go choose: virtual-host style for AWS and
	// other known clouds, path style for any other endpoint.
	AddressAuto Addressing = iota
	// AddressPath puts the bucket in the path: http://host/bucket/key.
	AddressPath
	// AddressVirtualHost puts the bucket in the host name:
	// http://bucket.host/key.
	AddressVirtualHost
)

// String returns "auto", "path" or "virtual-host".
func (a Addressing) String() string {
	switch a {
	case AddressPath:
		return "path"
	case AddressVirtualHost:
		return "virtual-host"
	}
	return "auto"
}

// Options configure a Store. Zero values take the defaults noted.
type Options struct {
	// Endpoint is "host[:port]", or "http://host[:port]" /
	// "https://host[:port]" (the scheme then overrides Insecure). Default:
	// $AWS_ENDPOINT_URL_S3, then $AWS_ENDPOINT_URL, then s3.amazonaws.com.
	Endpoint string
	// Bucket is the bucket name (required).
	Bucket string
	// Prefix is prepended with a '/' to every object name, so a bucket can
	// be shared ("ctxmem/host1"); "" stores names at the bucket's root.
	// Leading and trailing '/' are ignored; the rest must be a valid
	// g4 object name.
	Prefix string
	// Region is the bucket's region. Default: $AWS_REGION, then
	// $AWS_DEFAULT_REGION, else asked of the server (one GetBucketLocation
	// request, cached).
	Region string
	// Addressing is path-style, virtual-host or auto (default).
	Addressing Addressing
	// Insecure selects plain HTTP; the default is HTTPS.
	Insecure bool
	// CAFile is a PEM file of CA certificates trusted in addition to the
	// system pool (for a server with a private CA).
	CAFile string

	// AccessKey, SecretKey and SessionToken are static credentials. When
	// AccessKey is empty the credentials come from the environment
	// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), else
	// from the shared credentials file (CredentialsFile, or the AWS
	// default ~/.aws/credentials and ~/.aws/config), else none
	// (anonymous).
	AccessKey, SecretKey, SessionToken string
	// CredentialsFile is the shared credentials file to read; "" means the
	// AWS defaults ($AWS_SHARED_CREDENTIALS_FILE, ~/.aws/credentials).
	CredentialsFile string
	// Profile is the profile of the shared credentials file; "" means
	// $AWS_PROFILE or "default".
	Profile string

	// Timeout is the idle deadline of every HTTP request attempt: an
	// attempt during which no byte is sent or received for Timeout is
	// abandoned (default 2 s). It bounds connect, TLS, time to first byte
	// and stalls, not the length of a transfer that keeps moving.
	Timeout time.Duration
	// Retries is how many times a failed request is retried after the
	// first attempt (default 2; negative means no retry). Backoff is
	// minio-go's: 200 ms × 2^attempt with full jitter, each step capped at
	// 1 s, and minio-go also waits one step after the last attempt. A call
	// to a dead or hung server therefore fails within
	// (Retries+1) × Timeout + Σ_{i=0..Retries} min(1 s, 200 ms × 2^i)
	// (7.4 s with the defaults; a refused connection fails in the backoff
	// time alone), and within the caller's context deadline if that is
	// earlier (the G4 tier gives every call 2 s).
	Retries int
	// PartSize is the multipart threshold and part size in bytes: a Put of
	// at most PartSize bytes is one PUT request, a larger one is a
	// multipart upload of PartSize parts (default 16 MiB, minimum 5 MiB,
	// S3's smallest part).
	PartSize int64
	// CreateBucket makes New create the bucket when it does not exist;
	// otherwise a missing bucket fails New with ErrBucketNotFound.
	CreateBucket bool
	// AllowUnreachable makes New return the store even when its start
	// check gets no answer (connection refused, timeouts, a hung server,
	// 5xx answers): the store then reports itself unhealthy (Healthy,
	// LastError) until a call is answered. Answers that reject the
	// configuration still fail New: a missing bucket (ErrBucketNotFound),
	// refused credentials (ErrAccessDenied), an HTTP/HTTPS mismatch or an
	// untrusted TLS certificate.
	AllowUnreachable bool
}

// Defaults of Options.
const (
	DefaultEndpoint = "s3.amazonaws.com"
	DefaultTimeout  = 2 * time.Second
	DefaultRetries  = 2
	DefaultPartSize = 16 << 20 // bytes
	MinPartSize     = 5 << 20  // bytes: S3's smallest multipart part
)

// Check reports the errors New would find in o without contacting the
// server: the bucket name, endpoint, prefix, part size and timeouts, that
// a CA file is readable and holds a certificate (and is given only for
// HTTPS), and that a credentials file given exists. A configuration front
// end calls it before it creates or mounts anything, so such mistakes are
// configuration errors. Credentials themselves are not looked up (they
// may come from the environment at New).
func (o Options) Check() error {
	_, secure, err := o.normalize()
	if err != nil {
		return err
	}
	if o.CredentialsFile != "" {
		if _, err := os.Stat(o.CredentialsFile); err != nil {
			return fmt.Errorf("s3: credentials_file: %w", err)
		}
	}
	if o.CAFile != "" {
		if !secure {
			return fmt.Errorf("s3: ca=%s given for a plain-HTTP endpoint %s", o.CAFile, o.Endpoint)
		}
		if _, err := loadCA(o.CAFile); err != nil {
			return err
		}
	}
	return nil
}

// normalize fills defaults and checks o. It returns the endpoint as
// host[:port] and whether TLS is used.
func (o *Options) normalize() (host string, secure bool, err error) {
	if o.Bucket == "" {
		return "", false, errors.New("s3: no bucket given")
	}
	if err := s3utils.CheckValidBucketName(o.Bucket); err != nil {
		return "", false, fmt.Errorf("s3: bucket %q: %w", o.Bucket, err)
	}
	if o.Endpoint == "" {
		o.Endpoint = firstEnv("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
	}
	if o.Endpoint == "" {
		o.Endpoint = DefaultEndpoint
	}
	host, secure = o.Endpoint, !o.Insecure
	if strings.Contains(host, "://") {
		u, err := url.Parse(host)
		if err != nil {
			return "", false, fmt.Errorf("s3: endpoint %q: %w", o.Endpoint, err)
		}
		switch u.Scheme {
		case "http":
			secure = false
		case "https":
			secure = true
		default:
			return "", false, fmt.Errorf("s3: endpoint %q: scheme must be http or https", o.Endpoint)
		}
		if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
			return "", false, fmt.Errorf("s3: endpoint %q: only scheme://host[:port] is allowed", o.Endpoint)
		}
		host = u.Host
	}
	if host == "" || strings.ContainsAny(host, "/?#@") {
		return "", false, fmt.Errorf("s3: endpoint %q: want host[:port]", o.Endpoint)
	}
	if strings.Contains(host, ":") && !strings.HasSuffix(host, "]") {
		if _, _, err := net.SplitHostPort(host); err != nil {
			return "", false, fmt.Errorf("s3: endpoint %q: %w", o.Endpoint, err)
		}
	}
	o.Insecure = !secure
	o.Prefix = strings.Trim(o.Prefix, "/")
	if o.Prefix != "" {
		if err := g4.ValidateName(o.Prefix); err != nil {
			return "", false, fmt.Errorf("s3: prefix: %w", err)
		}
	}
	if o.Region == "" {
		o.Region = firstEnv("AWS_REGION", "AWS_DEFAULT_REGION")
	}
	switch o.Addressing {
	case AddressAuto, AddressPath, AddressVirtualHost:
	default:
		return "", false, fmt.Errorf("s3: unknown addressing %d", o.Addressing)
	}
	if (o.AccessKey == "") != (o.SecretKey == "") {
		return "", false, errors.New("s3: access key and secret key must be given together")
	}
	if o.Timeout < 0 {
		return "", false, fmt.Errorf("s3: negative timeout %v", o.Timeout)
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Retries == 0 {
		o.Retries = DefaultRetries
	}
	if o.Retries < 0 {
		o.Retries = 0
	}
	if o.Retries > 10 {
		return "", false, fmt.Errorf("s3: %d retries: at most 10", o.Retries)
	}
	if o.PartSize == 0 {
		o.PartSize = DefaultPartSize
	}
	if o.PartSize < MinPartSize || o.PartSize > 5<<30 {
		return "", false, fmt.Errorf("s3: part size %d bytes: want 5 MiB to 5 GiB", o.PartSize)
	}
	return host, secure, nil
}

// String describes the options for logs and status, without secrets:
// "s3://bucket/prefix at https://endpoint (region r, path-style)".
func (o Options) String() string {
	scheme := "https"
	if o.Insecure {
		scheme = "http"
	}
	ep := o.Endpoint
	if !strings.Contains(ep, "://") {
		ep = scheme + "://" + ep
	}
	s := "s3://" + o.Bucket
	if o.Prefix != "" {
		s += "/" + o.Prefix
	}
	region := o.Region
	if region == "" {
		region = "auto"
	}
	return fmt.Sprintf("%s at %s (region %s, %s addressing)", s, ep, region, o.Addressing)
}

func firstEnv(names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return ""
}
