package fusefs

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/tiering"
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

// TestRestoreBudget: an open for reading whose predicted restore exceeds
// the namespace's budget is a miss (ENOENT) that prestages the file, and
// the next open hits; opens for writing and files within budget are
// served as usual.
func TestRestoreBudget(t *testing.T) {
	m := mount(t, nil, Options{NoPassthrough: true, RestoreBudget: func(ns string) time.Duration {
		if ns == DefaultNamespace {
			return 15 * time.Millisecond
		}
		return 0
	}})
	p := filepath.Join(m.ns(""), "kv")
	must(t, os.WriteFile(p, make([]byte, 3*DefaultBlockSize), 0o644))
	obj := m.node(p).obj
	// The fake predicts 10 ms per block outside G2: one block in G3 is
	// within budget, two are not.
	m.be.setTier(obj, 0, tiering.TierG3)
	if _, err := os.ReadFile(p); err != nil {
		t.Fatalf("within budget: %v", err)
	}
	m.be.setTier(obj, 0, tiering.TierG3)
	m.be.setTier(obj, 1, tiering.TierG4)
	base, _ := m.srv.Lookups()
	if _, err := os.ReadFile(p); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("over budget: %v, want ENOENT", err)
	}
	if f, err := os.OpenFile(p, os.O_WRONLY, 0); err != nil { // writers are never refused
		t.Fatalf("open for writing: %v", err)
	} else {
		f.Close()
	}
	if _, err := os.ReadFile(p); err != nil { // prestaged meanwhile: a hit
		t.Fatalf("after the prestage: %v", err)
	}
	got, _ := m.srv.Lookups()
	if got.Misses-base.Misses != 1 || got.HitTotal()-base.HitTotal() != 1 {
		t.Errorf("misses +%d hits +%d, want +1 and +1", got.Misses-base.Misses, got.HitTotal()-base.HitTotal())
	}
	total, per := m.srv.RestoreSkips()
	if total.Skipped != 1 || total.Predicted != 20*time.Millisecond || per[DefaultNamespace] != total {
		t.Errorf("restore skips %+v %+v", total, per)
	}
}
