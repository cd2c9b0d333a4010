package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/minio/minio-go/v7"

	"github.com/ctxmem/ctxmemd/tiering/g4"
)

// Put implements g4.ObjectStore.Put. With size in [0, PartSize] the body is
// first read into a buffer (checking that r yields exactly size bytes) and
// sent as one PUT that minio-go can retry. A larger size is a multipart
// upload in PartSize parts, each buffered and retried by minio-go; a
// reader of the wrong length fails it before the upload completes, and
// minio-go aborts the upload. With size -1, up to PartSize bytes are
// buffered to choose between the two. S3 replaces an object atomically.
// Errors: g4.ErrInvalid (name, metadata, reader length), the caller's
// context error, tier.ErrUnavailable (see Store), other S3 errors.
func (s *Store) Put(ctx context.Context, name string, r io.Reader, size int64, meta map[string]string) error {
	return s.put(ctx, name, r, size, meta, false)
}

// PutExpirable implements g4.ServerExpiry: Put, with the object tagged
// ExpiryTag=ExpiryTagValue while this store's lifecycle rule is installed
// (SetLifecycleTTL), so that the rule expires it; untagged otherwise.
func (s *Store) PutExpirable(ctx context.Context, name string, r io.Reader, size int64, meta map[string]string) error {
	return s.put(ctx, name, r, size, meta, s.tagExpirable.Load())
}

// ExpiresOnServer implements g4.ServerExpiry: whether the lifecycle rule
// is installed and PutExpirable tags.
func (s *Store) ExpiresOnServer() bool { return s.tagExpirable.Load() }

// put is Put, tagging the object for the lifecycle rule when tagged.
func (s *Store) put(ctx context.Context, name string, r io.Reader, size int64, meta map[string]string, tagged bool) error {
	key, err := s.checkName(ctx, "put", name)
	if err != nil {
		return err
	}
	if err := g4.ValidateMeta(meta); err != nil {
		return fmt.Errorf("s3 put %q: %w", name, err)
	}
	if size < -1 {
		return fmt.Errorf("s3 put %q: %w: size %d", name, g4.ErrInvalid, size)
	}
	opts := minio.PutObjectOptions{UserMetadata: encodeMeta(meta), PartSize: uint64(s.opts.PartSize)}
	if tagged {
		opts.UserTags = map[string]string{ExpiryTag: ExpiryTagValue}
	}
	if size > s.opts.PartSize {
		_, err := s.client.PutObject(ctx, s.opts.Bucket, key, &exactReader{r: r, left: size}, size, opts)
		return s.classify(ctx, "put", name, err)
	}
	// At most PartSize+1 bytes: enough to tell a single PUT from multipart
	// (size -1), or to catch a reader longer than size.
	want := size
	if size < 0 {
		want = s.opts.PartSize
	}
	bp := s.buffer(int(want) + 1)
	buf := (*bp)[:want+1]
	n, rerr := io.ReadFull(r, buf)
	switch {
	case rerr == nil && size >= 0:
		s.bufs.Put(bp)
		return fmt.Errorf("s3 put %q: %w: more than %d bytes", name, errSizeMismatch, size)
	case rerr == nil: // size -1 and more than PartSize bytes: multipart
		body := io.MultiReader(bytes.NewReader(buf[:n]), r)
		_, err := s.client.PutObject(ctx, s.opts.Bucket, key, body, -1, opts)
		return s.classify(ctx, "put", name, err)
	case rerr != io.EOF && rerr != io.ErrUnexpectedEOF:
		s.bufs.Put(bp)
		return fmt.Errorf("s3 put %q: reading the body: %w", name, rerr)
	case size >= 0 && int64(n) != size:
		s.bufs.Put(bp)
		return fmt.Errorf("s3 put %q: %w: %d bytes, size %d", name, errSizeMismatch, n, size)
	}
	// An empty body goes unsigned (UNSIGNED-PAYLOAD, no aws-chunked
	// frame): versitygw 1.8 leaves the empty chunked frame unread on the
	// connection and answers it with a stray 400; nothing is lost, as
	// there are no bytes to sign.
	opts.DisableContentSha256 = n == 0
	_, err = s.client.PutObject(ctx, s.opts.Bucket, key, bytes.NewReader(buf[:n]), int64(n), opts)
	if err == nil {
		s.bufs.Put(bp) // an attempt still writing after an error might read it
	}
	return s.classify(ctx, "put", name, err)
}

// buffer returns a pooled buffer of capacity at least n bytes.
func (s *Store) buffer(n int) *[]byte {
	if b, ok := s.bufs.Get().(*[]byte); ok && cap(*b) >= n {
		return b
	}
	b := make([]byte, n)
	return &b
}

// Get implements g4.ObjectStore.Get with one GET request; the metadata
// comes from its headers. The reader must be read without pauses longer
// than Timeout and closed. Read errors follow the same contract.
func (s *Store) Get(ctx context.Context, name string) (io.ReadCloser, map[string]string, error) {
	key, err := s.checkName(ctx, "get", name)
	if err != nil {
		return nil, nil, err
	}
	rc, info, _, err := s.core.GetObject(ctx, s.opts.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, nil, s.classify(ctx, "get", name, err)
	}
	s.health.ok()
	return &objectReader{rc: rc, s: s, ctx: ctx, name: name}, decodeMeta(info.UserMetadata), nil
}

// GetRange implements g4.ObjectStore.GetRange with one ranged GET. S3
// answers 416 for a range starting at or past the end; GetRange then asks
// Head for the size to tell off == size (an empty reader) from off > size
// (g4.ErrInvalid). length 0 costs one HEAD. If a server ignores the Range
// header (no Content-Range in a 200 answer) the reader skips and clips
// the full body itself.
func (s *Store) GetRange(ctx context.Context, name string, off, length int64) (io.ReadCloser, error) {
	key, err := s.checkName(ctx, "get range", name)
	if err != nil {
		return nil, err
	}
	if off < 0 {
		return nil, fmt.Errorf("s3 get range %q: %w: offset %d", name, g4.ErrInvalid, off)
	}
	if length == 0 {
		return s.emptyRange(ctx, name, off)
	}
	var o minio.GetObjectOptions
	ranged := off > 0 || length > 0
	switch {
	case length < 0 && off > 0:
		err = o.SetRange(off, 0)
	case length > 0:
		err = o.SetRange(off, off+length-1)
	}
	if err != nil {
		return nil, fmt.Errorf("s3 get range %q: %w: %v", name, g4.ErrInvalid, err)
	}
	rc, _, hdr, err := s.core.GetObject(ctx, s.opts.Bucket, key, o)
	if err != nil {
		if er, ok := s3Error(err); ok && (er.Code == codeInvalidRange || er.StatusCode == 416) {
			return s.emptyRange(ctx, name, off)
		}
		return nil, s.classify(ctx, "get range", name, err)
	}
	s.health.ok()
	var body io.Reader = rc
	if ranged && hdr.Get("Content-Range") == "" { // the server sent the whole object
		if _, err := io.CopyN(io.Discard, rc, off); err != nil && err != io.EOF {
			rc.Close()
			return nil, s.classify(ctx, "get range", name, err)
		}
		if length > 0 {
			body = io.LimitReader(rc, length)
		}
	}
	return &objectReader{rc: rc, body: body, s: s, ctx: ctx, name: name}, nil
}

// emptyRange answers a range that holds no bytes: empty if off == size,
// g4.ErrInvalid if off > size, and ErrNotExist if the object is missing.
func (s *Store) emptyRange(ctx context.Context, name string, off int64) (io.ReadCloser, error) {
	a, err := s.Head(ctx, name)
	if err != nil {
		return nil, err
	}
	if off > a.Size {
		return nil, fmt.Errorf("s3 get range %q: %w: offset %d past the end (%d bytes)", name, g4.ErrInvalid, off, a.Size)
	}
	return io.NopCloser(strings.NewReader("")), nil
}

// Head implements g4.ObjectStore.Head with one HEAD request.
func (s *Store) Head(ctx context.Context, name string) (g4.ObjectAttrs, error) {
	key, err := s.checkName(ctx, "head", name)
	if err != nil {
		return g4.ObjectAttrs{}, err
	}
	info, err := s.client.StatObject(ctx, s.opts.Bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return g4.ObjectAttrs{}, s.classify(ctx, "head", name, err)
	}
	s.health.ok()
	return g4.ObjectAttrs{Name: name, Size: info.Size, ModTime: info.LastModified, Meta: decodeMeta(info.UserMetadata)}, nil
}

// Delete implements g4.ObjectStore.Delete with one DELETE request; S3
// answers success for a missing key, and NoSuchKey is also taken as
// success.
func (s *Store) Delete(ctx context.Context, name string) error {
	key, err := s.checkName(ctx, "delete", name)
	if err != nil {
		return err
	}
	err = s.classify(ctx, "delete", name, s.client.RemoveObject(ctx, s.opts.Bucket, key, minio.RemoveObjectOptions{}))
	if errors.Is(err, g4.ErrNotExist) {
		return nil
	}
	return err
}

// List implements g4.ObjectStore.List with ListObjectsV2 pages of up to
// 1000 keys (S3 returns keys in ascending UTF-8 byte order). Keys under the
// store's prefix that are not valid g4 names (written by other tools) are
// skipped. A prefix that no valid name can start with lists nothing
// without a request. Stopping early cancels the listing.
func (s *Store) List(ctx context.Context, prefix string, fn func(g4.ObjectAttrs) bool) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("s3 list %q: %w", prefix, err)
	}
	if !prefixCanMatch(prefix) {
		return nil
	}
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for obj := range s.client.ListObjectsIter(lctx, s.opts.Bucket, minio.ListObjectsOptions{
		Prefix: s.prefix + prefix, Recursive: true,
	}) {
		if obj.Err != nil {
			return s.classify(ctx, "list", prefix, obj.Err)
		}
		name, ok := strings.CutPrefix(obj.Key, s.prefix)
		if !ok || g4.ValidateName(name) != nil {
			continue
		}
		if !fn(g4.ObjectAttrs{Name: name, Size: obj.Size, ModTime: obj.LastModified}) {
			return nil
		}
	}
	if err := ctx.Err(); err != nil { // minio-go ends a cancelled listing silently
		return s.classify(ctx, "list", prefix, err)
	}
	s.health.ok()
	return nil
}

// prefixCanMatch reports whether some valid object name starts with
// prefix: every complete segment (before a '/') must be a valid segment;
// the last, partial one may be anything.
func prefixCanMatch(prefix string) bool {
	segs := strings.Split(prefix, "/")
	for _, seg := range segs[:len(segs)-1] {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
	}
	return !strings.ContainsRune(prefix, 0)
}
