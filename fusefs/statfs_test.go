package fusefs

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxmem/ctxmemd/internal/testenv"
)

// statfsOf returns statfs of path.
func statfsOf(t *testing.T, path string) unix.Statfs_t {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		t.Fatalf("statfs %s: %v", path, err)
	}
	return st
}

// usedBytes is what df reports as used: (f_blocks - f_bfree) × f_bsize.
func usedBytes(st unix.Statfs_t) int64 { return int64(st.Blocks-st.Bfree) * st.Bsize }

// TestStatfsFollowsNamespace (issue 11 item 6): statfs on any path of a
// namespace reports that namespace's bytes (file sizes rounded up to
// f_bsize) against its quota or the capacity, moving at once with writes,
// truncates and unlinks; two namespaces answer independently and the
// root answers for both.
func TestStatfsFollowsNamespace(t *testing.T) {
	be := newFakeBackend()
	be.total = 1 << 30
	m := mount(t, be, Options{Namespaces: []Namespace{
		{Name: "a", Mode: 0o777},
		{Name: "b", Mode: 0o777, QuotaBytes: 64 << 20},
	}})
	a, b := filepath.Join(m.mnt, "a"), filepath.Join(m.mnt, "b")
	if err := os.Mkdir(filepath.Join(a, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	check := func(what, dir string, wantUsed, wantTotal, wantInodes int64) {
		t.Helper()
		st := statfsOf(t, dir)
		if st.Bsize != 4096 || st.Frsize != 4096 {
			t.Fatalf("%s: bsize %d frsize %d", what, st.Bsize, st.Frsize)
		}
		if got := usedBytes(st); got != wantUsed {
			t.Fatalf("%s: statfs %s used %d bytes, want %d", what, dir, got, wantUsed)
		}
		if got := int64(st.Blocks) * 4096; got != wantTotal {
			t.Fatalf("%s: statfs %s total %d, want %d", what, dir, got, wantTotal)
		}
		if st.Bavail != st.Bfree {
			t.Fatalf("%s: bavail %d != bfree %d", what, st.Bavail, st.Bfree)
		}
		if got := int64(st.Files - st.Ffree); got != wantInodes {
			t.Fatalf("%s: statfs %s f_files-f_ffree %d, want %d", what, dir, got, wantInodes)
		}
	}
	var usedA, usedB int64
	inodesA, inodesB := int64(2), int64(1) // namespace dir (+ sub)
	var names []string
	for i := range 20 {
		size := i*37_000 + 1
		p := filepath.Join(a, "sub", fmt.Sprint(i))
		if i%2 == 0 {
			p = filepath.Join(a, fmt.Sprint(i))
		}
		if err := os.WriteFile(p, pattern(byte(i), size), 0o644); err != nil {
			t.Fatal(err)
		}
		names = append(names, p)
		usedA += allocBytes(int64(size))
		inodesA++
		// Asked through the file, its directory and the namespace.
		check("after write", p, usedA, 1<<30, inodesA)
		check("after write", filepath.Dir(p), usedA, 1<<30, inodesA)
		check("other namespace", b, 0, 64<<20, inodesB)
	}
	for i := range 3 {
		p := filepath.Join(b, fmt.Sprint(i))
		if err := os.WriteFile(p, pattern(9, 3<<20+5), 0o644); err != nil {
			t.Fatal(err)
		}
		usedB += allocBytes(3<<20 + 5)
		inodesB++
		check("quota namespace", p, usedB, 64<<20, inodesB)
		check("unchanged", a, usedA, 1<<30, inodesA)
	}
	check("root", m.mnt, usedA+usedB, 1<<30, inodesA+inodesB+1)
	// Truncate moves it both ways (a grown file's hole counts).
	if err := os.Truncate(names[3], 1<<20); err != nil {
		t.Fatal(err)
	}
	usedA += 1<<20 - allocBytes(3*37_000+1)
	check("truncate up", a, usedA, 1<<30, inodesA)
	if err := os.Truncate(names[3], 10); err != nil {
		t.Fatal(err)
	}
	usedA += 4096 - (1 << 20)
	check("truncate down", a, usedA, 1<<30, inodesA)
	usedA -= 4096 - allocBytes(3*37_000+1)
	if err := os.Truncate(names[3], 3*37_000+1); err != nil {
		t.Fatal(err)
	}
	check("truncate back", a, usedA, 1<<30, inodesA)
	// Unlinking a closed file gives its space back when unlink returns.
	for i := 0; i < 10; i++ {
		if err := os.Remove(names[i]); err != nil {
			t.Fatal(err)
		}
		usedA -= allocBytes(int64(i*37_000 + 1))
		check("after unlink", a, usedA, 1<<30, inodesA-int64(i)-1)
	}
	inodesA -= 10
	// An unlinked file that is still open counts until its last close.
	f, err := os.Open(names[10])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(names[10]); err != nil {
		t.Fatal(err)
	}
	check("unlinked but open", a, usedA, 1<<30, inodesA)
	f.Close()
	usedA -= allocBytes(10*37_000 + 1)
	inodesA--
	// RELEASE is asynchronous: close(2) returns before the daemon hears.
	testenv.Eventually(t, 10*time.Second, func() bool {
		st := statfsOf(t, a)
		return usedBytes(st) == usedA && int64(st.Files-st.Ffree) == inodesA
	}, "space of an unlinked file after its last close")
	// Usage is rebuilt at mount.
	m.restart()
	check("after remount", a, usedA, 1<<30, inodesA)
	check("after remount", b, usedB, 64<<20, inodesB)
}

// TestStatfsCapacityOption: Options.StatfsCapacity replaces the store's
// capacity for namespaces without a quota, and free never goes negative.
func TestStatfsCapacityOption(t *testing.T) {
	be := newFakeBackend()
	be.total = 1 << 30
	m := mount(t, be, Options{StatfsCapacity: 4 << 20})
	if err := os.WriteFile(filepath.Join(m.ns(""), "f"), make([]byte, 5<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	st := statfsOf(t, m.ns(""))
	if st.Blocks != (4<<20)/4096 || st.Bfree != 0 || st.Bavail != 0 {
		t.Fatalf("over capacity: blocks %d bfree %d bavail %d, want %d 0 0", st.Blocks, st.Bfree, st.Bavail, (4<<20)/4096)
	}
}

// TestStatfsCleanerStops replays a NIXL-style cleaner: with usage above its
// high watermark it deletes files oldest (mtime) first until usage is
// under the low watermark, re-reading statvfs after every unlink. It must
// stop with files left, having deleted only what the watermarks ask for.
func TestStatfsCleanerStops(t *testing.T) {
	const quota, file = 16 << 20, 1 << 20
	m := mount(t, nil, Options{Namespaces: []Namespace{{Name: "kv", Mode: 0o777, QuotaBytes: quota}}})
	dir := filepath.Join(m.mnt, "kv")
	for i := range 14 { // 87.5 %
		p := filepath.Join(dir, fmt.Sprintf("%02d", i))
		if err := os.WriteFile(p, pattern(byte(i), file), 0o644); err != nil {
			t.Fatal(err)
		}
		ts := time.Unix(1_700_000_000+int64(i), 0)
		if err := os.Chtimes(p, ts, ts); err != nil {
			t.Fatal(err)
		}
	}
	deleted, left := nixlClean(t, dir, 0.80, 0.70)
	// 14 MiB of 16: down to < 11.2 MiB means deleting 3 (11 MiB left).
	if deleted != 3 || left != 11 {
		t.Fatalf("cleaner deleted %d and left %d files, want 3 and 11", deleted, left)
	}
}

// nixlClean is the cleaner loop: over high, unlink oldest until under low.
func nixlClean(t *testing.T, dir string, high, low float64) (deleted, left int) {
	t.Helper()
	usage := func() float64 {
		st := statfsOf(t, dir)
		return float64(st.Blocks-st.Bavail) / float64(st.Blocks)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	type f struct {
		path  string
		mtime time.Time
	}
	var files []f
	for _, e := range ents {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f{filepath.Join(dir, e.Name()), info.ModTime()})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].mtime.Before(files[j].mtime) })
	if usage() > high {
		for _, x := range files {
			if usage() < low {
				break
			}
			if err := os.Remove(x.path); err != nil {
				t.Fatal(err)
			}
			deleted++
		}
	}
	return deleted, len(files) - deleted
}

// TestFallocateReservesRoom is issue 18 item 5: fallocate mode 0 is
// charged to the namespace at once (statfs moves) and refused with ENOSPC,
// changing nothing, when statfs shows less room than it asks for.
func TestFallocateReservesRoom(t *testing.T) {
	be := newFakeBackend()
	be.total = 1 << 30
	m := mount(t, be, Options{StatfsCapacity: 8 << 20})
	f, err := os.Create(filepath.Join(m.ns(""), "kv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	if err := unix.Fallocate(fd, 0, 0, 6<<20); err != nil {
		t.Fatalf("fallocate 6 MiB of 8: %v", err)
	}
	if st := statfsOf(t, m.ns("")); st.Bfree != (2<<20)/4096 {
		t.Fatalf("after fallocate of 6 MiB: bfree %d blocks, want %d", st.Bfree, (2<<20)/4096)
	}
	if err := unix.Fallocate(fd, 0, 0, 9<<20); err != unix.ENOSPC {
		t.Fatalf("fallocate to 9 MiB with 2 MiB free: %v, want ENOSPC", err)
	}
	if st, _ := f.Stat(); st.Size() != 6<<20 {
		t.Fatalf("size after refused fallocate: %d, want %d", st.Size(), 6<<20)
	}
	if err := unix.Fallocate(fd, 0, 4<<20, 4<<20); err != nil { // to 8 MiB: exactly the room left
		t.Fatalf("fallocate of the last 2 MiB: %v", err)
	}
	if st := statfsOf(t, m.ns("")); st.Bfree != 0 {
		t.Fatalf("bfree %d after filling the capacity by fallocate", st.Bfree)
	}
}
