package g4

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// ObjectStore is a pluggable object-storage backend, shaped after the S3 API
// so that an S3 implementation (minio-go) can sit behind it unchanged. The
// idea of one small interface per backend follows JuiceFS pkg/object
// (ObjectStorage); the method set and semantics here are our own.
//
// Names are '/'-separated keys of 1–1024 bytes of valid UTF-8 with no
// leading '/', no empty segment (so no "//" and no trailing '/') and no
// "." or ".." segment (ValidateName). Metadata is a small set of string
// pairs: keys of [a-z0-9-] (S3 lower-cases user metadata keys), values of
// printable ASCII, at most MaxMetaBytes in total (ValidateMeta).
//
// Errors: a missing object is reported as an error wrapping ErrNotExist; a
// bad name, bad metadata or bad range as an error wrapping ErrInvalid; a
// backend that does not answer (directory gone or read-only, endpoint
// down, deadline exceeded) as an error wrapping tier.ErrUnavailable; a full
// backend as tier.ErrNoSpace. Every method honours ctx (cancellation and
// deadline). Implementations are safe for concurrent use, and an object is
// replaced atomically: a reader sees the old or the new object whole.
type ObjectStore interface {
	// Put stores the object name with the bytes read from r and the
	// metadata meta (may be nil), replacing any earlier object of that
	// name. size is the number of bytes r yields, or -1 if unknown (S3
	// needs it to avoid a multipart upload); a reader that yields a
	// different count fails the Put and leaves any earlier object in place.
	// Put returns once the object is durable.
	Put(ctx context.Context, name string, r io.Reader, size int64, meta map[string]string) error
	// Get opens the whole object for reading and returns its metadata.
	// The caller closes the reader. ErrNotExist if missing.
	Get(ctx context.Context, name string) (io.ReadCloser, map[string]string, error)
	// GetRange opens bytes [off, off+length) of the object; length < 0
	// means to the end. The range is clipped at the end of the object;
	// off == size gives an empty reader, off > size or off < 0 gives
	// ErrInvalid. ErrNotExist if missing.
	GetRange(ctx context.Context, name string, off, length int64) (io.ReadCloser, error)
	// Head returns the object's size, modification time and metadata.
	// ErrNotExist if missing.
	Head(ctx context.Context, name string) (ObjectAttrs, error)
	// Delete removes the object; a missing object is not an error.
	Delete(ctx context.Context, name string) error
	// List calls fn for every object whose name starts with prefix (a plain
	// string prefix, as in S3: "a/b" matches "a/bc" and "a/b/c"), in
	// ascending byte order of name, until fn returns false. The Meta field
	// of the attributes is nil (S3 listings do not carry user metadata).
	// An empty prefix lists everything.
	List(ctx context.Context, prefix string, fn func(ObjectAttrs) bool) error
}

// ServerExpiry is implemented by an ObjectStore whose server can delete
// objects by itself at the TTL (an S3 bucket lifecycle rule,
// s3.Store.SetLifecycleTTL). The Tier writes a block that expiry may drop
// (not tier.Retainer-kept: a cache-class block) with PutExpirable and a
// kept one (an NBD export's) with Put, so a server-side rule can spare the
// kept ones. PutExpirable is Put otherwise (same arguments, errors and
// durability); it may mark the object (an object tag) only while the
// store's rule is installed, which ExpiresOnServer reports (false: the
// Tier does not ask which blocks are kept, and puts plainly).
type ServerExpiry interface {
	PutExpirable(ctx context.Context, name string, r io.Reader, size int64, meta map[string]string) error
	ExpiresOnServer() bool
}

// ObjectAttrs describes one stored object.
type ObjectAttrs struct {
	Name    string            // the object's name
	Size    int64             // object size in bytes (payload only)
	ModTime time.Time         // when the object was last stored (used for TTL)
	Meta    map[string]string // user metadata; nil in List results
}

// Errors of ObjectStore implementations (test with errors.Is).
var (
	// ErrNotExist: no object of that name.
	ErrNotExist = errors.New("object does not exist")
	// ErrInvalid: the name, metadata or range is not acceptable.
	ErrInvalid = errors.New("invalid object name, metadata or range")
)

// Limits of names and metadata (S3's: a key is at most 1024 bytes of UTF-8;
// user metadata is at most 2 KiB).
const (
	MaxNameBytes = 1024 // bytes
	MaxMetaBytes = 2048 // bytes: sum of len(key)+len(value) over all pairs
)

// ValidateName returns nil if name is an acceptable object name (see
// ObjectStore) and an error wrapping ErrInvalid otherwise.
func ValidateName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty name", ErrInvalid)
	case len(name) > MaxNameBytes:
		return fmt.Errorf("%w: name of %d bytes (max %d)", ErrInvalid, len(name), MaxNameBytes)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: name %q is not UTF-8", ErrInvalid, name)
	case strings.IndexByte(name, 0) >= 0:
		return fmt.Errorf("%w: name %q contains NUL", ErrInvalid, name)
	}
	for seg := range strings.SplitSeq(name, "/") {
		switch seg {
		case "":
			return fmt.Errorf("%w: name %q has an empty segment (leading, trailing or double '/')", ErrInvalid, name)
		case ".", "..":
			return fmt.Errorf("%w: name %q has a %q segment", ErrInvalid, name, seg)
		}
	}
	return nil
}

// ValidateMeta returns nil if meta is acceptable metadata (see ObjectStore)
// and an error wrapping ErrInvalid otherwise.
func ValidateMeta(meta map[string]string) error {
	total := 0
	for k, v := range meta {
		if k == "" {
			return fmt.Errorf("%w: empty metadata key", ErrInvalid)
		}
		for i := 0; i < len(k); i++ {
			c := k[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return fmt.Errorf("%w: metadata key %q: only [a-z0-9-] allowed", ErrInvalid, k)
			}
		}
		for i := 0; i < len(v); i++ {
			if v[i] < 0x20 || v[i] > 0x7e {
				return fmt.Errorf("%w: metadata value of %q: only printable ASCII allowed", ErrInvalid, k)
			}
		}
		total += len(k) + len(v)
	}
	if total > MaxMetaBytes {
		return fmt.Errorf("%w: metadata of %d bytes (max %d)", ErrInvalid, total, MaxMetaBytes)
	}
	return nil
}
