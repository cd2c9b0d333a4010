package catalog

import "sort"

// FirstSeq is the listing offset of a directory's first real entry;
// offsets 1 and 2 are "." and "..".
const FirstSeq = 3

// DirChild is what a Dir refers to: a node handle (typically a pointer;
// its zero value means "no node") that knows whether it is a directory.
type DirChild interface {
	comparable
	IsDir() bool
}

// Dirent is one entry of a directory listing. Seq orders the listing and
// is the entry's readdir offset; it never changes while the entry exists,
// and a new entry always gets a larger one, so a cursor (the last Seq
// read) stays valid across concurrent changes.
type Dirent[C DirChild] struct {
	Seq   uint64
	Name  string
	Child C
}

// Dir is one directory's entries in memory: a name index and a listing
// in Seq order with tombstones, compacted once most of it is dead. Not
// safe for concurrent use: the tree's lock guards it.
type Dir[C DirChild] struct {
	byName  map[string]*Dirent[C]
	list    []*Dirent[C] // ordered by Seq; a zero Child is a tombstone
	dead    int          // tombstones in list
	nextSeq uint64
	subdirs int
}

// NewDir returns an empty directory.
func NewDir[C DirChild]() *Dir[C] {
	return &Dir[C]{byName: map[string]*Dirent[C]{}, nextSeq: FirstSeq}
}

// Get returns the child called name, or the zero C.
func (d *Dir[C]) Get(name string) C {
	if e := d.byName[name]; e != nil {
		return e.Child
	}
	var zero C
	return zero
}

// Add appends a new entry; name must be free.
func (d *Dir[C]) Add(name string, child C) {
	e := &Dirent[C]{Seq: d.nextSeq, Name: name, Child: child}
	d.nextSeq++
	d.byName[name] = e
	d.list = append(d.list, e)
	if child.IsDir() {
		d.subdirs++
	}
}

// Replace points the existing entry name at child, keeping its offset.
func (d *Dir[C]) Replace(name string, child C) {
	e := d.byName[name]
	if e.Child.IsDir() {
		d.subdirs--
	}
	if child.IsDir() {
		d.subdirs++
	}
	e.Child = child
}

// Remove deletes the entry name and returns its child (the zero C if
// absent).
func (d *Dir[C]) Remove(name string) C {
	var zero C
	e := d.byName[name]
	if e == nil {
		return zero
	}
	delete(d.byName, name)
	c := e.Child
	if c.IsDir() {
		d.subdirs--
	}
	e.Child = zero
	d.dead++
	if d.dead > 64 && d.dead*2 > len(d.list) {
		live := d.list[:0]
		for _, x := range d.list {
			if x.Child != zero {
				live = append(live, x)
			}
		}
		clear(d.list[len(live):])
		d.list = live
		d.dead = 0
	}
	return c
}

// Next returns the first live entry with Seq > after (the cursor); false
// at the end of the listing.
func (d *Dir[C]) Next(after uint64) (Dirent[C], bool) {
	var zero C
	i := sort.Search(len(d.list), func(i int) bool { return d.list[i].Seq > after })
	for ; i < len(d.list); i++ {
		if d.list[i].Child != zero {
			return *d.list[i], true
		}
	}
	return Dirent[C]{}, false
}

// Len returns the number of live entries.
func (d *Dir[C]) Len() int { return len(d.byName) }

// Subdirs returns the number of entries that are directories.
func (d *Dir[C]) Subdirs() int { return d.subdirs }
