package fusefs

import (
	"bytes"
	"errors"
	"fmt"
	"log"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// reqCounter counts FUSE requests by opcode from go-fuse's debug log
// (lines "rx <unique>: <OPCODE> ...").
type reqCounter struct {
	mu     sync.Mutex
	counts map[string]int
	rest   []byte
}

func (c *reqCounter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rest = append(c.rest, p...)
	for {
		i := bytes.IndexByte(c.rest, '\n')
		if i < 0 {
			break
		}
		line := string(c.rest[:i])
		c.rest = c.rest[i+1:]
		if !strings.HasPrefix(line, "rx ") {
			continue
		}
		f := strings.Fields(line)
		if len(f) >= 3 {
			c.counts[f[2]]++
		}
	}
	return len(p), nil
}

// take returns the counts since the last take and resets them.
func (c *reqCounter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.counts
	c.counts = map[string]int{}
	return m
}

func countingMount(t *testing.T, opts Options) (*testMount, *reqCounter) {
	c := &reqCounter{counts: map[string]int{}}
	opts.debugLog = log.New(c, "", 0)
	return mount(t, nil, opts), c
}

func perFile(m map[string]int, files int) string {
	var b strings.Builder
	total := 0
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(&b, " %s=%.2f", k, float64(m[k])/float64(files))
		total += m[k]
	}
	return fmt.Sprintf("total=%.2f%s", float64(total)/float64(files), b.String())
}

// kvWrite is the KV write job's per-file pattern (tests/bench/kvjob):
// open(O_CREAT|O_WRONLY|O_TRUNC) of a new name, one write, close.
func kvWrite(t *testing.T, path string, data []byte) {
	t.Helper()
	fd, err := syscall.Open(path, syscall.O_CREAT|syscall.O_WRONLY|syscall.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := syscall.Write(fd, data); n != len(data) || err != nil {
		t.Fatal(n, err)
	}
	if err := syscall.Close(fd); err != nil {
		t.Fatal(err)
	}
}

// atMost fails t when a request count per file in got is above its
// bound in want (opcodes missing from want must not occur at all).
// INTERRUPT is not counted: the kernel sends it when the calling thread
// takes a signal while a request waits for its answer, and the Go
// runtime's own preemption signal (SIGURG) reaches the test's threads at
// random, more often on a loaded machine.
func atMost(t *testing.T, what string, got map[string]int, files int, want map[string]float64) {
	t.Helper()
	t.Logf("%s: %s", what, perFile(got, files))
	for op, n := range got {
		if op == "INTERRUPT" {
			continue
		}
		if per := float64(n) / float64(files); per > want[op] {
			t.Errorf("%s: %.2f %s requests per file, want at most %.2f", what, per, op, want[op])
		}
	}
}

// TestKVWriteRequests counts the FUSE requests per file of the KV job's
// patterns (tests/bench/kvjob) and keeps them from creeping back up. A new
// file costs LOOKUP (the kernel's atomic open looks up every name it has
// no dentry for), CREATE (which answers with the entry and attributes, so
// no LOOKUP or GETATTR follows), GETXATTR security.capability (once per
// inode, before its first write; with HANDLE_KILLPRIV_V2 the inode is
// then S_NOSEC), one WRITE per MiB, the GETATTR of the parent directory
// (CREATE invalidated its attributes and default_permissions checks them
// on the next lookup) and the asynchronous RELEASE. FLUSH is answered
// ENOSYS once per mount and never sent again. Rewriting an existing file
// with O_TRUNC costs OPEN (which truncates: FUSE_ATOMIC_O_TRUNC, no
// SETATTR; the inode stays S_NOSEC, so no GETXATTR), WRITE and RELEASE.
func TestKVWriteRequests(t *testing.T) {
	m, c := countingMount(t, Options{})
	dir := filepath.Join(m.ns(""), "kv")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	data := pattern(3, kvSize)
	const files = 50
	name := func(p string, i int) string { return filepath.Join(dir, fmt.Sprint(p, i)) }
	// The first close of the mount sends the one FLUSH.
	kvWrite(t, name("first", 0), data)
	c.take()

	newFile := map[string]float64{"LOOKUP": 1, "CREATE": 1, "GETXATTR": 1, "WRITE": 1, "GETATTR": 1, "RELEASE": 1.1}
	for i := range files {
		kvWrite(t, name("", i), data)
	}
	atMost(t, "create+write+close", c.take(), files, newFile)

	big := pattern(4, 1<<20)
	for i := range files {
		kvWrite(t, name("big", i), big)
	}
	atMost(t, "create+write 1 MiB+close", c.take(), files, newFile)

	// A miss inside a namespace is never cached (it is counted as a KV
	// lookup miss each time), so the create after a stat that missed
	// looks the name up again: one LOOKUP more than a blind create.
	missThenCreate := maps.Clone(newFile)
	missThenCreate["LOOKUP"] = 2
	for i := range files {
		if _, err := os.Stat(name("new", i)); !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		kvWrite(t, name("new", i), data)
	}
	atMost(t, "stat ENOENT+create+write+close", c.take(), files, missThenCreate)
	// Each file is there, whole.
	for i := range files {
		if got, err := os.ReadFile(name("new", i)); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("new%d after a negative lookup: %d bytes, %v", i, len(got), err)
		}
	}
	c.take()

	for i := range files {
		kvWrite(t, name("", i), data)
	}
	atMost(t, "open O_TRUNC existing+write+close", c.take(), files,
		map[string]float64{"OPEN": 1, "WRITE": 1, "GETATTR": 0.2, "RELEASE": 1.1})

	buf := make([]byte, kvSize)
	for i := range files {
		fd, err := syscall.Open(name("", i), syscall.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := syscall.Pread(fd, buf, 0); n != kvSize || err != nil {
			t.Fatal(n, err)
		}
		syscall.Close(fd)
		if !bytes.Equal(buf, data) {
			t.Fatalf("file %d: wrong bytes", i)
		}
	}
	// The page cache kept what the writes put there: no READ, but for
	// the odd file whose cached pages the kernel dropped meanwhile (memory
	// pressure, or an attribute refresh that saw a newer mtime: seen
	// under a loaded `make test`, 2 and 8 files of 50). A page cache that
	// is not kept would cost one READ per file, so half is the bound.
	atMost(t, "open+read+close", c.take(), files, map[string]float64{"OPEN": 1, "GETATTR": 0.1, "READ": 0.5, "RELEASE": 1.1})
}
