package g4

import (
	"context"
	"errors"
	"fmt"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// probeName is the object Probe asks for; it never exists (Range ignores
// names that do not parse as blocks).
const probeName = "probe"

// Probe implements tier.Prober: one HEAD of an object that does not exist,
// bounded by ctx and TierOptions.Timeout. "No such object" is an answer
// (the backend works); an unreachable or failing backend is an error
// wrapping tier.ErrUnavailable.
func (t *Tier) Probe(ctx context.Context) error {
	if t.closed.Load() {
		return tier.ErrClosed
	}
	ctx, cancel := context.WithTimeout(ctx, t.opts.Timeout)
	defer cancel()
	_, err := t.store.Head(ctx, t.opts.Prefix+"/"+probeName)
	if err == nil || errors.Is(err, ErrNotExist) {
		return nil
	}
	if errors.Is(err, tier.ErrUnavailable) {
		return fmt.Errorf("g4 probe: %w", err)
	}
	return fmt.Errorf("g4 probe: %w: %w", tier.ErrUnavailable, err)
}
