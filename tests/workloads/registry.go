package workloads

import (
	"path/filepath"
	"sort"
	"sync"

	"golang.org/x/sys/unix"
)

// object is what a workload knows about one final-name file.
type object struct {
	path string // final path
	key  string // pattern key (the final base name plus its rank/dir when needed)
	size int64  // bytes an object of this key has

	// pub serialises publishing (rename or in-place create) and unlinking of
	// this name, so a check right after an unlink cannot race a re-publish.
	// Readers never take it.
	pub sync.Mutex

	// Guarded by registry.mu.
	gens    []uint64 // every generation ever written to this key, oldest first
	present bool     // published and not unlinked since
	last    int64    // logical clock of the last access (LRU order)
	mtime   int64    // logical clock of the last publish (mtime order)
}

// registry maps final paths to objects and hands out generations. Safe for
// concurrent use.
type registry struct {
	mu    sync.Mutex
	objs  map[string]*object
	clock int64
	gen   uint64
}

func newRegistry() *registry { return &registry{objs: map[string]*object{}} }

// get returns the object for path, creating it with key and size.
func (g *registry) get(path, key string, size int64) *object {
	g.mu.Lock()
	defer g.mu.Unlock()
	o := g.objs[path]
	if o == nil {
		o = &object{path: path, key: key, size: size}
		g.objs[path] = o
	}
	return o
}

// lookup returns the object for path or nil.
func (g *registry) lookup(path string) *object {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.objs[path]
}

// newGen allocates a fresh generation (unique over the registry) and
// records it for o before any byte of it is written.
func (g *registry) newGen(o *object) uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gen++
	o.gens = append(o.gens, g.gen)
	return g.gen
}

// gensOf returns a copy of o's generations, newest first.
func (g *registry) gensOf(o *object) []uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]uint64, len(o.gens))
	for i, v := range o.gens {
		out[len(out)-1-i] = v
	}
	return out
}

// latestGen returns o's newest generation (0 if none).
func (g *registry) latestGen(o *object) uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(o.gens) == 0 {
		return 0
	}
	return o.gens[len(o.gens)-1]
}

// setPresent marks o published (true) or unlinked (false).
func (g *registry) setPresent(o *object, present bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	o.present = present
	if present {
		g.clock++
		o.mtime, o.last = g.clock, g.clock
	}
}

// isPresent reports o's published state.
func (g *registry) isPresent(o *object) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return o.present
}

// touch records an access to o (LRU order).
func (g *registry) touch(o *object) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.clock++
	o.last = g.clock
}

// present returns the published objects whose path is under dir (all when
// dir is ""), least recently used first (byMtime: least recently published
// first).
func (g *registry) present(dir string, byMtime bool) []*object {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []*object
	for _, o := range g.objs {
		if o.present && (dir == "" || filepath.Dir(o.path) == dir) {
			out = append(out, o)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if byMtime {
			return out[i].mtime < out[j].mtime
		}
		return out[i].last < out[j].last
	})
	return out
}

// heldBytes returns the bytes of all published objects.
func (g *registry) heldBytes() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	var n int64
	for _, o := range g.objs {
		if o.present {
			n += o.size
		}
	}
	return n
}

// readResult is the outcome of reading one object.
type readResult int

const (
	readOK    readResult = iota // complete and correct
	readGone                    // ENOENT at open (or on the read, with AllowLoss)
	readWrong                   // a check failed (recorded)
)

// readObject opens o.path read-only (with O_DIRECT when direct; buf must
// then be aligned memory), checks fstat size, reads the whole object in one
// read(2) into buf[:o.size] and verifies every byte belongs to exactly one
// generation recorded for o. what prefixes failure messages.
func (r *run) readObject(g *registry, o *object, buf []byte, direct bool, what string) readResult {
	fd, _, err := r.open(o.path, unix.O_RDONLY, 0, direct)
	if isNotExist(err) {
		return readGone
	}
	if err != nil {
		r.failf("%s: open %s: %v", what, o.path, err)
		return readWrong
	}
	defer r.closeFD(fd, what+" "+o.path)
	var st unix.Stat_t
	r.op(1)
	if err := unix.Fstat(fd, &st); err != nil {
		r.failf("%s: fstat %s: %v", what, o.path, err)
		return readWrong
	}
	if !r.check(st.Size == o.size, "%s: %s open with size %d, want %d (partial object under final name)", what, o.path, st.Size, o.size) {
		return readWrong
	}
	b := buf[:o.size]
	n, err := r.readAt(fd, b, -1)
	if err != nil {
		if r.p.AllowLoss && (isNotExist(err) || errnoOf(err) == unix.ESTALE || errnoOf(err) == unix.EIO) {
			return readGone // the object was dropped while open
		}
		r.failf("%s: read %s: %v", what, o.path, err)
		return readWrong
	}
	if !r.check(int64(n) == o.size, "%s: single read of %s returned %d of %d bytes (short read)", what, o.path, n, o.size) {
		return readWrong
	}
	r.read.Add(int64(n))
	if _, why := matchGen(b, o.key, 0, g.gensOf(o)); !r.check(why == "", "%s: %s: wrong bytes: %s", what, o.path, why) {
		return readWrong
	}
	return readOK
}

// unlinkObject unlinks a published object under its publish lock, marks it
// unpublished and checks ENOENT for stat and open right after.
func (r *run) unlinkObject(g *registry, o *object, why string) bool {
	o.pub.Lock()
	defer o.pub.Unlock()
	if !g.isPresent(o) {
		return false
	}
	r.op(1)
	err := unix.Unlink(o.path)
	g.setPresent(o, false)
	if isNotExist(err) && r.p.AllowLoss {
		r.lost.Add(1)
		return false
	}
	if !r.check(err == nil, "%s: unlink %s: %v", why, o.path, err) {
		return false
	}
	r.evicted.Add(1)
	r.expectGone(o.path, why)
	return true
}

// finalAudit lists dir and compares it with the registry: every entry must
// be a published object (no ghosts after rename/unlink, no stray temp
// files), every published object must be listed (or counted lost with
// AllowLoss) and must read back complete and correct. It returns the bytes
// of the objects audited.
func (r *run) finalAudit(g *registry, dir string, buf []byte, direct bool) int64 {
	names, err := r.readDir(dir)
	if err != nil {
		r.failf("final audit: readdir %s: %v", dir, err)
		return 0
	}
	listed := map[string]bool{}
	for _, n := range names {
		p := filepath.Join(dir, n)
		listed[p] = true
		o := g.lookup(p)
		if o == nil {
			r.failf("final audit: %s listed but never published (stray temp file or ghost entry)", p)
			continue
		}
		r.check(g.isPresent(o), "final audit: %s listed after its unlink (ghost entry)", p)
	}
	var bytes int64
	for _, o := range g.present(dir, false) {
		if !listed[o.path] {
			if _, err := r.stat(o.path); err == nil {
				r.failf("final audit: %s exists for stat but is missing from readdir", o.path)
				continue
			}
			if r.p.AllowLoss {
				r.lost.Add(1)
				g.setPresent(o, false)
				continue
			}
			r.failf("final audit: published %s is gone without an unlink", o.path)
			continue
		}
		switch r.readObject(g, o, buf, direct, "final audit") {
		case readOK:
			bytes += o.size
		case readGone:
			if !r.p.AllowLoss {
				r.failf("final audit: %s listed but open says ENOENT", o.path)
			} else {
				r.lost.Add(1)
				g.setPresent(o, false)
			}
		}
	}
	return bytes
}
