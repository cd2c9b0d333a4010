package poolkv

import (
	"strings"

	"github.com/ctxmem/ctxmemd/fabric/pool"
)

// name is a file's identity in the index.
type name struct{ ns, path string }

// cached is one index entry in a cache with the KV revision it came from.
type cached struct {
	e   FileEntry
	rev uint64
}

// cache is one complete copy of the index with its secondary maps. The
// Index guards it with its mutex.
//
// Ordering: the watcher delivers revisions in order; Publish and Remove
// apply their own writes at once, out of band. An entry is replaced only
// by a higher revision; a local Publish whose revision the watcher has
// already passed (rev <= high) is dropped as already applied (or already
// superseded); a local Remove leaves a tombstone that makes the watcher
// skip the key's older puts until it delivers a delete for the key.
type cache struct {
	byKey   map[string]*cached
	byName  map[name]*cached
	dirs    map[name]int                   // (ns, dir) → entries below dir; dir "" = the namespace
	extents map[uint32]map[string]struct{} // extent → keys of entries with a block there
	tomb    map[string]struct{}            // keys removed locally, delete not yet seen by the watcher
	high    uint64                         // highest revision the watcher delivered
}

func newCache() *cache {
	return &cache{byKey: map[string]*cached{}, byName: map[name]*cached{}, dirs: map[name]int{},
		extents: map[uint32]map[string]struct{}{}, tomb: map[string]struct{}{}}
}

// seen records that the watcher delivered revision rev.
func (c *cache) seen(rev uint64) {
	if rev > c.high {
		c.high = rev
	}
}

// putWatched applies a put delivered by the watcher.
func (c *cache) putWatched(key string, rev uint64, e FileEntry) {
	c.seen(rev)
	if _, ok := c.tomb[key]; ok {
		return // older than the local Remove still in flight
	}
	c.replace(key, rev, e)
}

// putLocal applies this host's own Publish, acknowledged at rev.
func (c *cache) putLocal(key string, rev uint64, e FileEntry) {
	if rev <= c.high {
		return // the watcher has delivered it, or something newer
	}
	delete(c.tomb, key)
	c.replace(key, rev, e)
}

func (c *cache) replace(key string, rev uint64, e FileEntry) {
	if old := c.byKey[key]; old != nil {
		if old.rev >= rev {
			return
		}
		c.unlink(key, old)
	}
	c.link(key, &cached{e: e, rev: rev})
}

// delWatched applies a delete or purge marker delivered by the watcher.
func (c *cache) delWatched(key string, rev uint64) {
	c.seen(rev)
	delete(c.tomb, key)
	if old := c.byKey[key]; old != nil && old.rev < rev {
		c.unlink(key, old)
	}
}

// dropWatched drops key's entry because the watcher delivered a value at
// rev that does not decode: the old entry is no longer current.
func (c *cache) dropWatched(key string, rev uint64) {
	c.seen(rev)
	if old := c.byKey[key]; old != nil && old.rev < rev {
		c.unlink(key, old)
	}
}

// delLocal applies this host's own Remove.
func (c *cache) delLocal(key string) {
	c.tomb[key] = struct{}{}
	if old := c.byKey[key]; old != nil {
		c.unlink(key, old)
	}
}

func (c *cache) link(key string, cd *cached) {
	c.byKey[key] = cd
	c.byName[name{cd.e.Namespace, cd.e.Path}] = cd
	c.eachDir(cd.e, func(d name) { c.dirs[d]++ })
	for _, l := range cd.e.Blocks {
		if l == (pool.Location{}) {
			continue
		}
		m := c.extents[l.Extent]
		if m == nil {
			m = map[string]struct{}{}
			c.extents[l.Extent] = m
		}
		m[key] = struct{}{}
	}
}

func (c *cache) unlink(key string, cd *cached) {
	delete(c.byKey, key)
	delete(c.byName, name{cd.e.Namespace, cd.e.Path})
	c.eachDir(cd.e, func(d name) {
		if c.dirs[d]--; c.dirs[d] <= 0 {
			delete(c.dirs, d)
		}
	})
	for _, l := range cd.e.Blocks {
		if m := c.extents[l.Extent]; m != nil {
			delete(m, key)
			if len(m) == 0 {
				delete(c.extents, l.Extent)
			}
		}
	}
}

// eachDir calls f with the namespace root and with every proper prefix of
// e.Path that ends before a '/' ("a/b/c" → "", "a", "a/b").
func (c *cache) eachDir(e FileEntry, f func(name)) {
	f(name{e.Namespace, ""})
	p := e.Path
	for i := strings.IndexByte(p, '/'); i >= 0; {
		if i > 0 {
			f(name{e.Namespace, p[:i]})
		}
		j := strings.IndexByte(p[i+1:], '/')
		if j < 0 {
			break
		}
		i += 1 + j
	}
}
