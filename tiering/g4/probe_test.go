package g4_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/g4"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// hangingHead is a backend whose HEAD does not answer while dead.
type hangingHead struct{ *deadStore }

func (h hangingHead) Head(ctx context.Context, name string) (g4.ObjectAttrs, error) {
	if h.dead.Load() {
		return g4.ObjectAttrs{}, h.hang(ctx)
	}
	return h.deadStore.Head(ctx, name)
}

// TestProbe: a working backend answers the probe ("no such object" is an
// answer); a hung one fails it with tier.ErrUnavailable within the tier's
// call timeout; a closed tier says so.
func TestProbe(t *testing.T) {
	d := hangingHead{&deadStore{ObjectStore: newLocal(t, t.TempDir())}}
	tr := openTier(t, d, g4.TierOptions{Timeout: 50 * time.Millisecond})
	if err := tr.Probe(context.Background()); err != nil {
		t.Fatalf("probe of a working backend: %v", err)
	}
	d.dead.Store(true)
	start := time.Now()
	if err := tr.Probe(context.Background()); !errors.Is(err, tier.ErrUnavailable) {
		t.Fatalf("probe of a hung backend: %v; want ErrUnavailable", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("probe of a hung backend took %v; the call timeout is 50 ms", took)
	}
	d.dead.Store(false)
	tr.Close()
	if err := tr.Probe(context.Background()); !errors.Is(err, tier.ErrClosed) {
		t.Fatalf("probe of a closed tier: %v", err)
	}
}
