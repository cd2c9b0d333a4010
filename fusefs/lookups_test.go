package fusefs

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// TestObserveLatency: every FUSE request the daemon answers is reported
// to Options.ObserveLatency with its op and a duration.
func TestObserveLatency(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	m := mount(t, nil, Options{NoPassthrough: true, Cache: CacheDirect, ObserveLatency: func(op string, d time.Duration) {
		if d < 0 {
			t.Errorf("%s: negative duration %v", op, d)
		}
		mu.Lock()
		seen[op]++
		mu.Unlock()
	}})
	p := filepath.Join(m.ns(""), "f")
	must(t, os.WriteFile(p, []byte("kv"), 0o644))
	if _, err := os.ReadFile(p); err != nil {
		t.Fatal(err)
	}
	must(t, os.Rename(p, p+"2"))
	must(t, os.Remove(p+"2"))
	mu.Lock()
	defer mu.Unlock()
	for _, op := range []string{"lookup", "create", "write", "open", "read", "rename", "unlink"} {
		if seen[op] == 0 {
			t.Errorf("no %s observed (%v)", op, seen)
		}
	}
}
