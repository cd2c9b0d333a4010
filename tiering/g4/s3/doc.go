// Package s3 is ctxmemd's G4 backend on S3-compatible object storage: a
// g4.ObjectStore (Store) on github.com/minio/minio-go/v7, selected with
// --g4 s3://bucket/prefix?endpoint=host:port (ParseURL), under the G4 tier
// of package g4 (g4.NewTier), which adds the block header, CRC32C checks,
// index and expiry.
//
// Configuration (Options): endpoint, bucket, prefix, region, path-style or
// virtual-host addressing, HTTPS with an optional private CA (or plain
// HTTP), credentials from the config, the AWS_* environment variables or a
// shared credentials file, per-request idle deadline (default 2 s),
// bounded retries (default 2) and the multipart part size (default 16 MiB).
//
// Failure behaviour: every HTTP attempt is abandoned after Timeout without
// progress (transport.go) and retried at most Retries times with
// minio-go's capped exponential backoff, so a dead or hung server fails a
// call in bounded time with an error wrapping tier.ErrUnavailable, and
// Health reports the store degraded until a call is answered again. At
// start New names a missing bucket (ErrBucketNotFound) or refused
// credentials (ErrAccessDenied) instead of failing later.
//
// The s3test subpackage runs a real S3 server (versitygw) for the tests.
package s3
