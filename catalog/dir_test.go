package catalog

import (
	"fmt"
	"testing"
)

type testChild struct{ dir bool }

func (c *testChild) IsDir() bool { return c.dir }

// TestDirCursor: a cursor survives removals (with compaction), renames in
// place keep their offset, and entries added during a listing come after
// it; Subdirs follows adds, replaces and removes.
func TestDirCursor(t *testing.T) {
	d := NewDir[*testChild]()
	for i := range 200 {
		d.Add(fmt.Sprint("f", i), &testChild{dir: i%10 == 0})
	}
	if d.Subdirs() != 20 || d.Len() != 200 {
		t.Fatalf("subdirs %d len %d", d.Subdirs(), d.Len())
	}
	e, ok := d.Next(0)
	if !ok || e.Seq != FirstSeq || e.Name != "f0" {
		t.Fatalf("first entry %+v %v", e, ok)
	}
	cursor := e.Seq
	for i := 1; i < 150; i++ { // past the compaction threshold
		d.Remove(fmt.Sprint("f", i))
	}
	d.Replace("f150", &testChild{}) // a directory replaced by a file
	d.Replace("f151", &testChild{dir: true})
	d.Add("new", &testChild{})
	var names []string
	for {
		e, ok := d.Next(cursor)
		if !ok {
			break
		}
		names = append(names, e.Name)
		cursor = e.Seq
	}
	if len(names) != 51 || names[0] != "f150" || names[50] != "new" {
		t.Fatalf("listing after removals: %d names, %v … %v", len(names), names[:1], names[len(names)-1:])
	}
	if d.Get("f1") != nil || d.Get("f150") == nil || d.Remove("nope") != nil {
		t.Fatal("Get or Remove of a missing name")
	}
	if want := 6; d.Subdirs() != want { // f0, f151, f160…f190
		t.Fatalf("subdirs %d, want %d", d.Subdirs(), want)
	}
}
