package tiering

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestLogLimitedPerTier: the rate limit of a hot failure path's warning is
// per tier: a G3.5 pool whose gc deletes fail while G3's failed first gets
// its own line naming G3.5. Before, the limit was per message only, so the
// pool's failures were suppressed behind G3's line, and the next line
// (whichever tier failed then) carried their count: the log named G3 when
// it was the pool that hung.
func TestLogLimitedPerTier(t *testing.T) {
	var buf bytes.Buffer
	s := &Store{log: slog.New(slog.NewTextHandler(&buf, nil))}
	s.logLimited("gc delete failed, will retry", "tier", TierG3, "key", "ns/1/0@1", "err", "x")
	for range 3 {
		s.logLimited("gc delete failed, will retry", "tier", TierG35, "key", "ns/2/0@1", "err", "hung")
	}
	s.logLimited("gc delete failed, will retry", "tier", TierG3, "key", "ns/1/1@1", "err", "x")
	out := buf.String()
	if n := strings.Count(out, "\n"); n != 2 {
		t.Fatalf("%d lines; want one per tier:\n%s", n, out)
	}
	if !strings.Contains(out, "tier=G3.5 key=ns/2/0@1") {
		t.Fatalf("no line names the pool's failure:\n%s", out)
	}
}
