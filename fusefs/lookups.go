package fusefs

import (
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ctxmem/ctxmemd/hitratio"
)

// lookupCounts counts KV lookups (package hitratio) in one namespace or in
// the whole mount.
//
// A miss is a LOOKUP answered ENOENT, less the kernel's own LOOKUP of a
// name it is about to create: before CREATE, MKNOD, MKDIR, SYMLINK and
// LINK, and before a RENAME onto a name that does not exist, the kernel
// looks the new name up (fs/namei.c lookup_open and friends; inside a
// namespace no negative entry is cached, so the LOOKUP is always sent).
// Each such creation counts a probe, and misses = ENOENT − probes: an
// engine that stats a name, finds it missing and writes it through a
// temporary file and rename counts one miss, as the replay does.
//
// A hit is an OPEN for reading (O_RDONLY or O_RDWR, without O_TRUNC) of an
// existing file, by the tier that serves it (Backend.ServingTier), taken
// before the open promotes anything.
type lookupCounts struct {
	hits          [4]atomic.Int64 // by hitratio.Tiers() order
	enoent, probe atomic.Int64
	// skipped counts opens answered as misses because their restore
	// would exceed the namespace's budget (restore.go), and predictedNs
	// sums their predicted restore times.
	skipped, predictedNs atomic.Int64
}

// hit counts one hit served from tier (a hitratio tier name).
func (c *lookupCounts) hit(tier string) {
	if r := hitratio.Rank(tier); r < len(c.hits) {
		c.hits[r].Add(1)
	}
}

func (c *lookupCounts) counts() hitratio.Counts {
	out := hitratio.Counts{Hits: make(map[string]int64, len(c.hits))}
	for i, name := range hitratio.Tiers() {
		out.Hits[name] = c.hits[i].Load()
	}
	// Read probes first: a probe is counted after its ENOENT, so this
	// order never sees more probes than ENOENTs for the same creations.
	p := c.probe.Load()
	out.Misses = max(c.enoent.Load()-p, 0)
	return out
}

// NamespaceLookups are one namespace's KV lookup counts since mount (or
// since the namespace was added).
type NamespaceLookups struct {
	Namespace string `json:"namespace"`
	hitratio.Counts
}

// Lookups returns the mount's KV lookup counts since mount (package
// hitratio has the definition): the total, and one row per namespace
// served now, in configuration order.
func (s *Server) Lookups() (hitratio.Counts, []NamespaceLookups) {
	f := s.fsys
	f.t.mu.RLock()
	nss := append([]*namespace(nil), f.nss...)
	f.t.mu.RUnlock()
	rows := make([]NamespaceLookups, 0, len(nss))
	for _, ns := range nss {
		rows = append(rows, NamespaceLookups{Namespace: ns.cfg.Name, Counts: ns.lk.counts()})
	}
	return f.lk.counts(), rows
}

// lookupMiss counts a LOOKUP answered ENOENT in namespace ns.
func (f *fsys) lookupMiss(ns *namespace) {
	ns.lk.enoent.Add(1)
	f.lk.enoent.Add(1)
}

// createProbe counts the kernel's LOOKUP before creating a name in ns.
func (f *fsys) createProbe(ns *namespace) {
	if ns == nil {
		return
	}
	ns.lk.probe.Add(1)
	f.lk.probe.Add(1)
}

// countOpen counts an OPEN of n with flags as a hit when it is a read of
// an existing file in a namespace.
func (f *fsys) countOpen(n *node, flags uint32) {
	if n.ns == nil || flags&syscall.O_ACCMODE == syscall.O_WRONLY || flags&syscall.O_TRUNC != 0 {
		return
	}
	tier, err := f.be.ServingTier(n.obj)
	if err != nil {
		return // gone or lost: the read reports it
	}
	n.ns.lk.hit(tier)
	f.lk.hit(tier)
}

// observe reports a request of op that started at t0 to
// Options.ObserveLatency, if set.
func (f *fsys) observe(op string, t0 time.Time) {
	if o := f.opts.ObserveLatency; o != nil {
		o(op, time.Since(t0))
	}
}

// LookupMisses is the number of KV lookup misses since mount: names an
// engine asked for in a namespace that the mount does not hold, the
// kernel's own lookups before creating a name excluded (see Lookups).
func (s *Server) LookupMisses() int64 { c, _ := s.Lookups(); return c.Misses }
