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
// mount, in both cache modes and in writeback-cache mode.
func TestPosix(t *testing.T) {
	for _, mode := range []struct {
		name      string
		cache     CacheMode
		writeback bool
	}{{"keep", CacheKeep, false}, {"direct", CacheDirect, false}, {"writeback", CacheKeep, true}} {
		t.Run(mode.name, func(t *testing.T) {
			if raceEnabled && mode.name != "keep" {
				t.Skip("race detector: the default mode only")
			}
			names := make([]string, 0, len(posixtest.All))
			for n := range posixtest.All {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, name := range names {
				fn := posixtest.All[name]
				t.Run(name, func(t *testing.T) {
					if why, ok := posixSkips[name]; ok {
						t.Skip(why)
					}
					m := mount(t, nil, Options{Cache: mode.cache, WritebackCache: mode.writeback})
					fn(t, m.ns(""))
				})
			}
		})
	}
}
