package catalog

import "sync/atomic"

// Quota is the usage accounting of one namespace: bytes counted against
// its quota, bytes as statfs reports them, and inodes. The zero value
// with Limit set is ready; methods are safe for concurrent use.
type Quota struct {
	// Limit caps Used (bytes); 0 means no quota. Set before use.
	Limit int64
	// used is the sum of the reserved sizes (bytes) of the namespace's
	// live files, open-but-unlinked ones included.
	used atomic.Int64
	// alloc is the same sum with each file's size rounded up to the
	// statfs block: the bytes statfs reports as used.
	alloc atomic.Int64
	// inodes counts the namespace's live files, directories and symlinks
	// (its own directory included).
	inodes atomic.Int64
}

// Reserve adds delta bytes to the usage. A positive delta that would pass
// Limit is refused (false) and nothing is added.
func (q *Quota) Reserve(delta int64) bool {
	if delta <= 0 || q.Limit == 0 {
		q.used.Add(delta)
		return true
	}
	for {
		u := q.used.Load()
		if u+delta > q.Limit {
			return false
		}
		if q.used.CompareAndSwap(u, u+delta) {
			return true
		}
	}
}

// Adjust adds delta bytes to the usage without a quota check (for
// releases and for corrections from the store).
func (q *Quota) Adjust(delta int64) { q.used.Add(delta) }

// Used returns the bytes counted against Limit.
func (q *Quota) Used() int64 { return q.used.Load() }

// AddAlloc adds delta bytes to the statfs usage.
func (q *Quota) AddAlloc(delta int64) { q.alloc.Add(delta) }

// Alloc returns the statfs usage in bytes.
func (q *Quota) Alloc() int64 { return q.alloc.Load() }

// AddInodes adds delta to the inode count.
func (q *Quota) AddInodes(delta int64) { q.inodes.Add(delta) }

// Inodes returns the inode count.
func (q *Quota) Inodes() int64 { return q.inodes.Load() }
