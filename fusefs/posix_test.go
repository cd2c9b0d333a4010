package fusefs

import (
	"sort"
	"testing"

	"github.com/hanwen/go-fuse/v2/posixtest"
)

// posixSkips are the posixtest cases that do not apply, with the reason.
var posixSkips = map[string]string{
	// fallocate modes other than 0 are EOPNOTSUPP by design (the tiers
	// reserve no space, and engines' fallback logic expects exactly that).
	"FallocateKeepSize": "FALLOC_FL_KEEP_SIZE is EOPNOTSUPP by design",
	// POSIX record locks belong to the process: two descriptors of one
	// process never conflict. Locks are kept by the kernel (not forwarded
	// to the daemon), which is exact since every access goes through this
	// one kernel mount; the case expects loopback's OFD-style conflict.
	"FcntlFlockLocksFile": "expects a same-process POSIX lock conflict (OFD semantics); locks are kernel-local",
}

// TestPosix runs go-fuse's POSIX conformance suite inside a namespace
// directory (the mount root itself is read-only), each case on a fresh
// mount, in both cache modes and in writeback-cache mode. The cases of
// posixSkips are not run (they do not apply; the log says why), and under
// the race detector only the default mode runs (the others run in the
// plain pass of make test).
func TestPosix(t *testing.T) {
	all := make([]string, 0, len(posixtest.All))
	for n := range posixtest.All {
		all = append(all, n)
	}
	sort.Strings(all)
	var names []string
	for _, n := range all {
		if why, ok := posixSkips[n]; ok {
			t.Logf("not run: %s: %s", n, why)
			continue
		}
		names = append(names, n)
	}
	for n := range posixSkips {
		if _, ok := posixtest.All[n]; !ok {
			t.Errorf("posixSkips names %s, which posixtest no longer has", n)
		}
	}
	for _, mode := range []struct {
		name      string
		cache     CacheMode
		writeback bool
	}{{"keep", CacheKeep, false}, {"direct", CacheDirect, false}, {"writeback", CacheKeep, true}} {
		if raceEnabled && mode.name != "keep" {
			t.Logf("not run under the race detector: mode %s (run without -race)", mode.name)
			continue
		}
		t.Run(mode.name, func(t *testing.T) {
			for _, name := range names {
				fn := posixtest.All[name]
				t.Run(name, func(t *testing.T) {
					m := mount(t, nil, Options{Cache: mode.cache, WritebackCache: mode.writeback})
					fn(t, m.ns(""))
				})
			}
		})
	}
}
