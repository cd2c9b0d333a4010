// Package storetest is the conformance suite for g4.ObjectStore backends,
// run in one call in the manner of rclone's fstests: a backend's _test file
// calls Run with a function that opens an empty store, and every subtest
// checks one rule of the ObjectStore contract (names, metadata, ranges,
// listing order and prefixes, atomic replacement, missing objects). The
// local-directory backend and the S3 backend both run it, so code tested
// against Local behaves the same on S3.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/g4"
)

// Open returns a new, empty store; it fails the test itself on error and
// cleans up with t.Cleanup.
type Open func(t *testing.T) g4.ObjectStore

// Run runs the suite against stores made by open, as subtests of t.
func Run(t *testing.T, open Open) { RunExcept(t, open, nil) }

// RunExcept is Run without the cases named in except (case name → why it
// does not apply to this store): those are logged as not run, with the
// reason, and a name that is no case fails the test (so a renamed case
// is not dropped silently).
func RunExcept(t *testing.T, open Open, except map[string]string) {
	t.Helper()
	cases := []struct {
		name string
		fn   func(*testing.T, g4.ObjectStore)
	}{
		{"PutGetHead", testPutGetHead},
		{"Names", testNames},
		{"ObjectAndPrefixSameName", testObjectAndDir},
		{"ZeroBytes", testZeroBytes},
		{"Overwrite", testOverwrite},
		{"GetRange", testGetRange},
		{"Missing", testMissing},
		{"InvalidNames", testInvalidNames},
		{"InvalidMeta", testInvalidMeta},
		{"ShortReader", testShortReader},
		{"List", testList},
		{"ListStop", testListStop},
		{"Cancelled", testCancelled},
		{"AtomicReplace", testAtomicReplace},
	}
	known := map[string]bool{}
	for _, c := range cases {
		known[c.name] = true
		if why, ok := except[c.name]; ok {
			t.Logf("not run: %s: %s", c.name, why)
			continue
		}
		t.Run(c.name, func(t *testing.T) { c.fn(t, open(t)) })
	}
	for name := range except {
		if !known[name] {
			t.Errorf("storetest: no case %q to leave out", name)
		}
	}
}

var bg = context.Background()

// Data returns n bytes that depend on seed and offset.
func Data(seed, n int) []byte {
	b := make([]byte, n)
	x := uint32(seed)*2654435761 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

// MustPut stores data as name with meta or fails the test.
func MustPut(t testing.TB, s g4.ObjectStore, name string, data []byte, meta map[string]string) {
	t.Helper()
	if err := s.Put(bg, name, bytes.NewReader(data), int64(len(data)), meta); err != nil {
		t.Fatalf("Put(%q, %d bytes): %v", name, len(data), err)
	}
}

// MustGet reads the whole object name or fails the test.
func MustGet(t testing.TB, s g4.ObjectStore, name string) ([]byte, map[string]string) {
	t.Helper()
	rc, meta, err := s.Get(bg, name)
	if err != nil {
		t.Fatalf("Get(%q): %v", name, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("Get(%q): read: %v", name, err)
	}
	return b, meta
}

// Names lists the store under prefix.
func Names(t testing.TB, s g4.ObjectStore, prefix string) []string {
	t.Helper()
	var out []string
	if err := s.List(bg, prefix, func(a g4.ObjectAttrs) bool {
		out = append(out, a.Name)
		return true
	}); err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	return out
}

func testPutGetHead(t *testing.T, s g4.ObjectStore) {
	before := time.Now()
	data := Data(1, 300_000)
	meta := map[string]string{"crc32c": "0badf00d", "x-y-9": "a value = with spaces"}
	MustPut(t, s, "dir/obj", data, meta)
	got, gm := MustGet(t, s, "dir/obj")
	if !bytes.Equal(got, data) {
		t.Fatalf("Get returned %d bytes, not the %d put", len(got), len(data))
	}
	if !mapsEqual(gm, meta) {
		t.Fatalf("Get meta = %v; want %v", gm, meta)
	}
	a, err := s.Head(bg, "dir/obj")
	if err != nil {
		t.Fatal(err)
	}
	if a.Name != "dir/obj" || a.Size != int64(len(data)) || !mapsEqual(a.Meta, meta) {
		t.Fatalf("Head = %+v", a)
	}
	// ModTime is "when it was stored": sanity only (clocks of a remote
	// store may differ a little from ours).
	if a.ModTime.Before(before.Add(-time.Hour)) || a.ModTime.After(time.Now().Add(time.Hour)) {
		t.Fatalf("Head ModTime = %v; stored at about %v", a.ModTime, before)
	}
	var listed []g4.ObjectAttrs
	if err := s.List(bg, "", func(a g4.ObjectAttrs) bool { listed = append(listed, a); return true }); err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 || listed[0].Name != "dir/obj" || listed[0].Size != int64(len(data)) || listed[0].ModTime.IsZero() {
		t.Fatalf("List = %+v", listed)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// awkwardNames are valid names that a naive path mapping breaks.
var awkwardNames = []string{
	"with space", "per%cent", "%25", "%", "100%/x", "plus+sign", "a+b c%d",
	"unicode/é/日本語/emoji😀", "ümlaut dir/fïle", "x@", "@", "tilde~", "a=b&c?d#e",
	".hidden", "..dots", "...", "a/.b/..c", "-dash", "UPPER/lower", "q'uote\"s", "back\\slash",
	"tab\there", "colon:semi;", "*star*", "trailing.", "a.b.c/d.e",
}

func testNames(t *testing.T, s g4.ObjectStore) {
	for i, n := range awkwardNames {
		MustPut(t, s, n, Data(i, 100+i), map[string]string{"i": fmt.Sprint(i)})
	}
	for i, n := range awkwardNames {
		got, meta := MustGet(t, s, n)
		if !bytes.Equal(got, Data(i, 100+i)) || meta["i"] != fmt.Sprint(i) {
			t.Fatalf("Get(%q) returned another object's bytes or meta %v", n, meta)
		}
		if a, err := s.Head(bg, n); err != nil || a.Size != int64(100+i) || a.Name != n {
			t.Fatalf("Head(%q) = %+v, %v", n, a, err)
		}
	}
	want := slices.Clone(awkwardNames)
	sort.Strings(want)
	if got := Names(t, s, ""); !slices.Equal(got, want) {
		t.Fatalf("List(\"\") =\n%q\nwant (byte order)\n%q", got, want)
	}
	for _, n := range awkwardNames {
		if got := Names(t, s, n); len(got) == 0 || got[0] != n {
			t.Fatalf("List(%q) = %q; want it first", n, got)
		}
	}
	for _, n := range awkwardNames {
		if err := s.Delete(bg, n); err != nil {
			t.Fatalf("Delete(%q): %v", n, err)
		}
	}
	if got := Names(t, s, ""); len(got) != 0 {
		t.Fatalf("List after deleting all = %q", got)
	}
}

func testObjectAndDir(t *testing.T, s g4.ObjectStore) {
	MustPut(t, s, "a", []byte("file a"), nil)
	MustPut(t, s, "a/b", []byte("file a/b"), nil)
	MustPut(t, s, "a/b/c", []byte("file a/b/c"), nil)
	for _, n := range []string{"a", "a/b", "a/b/c"} {
		if got, _ := MustGet(t, s, n); string(got) != "file "+n {
			t.Fatalf("Get(%q) = %q", n, got)
		}
	}
	if got := Names(t, s, ""); !slices.Equal(got, []string{"a", "a/b", "a/b/c"}) {
		t.Fatalf("List = %q", got)
	}
	if err := s.Delete(bg, "a/b"); err != nil {
		t.Fatal(err)
	}
	if got := Names(t, s, ""); !slices.Equal(got, []string{"a", "a/b/c"}) {
		t.Fatalf("List after deleting a/b = %q", got)
	}
}

func testZeroBytes(t *testing.T, s g4.ObjectStore) {
	MustPut(t, s, "empty", nil, nil)
	if got, meta := MustGet(t, s, "empty"); len(got) != 0 || len(meta) != 0 {
		t.Fatalf("Get(empty) = %d bytes, meta %v", len(got), meta)
	}
	if a, err := s.Head(bg, "empty"); err != nil || a.Size != 0 {
		t.Fatalf("Head(empty) = %+v, %v", a, err)
	}
	rc, err := s.GetRange(bg, "empty", 0, -1)
	if err != nil {
		t.Fatalf("GetRange(empty, 0, -1): %v", err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || len(b) != 0 {
		t.Fatalf("GetRange(empty) read %d bytes, %v", len(b), err)
	}
	var sizes []int64
	_ = s.List(bg, "", func(a g4.ObjectAttrs) bool { sizes = append(sizes, a.Size); return true })
	if !slices.Equal(sizes, []int64{0}) {
		t.Fatalf("List sizes = %v", sizes)
	}
}

func testOverwrite(t *testing.T, s g4.ObjectStore) {
	MustPut(t, s, "o", Data(1, 5000), map[string]string{"old": "1", "both": "a"})
	MustPut(t, s, "o", Data(2, 70), map[string]string{"both": "b"})
	got, meta := MustGet(t, s, "o")
	if !bytes.Equal(got, Data(2, 70)) {
		t.Fatalf("Get after overwrite: %d bytes, not the new 70", len(got))
	}
	if !mapsEqual(meta, map[string]string{"both": "b"}) {
		t.Fatalf("meta after overwrite = %v", meta)
	}
	if n := Names(t, s, ""); len(n) != 1 {
		t.Fatalf("List after overwrite = %q", n)
	}
}

func testGetRange(t *testing.T, s g4.ObjectStore) {
	const size = 100_003
	data := Data(3, size)
	MustPut(t, s, "r", data, map[string]string{"m": "v"})
	for _, c := range []struct{ off, n int64 }{
		{0, -1}, {0, size}, {0, 1}, {1, 4095}, {4096, 4096}, {size - 1, 1}, {size - 1, 100},
		{size - 10, -1}, {50_000, 0}, {size, -1}, {size, 10}, {12345, 1 << 20},
	} {
		rc, err := s.GetRange(bg, "r", c.off, c.n)
		if err != nil {
			t.Fatalf("GetRange(%d, %d): %v", c.off, c.n, err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		end := size
		if c.n >= 0 && c.off+c.n < size {
			end = int(c.off + c.n)
		}
		if err != nil || !bytes.Equal(got, data[c.off:end]) {
			t.Fatalf("GetRange(%d, %d) = %d bytes, %v; want bytes [%d, %d)", c.off, c.n, len(got), err, c.off, end)
		}
	}
	for _, off := range []int64{-1, size + 1} {
		if rc, err := s.GetRange(bg, "r", off, 1); !errors.Is(err, g4.ErrInvalid) {
			if rc != nil {
				rc.Close()
			}
			t.Fatalf("GetRange(off=%d) = %v; want ErrInvalid", off, err)
		}
	}
}

func testMissing(t *testing.T, s g4.ObjectStore) {
	MustPut(t, s, "present/x", []byte("x"), nil)
	for _, n := range []string{"absent", "present/y", "present", "present/x/z"} {
		if rc, _, err := s.Get(bg, n); !errors.Is(err, g4.ErrNotExist) {
			if rc != nil {
				rc.Close()
			}
			t.Fatalf("Get(%q) = %v; want ErrNotExist", n, err)
		}
		if rc, err := s.GetRange(bg, n, 0, 1); !errors.Is(err, g4.ErrNotExist) {
			if rc != nil {
				rc.Close()
			}
			t.Fatalf("GetRange(%q) = %v; want ErrNotExist", n, err)
		}
		if _, err := s.Head(bg, n); !errors.Is(err, g4.ErrNotExist) {
			t.Fatalf("Head(%q) = %v; want ErrNotExist", n, err)
		}
		if err := s.Delete(bg, n); err != nil {
			t.Fatalf("Delete(%q) of a missing object = %v; want nil", n, err)
		}
	}
	if err := s.Delete(bg, "present/x"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(bg, "present/x"); err != nil {
		t.Fatalf("second Delete = %v", err)
	}
	if _, err := s.Head(bg, "present/x"); !errors.Is(err, g4.ErrNotExist) {
		t.Fatalf("Head after Delete = %v", err)
	}
}

func testInvalidNames(t *testing.T, s g4.ObjectStore) {
	bad := []string{"", "/abs", "/", "a//b", "a/", "..", ".", "a/../b", "./a", "a/.",
		"bad\xffutf8", "nul\x00", strings.Repeat("n", g4.MaxNameBytes+1)}
	for _, n := range bad {
		if err := s.Put(bg, n, strings.NewReader("x"), 1, nil); !errors.Is(err, g4.ErrInvalid) {
			t.Fatalf("Put(%q) = %v; want ErrInvalid", n, err)
		}
		if _, err := s.Head(bg, n); !errors.Is(err, g4.ErrInvalid) {
			t.Fatalf("Head(%q) = %v; want ErrInvalid", n, err)
		}
		if rc, _, err := s.Get(bg, n); !errors.Is(err, g4.ErrInvalid) {
			if rc != nil {
				rc.Close()
			}
			t.Fatalf("Get(%q) = %v; want ErrInvalid", n, err)
		}
	}
	if got := Names(t, s, ""); len(got) != 0 {
		t.Fatalf("invalid puts left objects: %q", got)
	}
	// A prefix that no valid name can have lists nothing.
	for _, p := range []string{"a//", "../", "/x"} {
		if got := Names(t, s, p); len(got) != 0 {
			t.Fatalf("List(%q) = %q", p, got)
		}
	}
}

func testInvalidMeta(t *testing.T, s g4.ObjectStore) {
	for _, m := range []map[string]string{
		{"Upper": "v"}, {"under_score": "v"}, {"": "v"}, {"k": "caf\u00e9"}, {"k": "line\nbreak"},
		{"k": strings.Repeat("v", g4.MaxMetaBytes)},
	} {
		if err := s.Put(bg, "m", strings.NewReader("x"), 1, m); !errors.Is(err, g4.ErrInvalid) {
			t.Fatalf("Put with meta %q = %v; want ErrInvalid", m, err)
		}
	}
	if _, err := s.Head(bg, "m"); !errors.Is(err, g4.ErrNotExist) {
		t.Fatalf("a rejected Put left an object: %v", err)
	}
}

func testShortReader(t *testing.T, s g4.ObjectStore) {
	MustPut(t, s, "keep", []byte("original"), nil)
	if err := s.Put(bg, "keep", strings.NewReader("short"), 100, nil); err == nil {
		t.Fatal("Put with a reader shorter than size succeeded")
	}
	if got, _ := MustGet(t, s, "keep"); string(got) != "original" {
		t.Fatalf("failed Put changed the object to %q", got)
	}
	if err := s.Put(bg, "new", strings.NewReader("short"), 100, nil); err == nil {
		t.Fatal("Put with a reader shorter than size succeeded")
	}
	if _, err := s.Head(bg, "new"); !errors.Is(err, g4.ErrNotExist) {
		t.Fatalf("failed Put created an object: %v", err)
	}
	// Unknown size (-1) takes whatever the reader yields.
	if err := s.Put(bg, "unknown", strings.NewReader("twelve bytes"), -1, nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := MustGet(t, s, "unknown"); string(got) != "twelve bytes" {
		t.Fatalf("Put(size -1) stored %q", got)
	}
}

func testList(t *testing.T, s g4.ObjectStore) {
	all := []string{"a", "a-b", "a/b", "a/b/c", "a/bc", "a/bc/d", "a0", "b/x/y/z", "ab", "é", "z z"}
	for i, n := range all {
		MustPut(t, s, n, Data(i, i), nil)
	}
	sorted := slices.Clone(all)
	sort.Strings(sorted)
	for _, prefix := range []string{"", "a", "a/", "a/b", "a/b/", "a/bc", "a/bc/", "a/x", "b/", "b/x/y/", "b/x/y/z",
		"b/x/y/zz", "é", "z", "z z", "nope/", "a-"} {
		var want []string
		for _, n := range sorted {
			if strings.HasPrefix(n, prefix) {
				want = append(want, n)
			}
		}
		if got := Names(t, s, prefix); !slices.Equal(got, want) {
			t.Errorf("List(%q) = %q; want %q", prefix, got, want)
		}
	}
	// Sizes in listings are object sizes.
	_ = s.List(bg, "", func(a g4.ObjectAttrs) bool {
		i := slices.Index(all, a.Name)
		if a.Size != int64(i) {
			t.Errorf("List: %q size %d; want %d", a.Name, a.Size, i)
		}
		return true
	})
}

func testListStop(t *testing.T, s g4.ObjectStore) {
	for i := range 5 {
		MustPut(t, s, fmt.Sprintf("d%d/o", i), nil, nil)
	}
	calls := 0
	if err := s.List(bg, "", func(g4.ObjectAttrs) bool { calls++; return calls < 2 }); err != nil {
		t.Fatal(err)
	}
	if calls != 2 {
		t.Fatalf("fn called %d times; List must stop when fn returns false", calls)
	}
}

func testCancelled(t *testing.T, s g4.ObjectStore) {
	MustPut(t, s, "c", []byte("data"), nil)
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if err := s.Put(ctx, "new", strings.NewReader("x"), 1, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put with a cancelled context = %v; want context.Canceled", err)
	}
	if _, err := s.Head(bg, "new"); !errors.Is(err, g4.ErrNotExist) {
		t.Fatalf("cancelled Put created an object: %v", err)
	}
	if rc, _, err := s.Get(ctx, "c"); err == nil {
		_, err = io.ReadAll(rc)
		rc.Close()
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("reading with a cancelled context = %v; want context.Canceled", err)
		}
	} else if !errors.Is(err, context.Canceled) {
		t.Fatalf("Get with a cancelled context = %v; want context.Canceled", err)
	}
}

// testAtomicReplace overwrites one object with versions of different sizes
// while readers read it: every read must be one whole version.
func testAtomicReplace(t *testing.T, s g4.ObjectStore) {
	const versions = 40
	size := func(v int) int { return 1000 + v*3001 }
	MustPut(t, s, "atom", Data(0, size(0)), map[string]string{"v": "0"})
	var wg sync.WaitGroup
	done := make(chan struct{})
	errc := make(chan error, 3)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				rc, meta, err := s.Get(bg, "atom")
				if err != nil {
					errc <- fmt.Errorf("Get during replace: %w", err)
					return
				}
				b, err := io.ReadAll(rc)
				rc.Close()
				var v int
				if _, serr := fmt.Sscan(meta["v"], &v); err != nil || serr != nil || !bytes.Equal(b, Data(v, size(v))) {
					errc <- fmt.Errorf("read %d bytes with meta %v: not one whole version (%v)", len(b), meta, err)
					return
				}
			}
		}()
	}
	for v := 1; v <= versions; v++ {
		MustPut(t, s, "atom", Data(v, size(v)), map[string]string{"v": fmt.Sprint(v)})
	}
	close(done)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if n := Names(t, s, ""); !slices.Equal(n, []string{"atom"}) {
		t.Fatalf("List after replaces = %q (temporary files leaked?)", n)
	}
}
