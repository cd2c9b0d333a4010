package g4

import (
	"context"
	"io"
	"sync/atomic"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// RequestCounter is implemented by stores that count the requests they
// send themselves (the S3 store counts HTTP requests, retries and listing
// pages included); Tier.Requests reports those counts when its store has
// them.
type RequestCounter interface {
	RequestCounts() tier.Requests
}

// reqCounters count the backend calls a Tier makes, by type.
type reqCounters struct {
	put, get, head, list, del atomic.Int64
}

// countingStore is the ObjectStore a Tier calls: it counts every call of
// the store it wraps (Get and GetRange as GET, one List call as one LIST)
// and passes it on.
type countingStore struct {
	ObjectStore
	c *reqCounters
}

func (s countingStore) Put(ctx context.Context, name string, r io.Reader, size int64, meta map[string]string) error {
	s.c.put.Add(1)
	return s.ObjectStore.Put(ctx, name, r, size, meta)
}

// PutExpirable passes a ServerExpiry put on; the Tier calls it only
// while expiresOnServer.
func (s countingStore) PutExpirable(ctx context.Context, name string, r io.Reader, size int64, meta map[string]string) error {
	s.c.put.Add(1)
	return s.ObjectStore.(ServerExpiry).PutExpirable(ctx, name, r, size, meta)
}

// expiresOnServer reports whether the wrapped store expires objects by
// itself now (ServerExpiry.ExpiresOnServer).
func (s countingStore) expiresOnServer() bool {
	se, ok := s.ObjectStore.(ServerExpiry)
	return ok && se.ExpiresOnServer()
}

func (s countingStore) Get(ctx context.Context, name string) (io.ReadCloser, map[string]string, error) {
	s.c.get.Add(1)
	return s.ObjectStore.Get(ctx, name)
}

func (s countingStore) GetRange(ctx context.Context, name string, off, length int64) (io.ReadCloser, error) {
	s.c.get.Add(1)
	return s.ObjectStore.GetRange(ctx, name, off, length)
}

func (s countingStore) Head(ctx context.Context, name string) (ObjectAttrs, error) {
	s.c.head.Add(1)
	return s.ObjectStore.Head(ctx, name)
}

func (s countingStore) Delete(ctx context.Context, name string) error {
	s.c.del.Add(1)
	return s.ObjectStore.Delete(ctx, name)
}

func (s countingStore) List(ctx context.Context, prefix string, fn func(ObjectAttrs) bool) error {
	s.c.list.Add(1)
	return s.ObjectStore.List(ctx, prefix, fn)
}

var _ tier.RequestCounter = (*Tier)(nil)

// Requests implements tier.RequestCounter: the requests sent to the
// object store since the tier opened, by type. When the store counts its
// own (RequestCounter, the S3 store) those counts are returned, covering
// retries, listing pages and every user of the store; otherwise the
// tier's calls (a List call counts once).
func (t *Tier) Requests() tier.Requests {
	if rc, ok := t.raw.(RequestCounter); ok {
		return rc.RequestCounts()
	}
	return t.CallCounts()
}

// CallCounts returns the tier's own backend calls by type (Get and
// GetRange as Get, a List call once), whatever the store counts.
func (t *Tier) CallCounts() tier.Requests {
	return tier.Requests{Put: t.req.put.Load(), Get: t.req.get.Load(), Head: t.req.head.Load(),
		List: t.req.list.Load(), Delete: t.req.del.Load()}
}
