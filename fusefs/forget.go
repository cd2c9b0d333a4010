package fusefs

import (
	"sync"
	"sync/atomic"
	"time"
)

// Kernel entry reclaim (Options.KernelFiles). Every file the kernel has
// looked up keeps a dentry and a FUSE inode in the kernel (about 1.1 KiB
// of slab) and a go-fuse Inode, its node-id entry and its place in its
// parent's children here (about 460 B), until the kernel forgets it
// (FORGET). The kernel forgets only under memory pressure, so a mount of
// millions of KV files that were each written once keeps all of it. With
// a bound, once more files than KernelFiles are looked up, the ones used
// longest ago that are not open get FUSE_NOTIFY_INVAL_ENTRY (the kernel
// drops the unused dentry, its inode goes, and FORGET frees go-fuse's
// state); their next path lookup is one LOOKUP request. The order is
// CLOCK (Corbató 1968): a file looked up, opened or stat'ed again since
// its last turn gets a second one.
//
// The count is of files with a kernel reference as go-fuse reports them
// (looked up, not yet OnForget); directories and symlinks are not counted
// or invalidated (a mount has few of them, and a directory's dentry is
// every child's path).

// reclaimLow is the fraction of KernelFiles a reclaim round brings the
// count down to, so rounds are not one entry each.
const reclaimLow = 0.9

// reclaimPause is how long the reclaimer waits after a round for the
// kernel's FORGETs before it counts again.
const reclaimPause = 20 * time.Millisecond

// Bits of node.kflags (guarded by entryReclaim.mu).
const (
	kRef    uint8 = 1 << iota // the kernel holds an inode of it (counted in live)
	kInRing                   // in ring
	kUsed                     // used since its last turn (CLOCK bit)
)

// entryReclaim keeps the kernel's file entries within Options.KernelFiles.
type entryReclaim struct {
	f     *fsys
	limit int
	mu    sync.Mutex
	ring  []*node // files in CLOCK order from head
	head  int
	live  int // files with kRef
	// invalidated counts FUSE_NOTIFY_INVAL_ENTRY sent; forgotten the
	// FORGETs of files (OnForget).
	invalidated, forgotten atomic.Int64
	wake                   chan struct{}
	stop, done             chan struct{}
	started                bool // run was started (start); close waits for it then
}

// newEntryReclaim returns the reclaimer of f; limit 0 means no bound (it
// then only counts).
func newEntryReclaim(f *fsys, limit int) *entryReclaim {
	return &entryReclaim{f: f, limit: limit, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

// looked records that the kernel got (or kept) an inode of file n: a
// LOOKUP, CREATE or readdirplus entry answered.
func (r *entryReclaim) looked(n *node) {
	r.mu.Lock()
	over := false
	if n.kflags&kRef == 0 {
		n.kflags |= kRef
		r.live++
		over = r.limit > 0 && r.live > r.limit
	} else {
		n.kflags |= kUsed
	}
	if n.kflags&kInRing == 0 && r.limit > 0 {
		n.kflags |= kInRing
		r.ring = append(r.ring, n)
		if len(r.ring)-r.head > 2*max(r.live, 1024) {
			r.dropForgottenLocked() // files the kernel forgot by itself
		}
	}
	r.mu.Unlock()
	if over {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

// used gives n a second chance at its next turn (open, getattr).
func (r *entryReclaim) used(n *node) {
	if r.limit == 0 {
		return
	}
	r.mu.Lock()
	n.kflags |= kUsed
	r.mu.Unlock()
}

// forgot records the kernel's FORGET of file n (go-fuse's OnForget).
func (r *entryReclaim) forgot(n *node) {
	r.forgotten.Add(1)
	r.mu.Lock()
	if n.kflags&kRef != 0 {
		n.kflags &^= kRef
		r.live--
	}
	r.mu.Unlock()
}

// run is the reclaimer's goroutine (owner: the mount; started once the
// server is up, ended by close).
func (r *entryReclaim) run() {
	defer close(r.done)
	if r.limit == 0 {
		<-r.stop
		return
	}
	for {
		select {
		case <-r.stop:
			return
		case <-r.wake:
		}
		for r.round() {
			select {
			case <-r.stop:
				return
			case <-time.After(reclaimPause):
			}
		}
	}
}

// round sends invalidations for enough files to bring the count to
// reclaimLow × limit once the kernel has forgotten them, and reports
// whether it sent any (then the caller pauses and counts again).
func (r *entryReclaim) round() bool {
	victims := r.pick()
	if len(victims) == 0 {
		return false
	}
	srv := r.f.notes.server()
	if srv == nil {
		return false
	}
	type entry struct {
		parent uint64
		name   string
	}
	var names []entry
	t := &r.f.t
	t.mu.RLock()
	for _, n := range victims {
		for _, l := range n.links {
			names = append(names, entry{l.parent.ino, l.name})
		}
	}
	t.mu.RUnlock()
	for _, e := range names { // no lock held: the kernel takes the directory's lock
		srv.EntryNotify(e.parent, e.name)
		r.invalidated.Add(1)
	}
	return true
}

// pick takes from the ring the files to invalidate this round: CLOCK from
// the head, skipping (and dropping) forgotten ones, giving used and open
// ones another turn, at most one pass over the ring.
func (r *entryReclaim) pick() []*node {
	r.mu.Lock()
	defer r.mu.Unlock()
	want := r.live - int(reclaimLow*float64(r.limit))
	if want <= 0 {
		return nil
	}
	var out []*node
	for pass := len(r.ring) - r.head; pass > 0 && len(out) < want; pass-- {
		n := r.ring[r.head]
		r.ring[r.head] = nil
		r.head++
		switch {
		case n.kflags&kRef == 0:
			n.kflags &^= kInRing | kUsed
		case n.kflags&kUsed != 0 || n.isOpen():
			n.kflags &^= kUsed
			r.ring = append(r.ring, n)
		default:
			n.kflags &^= kInRing
			out = append(out, n)
		}
	}
	if r.head > len(r.ring)/2 { // compact: the slice does not grow for ever
		m := copy(r.ring, r.ring[r.head:])
		clear(r.ring[m:])
		r.ring = r.ring[:m]
		r.head = 0
	}
	return out
}

// dropForgottenLocked removes from the ring the files the kernel forgot
// before their turn (memory pressure, unlink), so that the ring holds
// about the files looked up, not every file ever looked up. r.mu held.
func (r *entryReclaim) dropForgottenLocked() {
	kept := r.ring[:0]
	for _, n := range r.ring[r.head:] {
		if n.kflags&kRef != 0 {
			kept = append(kept, n)
		} else {
			n.kflags &^= kInRing | kUsed
		}
	}
	clear(r.ring[len(kept):])
	r.ring, r.head = kept, 0
}

// isOpen reports whether n has handles open (n.mu taken).
func (n *node) isOpen() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.opens > 0
}

// start starts run, once the server can send notifications.
func (r *entryReclaim) start() {
	r.started = true
	go r.run()
}

// close ends the reclaimer's goroutine, if it was started.
func (r *entryReclaim) close() {
	if !r.started {
		return
	}
	close(r.stop)
	<-r.done
}

// KernelEntries is what Server.KernelEntries reports: files the kernel
// holds looked up (Files; at most about Limit when Limit > 0), and
// since mount the entry invalidations sent and the FORGETs received for
// files.
type KernelEntries struct {
	Files, Limit           int
	Invalidated, Forgotten int64
}

// KernelEntries returns the mount's kernel entry counts.
func (s *Server) KernelEntries() KernelEntries {
	r := s.fsys.er
	r.mu.Lock()
	defer r.mu.Unlock()
	return KernelEntries{Files: r.live, Limit: r.limit, Invalidated: r.invalidated.Load(), Forgotten: r.forgotten.Load()}
}
