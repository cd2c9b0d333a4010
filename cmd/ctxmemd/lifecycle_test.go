package main

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ctxmem/ctxmemd/tiering/g4/s3"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

func TestLifecycleOutcome(t *testing.T) {
	for _, c := range []struct {
		days  int
		err   error
		state string
		final bool
	}{
		{3, nil, "installed: tagged KV blocks expire after 3 days", true},
		{0, nil, "off", true},
		{3, fmt.Errorf("x: %w", s3.ErrNotSupported), "unsupported by the server", true},
		{0, fmt.Errorf("x: %w", s3.ErrNotSupported), "off", true},
		{3, fmt.Errorf("x: %w", s3.ErrAccessDenied), "denied", true},
		{3, fmt.Errorf("x: %w", tier.ErrUnavailable), "pending", false},
		{0, errors.New("reset by peer"), "pending", false},
	} {
		state, final := lifecycleOutcome(c.days, c.err)
		if !strings.HasPrefix(state, c.state) || final != c.final {
			t.Errorf("lifecycleOutcome(%d, %v) = %q, %v; want %q…, %v", c.days, c.err, state, final, c.state, c.final)
		}
	}
}
