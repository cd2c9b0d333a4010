package g4_test

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ctxmem/ctxmemd/tiering/g4"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// expiryStore records which objects were written with PutExpirable (a
// store whose server expires them by a rule, as S3 with a lifecycle rule).
type expiryStore struct {
	g4.ObjectStore
	mu        sync.Mutex
	expirable map[string]bool
	on        bool // ExpiresOnServer
}

func (s *expiryStore) note(name string, expirable bool) {
	s.mu.Lock()
	s.expirable[name] = expirable
	s.mu.Unlock()
}

func (s *expiryStore) Put(ctx context.Context, name string, r io.Reader, size int64, meta map[string]string) error {
	s.note(name, false)
	return s.ObjectStore.Put(ctx, name, r, size, meta)
}

func (s *expiryStore) ExpiresOnServer() bool { return s.on }

func (s *expiryStore) PutExpirable(ctx context.Context, name string, r io.Reader, size int64, meta map[string]string) error {
	s.note(name, true)
	return s.ObjectStore.Put(ctx, name, r, size, meta)
}

// TestServerExpiryOnlyForBlocksExpiryMayDrop: a block the retainer keeps
// (an NBD export's) is written with a plain Put, so a server-side expiry
// rule never deletes it; other blocks and packs go through PutExpirable.
func TestServerExpiryOnlyForBlocksExpiryMayDrop(t *testing.T) {
	st := &expiryStore{ObjectStore: newLocal(t, t.TempDir()), expirable: map[string]bool{}, on: true}
	kept := func(k tier.Key) bool { return k.Object == 1 }
	tr := openTier(t, st, g4.TierOptions{Retain: kept})
	ctx := context.Background()
	data := bytes.Repeat([]byte{7}, 4096)
	for _, k := range []tier.Key{{Namespace: "ns", Object: 1, Gen: 1}, {Namespace: "ns", Object: 2, Gen: 1}} {
		if err := tr.Put(ctx, k, data); err != nil {
			t.Fatal(err)
		}
	}
	pk := []tier.Key{{Namespace: "ns", Object: 3, Gen: 1, Index: 0}, {Namespace: "ns", Object: 3, Gen: 1, Index: 1}}
	if _, err := tr.PutPack(ctx, pk, [][]byte{data, data}); err != nil {
		t.Fatal(err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	var packs int
	for name, exp := range st.expirable {
		switch {
		case strings.Contains(name, "/ns/0000000000000001/"):
			if exp {
				t.Errorf("kept block %s written with PutExpirable", name)
			}
		case strings.Contains(name, "/ns/0000000000000003/"):
			packs++
			if !exp {
				t.Errorf("pack %s written with a plain Put", name)
			}
		default:
			if !exp {
				t.Errorf("cache block %s written with a plain Put", name)
			}
		}
	}
	if len(st.expirable) != 3 || packs != 1 {
		t.Fatalf("objects written: %v", st.expirable)
	}
}

// TestNoServerExpiryPutsPlainly: while the store does not expire on the
// server, every put is plain and the retainer (a lookup in the core per
// put) is not asked.
func TestNoServerExpiryPutsPlainly(t *testing.T) {
	st := &expiryStore{ObjectStore: newLocal(t, t.TempDir()), expirable: map[string]bool{}}
	var asked atomic.Int64
	tr := openTier(t, st, g4.TierOptions{Retain: func(tier.Key) bool { asked.Add(1); return false }})
	data := bytes.Repeat([]byte{7}, 4096)
	if err := tr.Put(context.Background(), tier.Key{Namespace: "ns", Object: 2, Gen: 1}, data); err != nil {
		t.Fatal(err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for name, exp := range st.expirable {
		if exp {
			t.Errorf("%s written with PutExpirable while the store does not expire on the server", name)
		}
	}
	if n := asked.Load(); n != 0 {
		t.Errorf("the retainer was asked %d times for plain puts", n)
	}
}
