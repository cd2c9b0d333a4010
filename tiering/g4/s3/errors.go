package s3

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/minio/minio-go/v7"

	"github.com/ctxmem/ctxmemd/tiering/g4"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// Errors of New and of the store's calls (test with errors.Is). Both also
// wrap tier.ErrUnavailable when returned by a call after New: the store
// cannot serve until an operator acts.
var (
	// ErrBucketNotFound: the bucket does not exist at the endpoint.
	ErrBucketNotFound = errors.New("bucket does not exist")
	// ErrAccessDenied: the server refused the credentials (unknown access
	// key, wrong secret key, expired token, or no permission).
	ErrAccessDenied = errors.New("access denied")
	// ErrNotSupported: the server does not implement the request (for
	// example bucket lifecycle rules).
	ErrNotSupported = errors.New("not supported by this server")
	// ErrEndpointConfig: New's start check failed in a way no retry can
	// cure although the HTTP client, not the server, reported it: HTTPS
	// against a plain-HTTP endpoint, or a certificate not trusted. The
	// message says which setting to change.
	ErrEndpointConfig = errors.New("endpoint misconfigured")
	// errSizeMismatch: a Put reader yielded more or fewer bytes than size.
	errSizeMismatch = fmt.Errorf("%w: reader length differs from the size given", g4.ErrInvalid)
)

// S3 error codes the store distinguishes.
const (
	codeNoSuchKey             = "NoSuchKey"
	codeNoSuchBucket          = "NoSuchBucket"
	codeAccessDenied          = "AccessDenied"
	codeInvalidAccessKeyID    = "InvalidAccessKeyId"
	codeUserNotFound          = "XAdminUserNotFound" // versitygw's answer (404) for an unknown access key
	codeSignatureDoesNotMatch = "SignatureDoesNotMatch"
	codeExpiredToken          = "ExpiredToken"
	codeInvalidToken          = "InvalidToken"
	codeNotImplemented        = "NotImplemented"
	codeInvalidRange          = "InvalidRange"
	codeNoSuchLifecycle       = "NoSuchLifecycleConfiguration"
)

// s3Error returns the S3 error response inside err, if any.
func s3Error(err error) (minio.ErrorResponse, bool) {
	var er minio.ErrorResponse
	if errors.As(err, &er) && (er.Code != "" || er.StatusCode != 0) {
		return er, true
	}
	return er, false
}

// classify maps an error of a minio-go call on object key to the
// ObjectStore error contract (see g4.ObjectStore) and records the outcome
// in the store's health. ctx is the caller's context: its own
// cancellation passes through as context.Canceled; its deadline running
// out wraps both context.DeadlineExceeded and tier.ErrUnavailable.
func (s *Store) classify(ctx context.Context, op, name string, err error) error {
	if err == nil {
		s.health.ok()
		return nil
	}
	what := fmt.Sprintf("s3 %s %q", op, name)
	if name == "" {
		what = "s3 " + op
	}
	if errors.Is(err, errSizeMismatch) {
		return fmt.Errorf("%s: %w", what, err)
	}
	if cerr := ctx.Err(); cerr != nil {
		if errors.Is(cerr, context.Canceled) {
			return fmt.Errorf("%s: %w", what, cerr)
		}
		e := fmt.Errorf("%s: %w: no answer from %s before the deadline: %w", what, tier.ErrUnavailable, s.endpoint, cerr)
		s.health.fail(e)
		return e
	}
	if er, ok := s3Error(err); ok {
		e := s.classifyS3(what, er)
		if errors.Is(e, tier.ErrUnavailable) {
			s.health.fail(e)
		} else {
			s.health.ok()
		}
		return e
	}
	// Anything else came from the HTTP client (refused, reset, stalled,
	// TLS) or minio-go's own checks; the server did not answer.
	e := fmt.Errorf("%s: %w: no answer from %s: %w", what, tier.ErrUnavailable, s.endpoint, err)
	s.health.fail(e)
	return e
}

// classifyS3 maps an S3 error response.
func (s *Store) classifyS3(what string, er minio.ErrorResponse) error {
	detail := er.Code
	if er.Message != "" {
		detail += ": " + er.Message
	}
	switch {
	case er.Code == codeNoSuchKey:
		return fmt.Errorf("%s: %w", what, g4.ErrNotExist)
	case er.Code == codeNoSuchBucket:
		return fmt.Errorf("%s: %w: %w", what, tier.ErrUnavailable, s.bucketMissing())
	case er.Code == codeAccessDenied || er.Code == codeInvalidAccessKeyID || er.Code == codeUserNotFound || er.Code == codeSignatureDoesNotMatch ||
		er.Code == codeExpiredToken || er.Code == codeInvalidToken || er.StatusCode == http.StatusForbidden:
		return fmt.Errorf("%s: %w: %w", what, tier.ErrUnavailable, s.denied(er))
	case er.Code == codeNotImplemented || er.StatusCode == http.StatusNotImplemented:
		return fmt.Errorf("%s: %w (%s, %s)", what, ErrNotSupported, s.endpoint, detail)
	case er.StatusCode >= 500 || er.StatusCode == http.StatusRequestTimeout || er.StatusCode == http.StatusTooManyRequests:
		return fmt.Errorf("%s: %w: server %s answered %d %s", what, tier.ErrUnavailable, s.endpoint, er.StatusCode, detail)
	case er.StatusCode == http.StatusBadRequest:
		return fmt.Errorf("%s: %w: server %s rejected the request: %s", what, g4.ErrInvalid, s.endpoint, detail)
	}
	return fmt.Errorf("%s: server %s answered %d %s", what, s.endpoint, er.StatusCode, detail)
}

// bucketMissing is the error for a bucket that does not exist.
func (s *Store) bucketMissing() error {
	return &bucketMissingError{bucket: s.opts.Bucket, endpoint: s.endpoint}
}

// bucketMissingError reads "bucket X does not exist at endpoint Y" and
// matches ErrBucketNotFound.
type bucketMissingError struct{ bucket, endpoint string }

// Error implements error.
func (e *bucketMissingError) Error() string {
	return fmt.Sprintf("bucket %q does not exist at endpoint %s", e.bucket, e.endpoint)
}

// Is makes errors.Is(err, ErrBucketNotFound) true.
func (e *bucketMissingError) Is(target error) bool { return target == ErrBucketNotFound }

// denied explains an access-denied answer in terms of what to check.
func (s *Store) denied(er minio.ErrorResponse) error {
	var hint string
	switch er.Code {
	case codeInvalidAccessKeyID, codeUserNotFound:
		hint = fmt.Sprintf("the server does not know access key %q (%s): check the access key", s.accessKeyID, s.credSource)
	case codeSignatureDoesNotMatch:
		hint = fmt.Sprintf("the signature does not match for access key %q (%s): check the secret key (and the region)", s.accessKeyID, s.credSource)
	case codeExpiredToken, codeInvalidToken:
		hint = fmt.Sprintf("the session token of access key %q (%s) is expired or invalid: refresh the credentials", s.accessKeyID, s.credSource)
	default:
		if s.accessKeyID == "" {
			hint = "no credentials were found (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, the shared credentials file of the URL's profile= and credentials_file=, or ~/.aws/credentials) and anonymous access is refused: check the access key"
		} else {
			hint = fmt.Sprintf("check the access key %q (%s), the secret key and the key's permissions on bucket %q", s.accessKeyID, s.credSource, s.opts.Bucket)
		}
	}
	return fmt.Errorf("%w at endpoint %s: %s (%s)", ErrAccessDenied, s.endpoint, hint, er.Code)
}
