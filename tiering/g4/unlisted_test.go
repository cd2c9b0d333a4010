package g4_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/g4"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// refusingStore answers every listing with an error that is not an outage
// (as a store that rejects the request would).
type refusingStore struct{ g4.ObjectStore }

var errRefused = errors.New("listing refused")

func (r *refusingStore) List(context.Context, string, func(g4.ObjectAttrs) bool) error {
	return errRefused
}

// TestOpenUnlisted: a backend that does not answer at open fails NewTier,
// unless OpenUnlisted is set: the tier then opens unlisted and unhealthy
// within OpenTimeout, still serves Put/Get/Delete as the backend allows,
// and becomes listed (index whole, healthy) at its first Range that
// succeeds. A listing the backend refuses still fails NewTier.
func TestOpenUnlisted(t *testing.T) {
	l := newLocal(t, t.TempDir())
	seed := openTier(t, l, g4.TierOptions{})
	k := key(21, 0)
	mustPutBlock(t, seed, k, []byte("stored before the outage"))

	d := &deadStore{ObjectStore: l}
	d.dead.Store(true)
	opts := g4.TierOptions{Timeout: 20 * time.Millisecond, ListTimeout: 100 * time.Millisecond, OpenTimeout: 50 * time.Millisecond}
	if _, err := g4.NewTier(context.Background(), d, opts); !errors.Is(err, tier.ErrUnavailable) {
		t.Fatalf("NewTier on a dead backend without OpenUnlisted = %v; want ErrUnavailable", err)
	}
	opts.OpenUnlisted = true
	start := time.Now()
	tr := openTier(t, d, opts)
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("NewTier took %v on a dead backend; OpenTimeout is 50 ms", took)
	}
	if tr.Listed() || tr.Healthy() {
		t.Fatalf("unlisted tier: Listed %v Healthy %v; want both false", tr.Listed(), tr.Healthy())
	}
	if _, err := tr.Stat(context.Background(), k); !errors.Is(err, tier.ErrNotFound) {
		t.Fatalf("Stat before any listing = %v; want ErrNotFound (the index is empty)", err)
	}
	if _, err := get(tr, k, make([]byte, 64), 0); !errors.Is(err, tier.ErrUnavailable) {
		t.Fatalf("Get during the outage = %v; want ErrUnavailable", err)
	}
	if err := tr.Range(context.Background(), func(tier.Key, int64) bool { return true }); !errors.Is(err, tier.ErrUnavailable) {
		t.Fatalf("Range during the outage = %v; want ErrUnavailable", err)
	}
	if tr.Listed() {
		t.Fatal("a failed Range made the tier listed")
	}

	d.dead.Store(false)
	p := make([]byte, 64)
	if n, err := get(tr, k, p, 0); err != nil || string(p[:n]) != "stored before the outage" {
		t.Fatalf("Get once the backend answers = %q, %v", p[:n], err)
	}
	if tr.Listed() || tr.Healthy() {
		t.Fatal("a Get made the tier listed: only a whole listing may")
	}
	var seen []tier.Key
	if err := tr.Range(context.Background(), func(k tier.Key, _ int64) bool { seen = append(seen, k); return true }); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1 || seen[0] != k {
		t.Fatalf("Range = %v; want [%v]", seen, k)
	}
	if !tr.Listed() || !tr.Healthy() {
		t.Fatalf("after a Range: Listed %v Healthy %v; want both true", tr.Listed(), tr.Healthy())
	}
	if n, err := tr.Stat(context.Background(), k); err != nil || n != int64(len("stored before the outage")) {
		t.Fatalf("Stat after the listing = %d, %v", n, err)
	}

	// A refusal is not an outage: NewTier fails even with OpenUnlisted.
	if _, err := g4.NewTier(context.Background(), &refusingStore{l}, g4.TierOptions{OpenUnlisted: true}); !errors.Is(err, errRefused) || errors.Is(err, tier.ErrUnavailable) {
		t.Fatalf("NewTier on a refusing backend = %v; want the refusal, not ErrUnavailable", err)
	}
}
