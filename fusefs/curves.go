package fusefs

import (
	"syscall"

	"github.com/ctxmem/ctxmemd/mrc"
)

// Online miss-ratio curves (Options.Curves, package mrc). Every KV lookup
// (lookups.go) is one reference to its file's key, mrc.HashName(parent
// directory inode, name): a miss (a LOOKUP answered ENOENT) and an open
// for reading of an existing file alike, the latter before the restore
// budget can turn it into a miss. The kernel's LOOKUP before a creation,
// which lookups.go takes off the misses as a probe, is taken back with
// mrc.Set.Cancel.

// curveMiss counts a LOOKUP of name in directory dir answered ENOENT.
func (f *fsys) curveMiss(dir *node, name string) {
	if c := f.opts.Curves; c != nil && dir.ns != nil {
		c.Observe(dir.ns.cfg.Name, mrc.HashName(dir.ino, name))
	}
}

// curveProbe takes back the reference of the kernel's LOOKUP of name in
// dir before creating it.
func (f *fsys) curveProbe(dir *node, name string) {
	if c := f.opts.Curves; c != nil && dir.ns != nil {
		c.Cancel(dir.ns.cfg.Name, mrc.HashName(dir.ino, name))
	}
}

// curveOpen counts an OPEN of n with flags when it is a KV lookup (as
// countOpen decides).
func (f *fsys) curveOpen(n *node, flags uint32) {
	c := f.opts.Curves
	if c == nil || n.ns == nil || n.kind != kindFile || flags&syscall.O_ACCMODE == syscall.O_WRONLY || flags&syscall.O_TRUNC != 0 {
		return
	}
	f.t.mu.RLock()
	var parent uint64
	var name string
	ok := len(n.links) > 0
	if ok {
		parent, name = n.links[0].parent.ino, n.links[0].name
	}
	f.t.mu.RUnlock()
	if ok {
		c.Observe(n.ns.cfg.Name, mrc.HashName(parent, name))
	}
}
