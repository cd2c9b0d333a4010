package fusefs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxmem/ctxmemd/internal/testenv"
)

func TestUnlinkWhileOpen(t *testing.T) {
	m := mount(t, nil, Options{})
	p := filepath.Join(m.ns(""), "f")
	want := pattern(5, 3<<20)
	if err := os.WriteFile(p, want, 0o644); err != nil {
		t.Fatal(err)
	}
	id := m.obj(p)
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stat after unlink: %v", err)
	}
	got, err := io.ReadAll(f)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read after unlink: %d bytes, %v", len(got), err)
	}
	// Reopen the unlinked inode with O_DIRECT: the reads reach the store.
	fd, err := syscall.Open("/proc/self/fd/"+strconv.Itoa(int(f.Fd())), syscall.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	buf := alignedBuf(len(want))
	if n, err := syscall.Read(fd, buf); n != len(want) || err != nil || !bytes.Equal(buf, want) {
		t.Fatalf("O_DIRECT read of the unlinked file: %d, %v", n, err)
	}
	syscall.Close(fd)
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil || st.Nlink != 0 {
		t.Errorf("fstat after unlink: nlink %d, %v", st.Nlink, err)
	}
	if !m.be.exists(id) {
		t.Fatal("object deleted while the file is open")
	}
	f.Close()
	testenv.Eventually(t, 10*time.Second, func() bool { return !m.be.exists(id) }, "object deleted after the last close")
}

// TestRenameOverOpenFile: rename over a file another process is reading;
// the reader keeps the old bytes; the old object goes at its last close.
func TestRenameOverOpenFile(t *testing.T) {
	m := mount(t, nil, Options{})
	dir := m.ns("")
	final := filepath.Join(dir, "final.bin")
	oldData, newData := pattern(1, 2<<20), pattern(2, 2<<20)
	if err := os.WriteFile(final, oldData, 0o644); err != nil {
		t.Fatal(err)
	}
	oldID := m.obj(final)
	r, err := os.Open(final)
	if err != nil {
		t.Fatal(err)
	}
	half := make([]byte, 1<<20)
	if _, err := io.ReadFull(r, half); err != nil {
		t.Fatal(err)
	}
	tmp := final + ".tmp.1.2.x"
	if err := os.WriteFile(tmp, newData, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, final); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(final); !bytes.Equal(got, newData) {
		t.Fatal("final name does not have the new bytes")
	}
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("tmp name still there: %v", err)
	}
	rest, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(append(half, rest...), oldData) {
		t.Fatal("reader of the replaced file did not keep reading the old bytes")
	}
	if !m.be.exists(oldID) {
		t.Fatal("old object deleted while open")
	}
	r.Close()
	testenv.Eventually(t, 10*time.Second, func() bool { return !m.be.exists(oldID) }, "old object deleted at last close")
	if m.be.count() != 1 {
		t.Errorf("objects left: %d, want 1", m.be.count())
	}
}

func TestRenameFlags(t *testing.T) {
	m := mount(t, nil, Options{Namespaces: []Namespace{{Name: "a", Mode: 0o777}, {Name: "b", Mode: 0o777}}})
	a := filepath.Join(m.mnt, "a")
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	write(a+"/x", "X")
	write(a+"/y", "Y")
	if err := unix.Renameat2(unix.AT_FDCWD, a+"/x", unix.AT_FDCWD, a+"/y", unix.RENAME_NOREPLACE); err != unix.EEXIST {
		t.Fatalf("RENAME_NOREPLACE over existing: %v", err)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, a+"/x", unix.AT_FDCWD, a+"/z", unix.RENAME_NOREPLACE); err != nil {
		t.Fatalf("RENAME_NOREPLACE to new name: %v", err)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, a+"/z", unix.AT_FDCWD, a+"/y", unix.RENAME_EXCHANGE); err != nil {
		t.Fatalf("RENAME_EXCHANGE: %v", err)
	}
	if read(a+"/z") != "Y" || read(a+"/y") != "X" {
		t.Fatal("RENAME_EXCHANGE did not swap")
	}
	os.Mkdir(a+"/d", 0o755)
	write(a+"/d/in", "I")
	if err := unix.Renameat2(unix.AT_FDCWD, a+"/d", unix.AT_FDCWD, a+"/y", unix.RENAME_EXCHANGE); err != nil {
		t.Fatalf("RENAME_EXCHANGE dir/file: %v", err)
	}
	if read(a+"/y/in") != "I" || read(a+"/d") != "X" {
		t.Fatal("exchange of a directory and a file")
	}
	if err := os.Rename(a+"/z", filepath.Join(m.mnt, "b", "z")); !errors.Is(err, syscall.EXDEV) {
		t.Fatalf("rename across namespaces: %v, want EXDEV", err)
	}
	os.MkdirAll(a+"/p/q", 0o755)
	if err := os.Rename(a+"/p", a+"/p/q/r"); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("rename into own subdirectory: %v, want EINVAL", err)
	}
	write(a+"/p/q/f", "F")
	os.Mkdir(a+"/e", 0o755)
	if err := unix.Rename(a+"/e", a+"/p"); err != unix.ENOTEMPTY {
		t.Fatalf("rename dir over non-empty dir: %v, want ENOTEMPTY", err)
	}
	if err := unix.Rename(a+"/p", a+"/e"); err != nil {
		t.Fatalf("rename dir over empty dir: %v", err)
	}
	if read(a+"/e/q/f") != "F" {
		t.Fatal("moved tree")
	}
	if err := os.Rename(a, filepath.Join(m.mnt, "c")); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("rename of a namespace: %v, want EPERM", err)
	}
}

// TestRenameAtomicUnderLoad is the SGLang HiCacheFile pattern: writers
// publish complete versions with tmp+rename over one final name while
// readers open it and read it whole: a reader sees exactly one complete
// version, never a short or mixed file, and no tmp file is left.
func TestRenameAtomicUnderLoad(t *testing.T) {
	m := mount(t, nil, Options{})
	dir := m.ns("")
	final := filepath.Join(dir, "key.bin")
	const size = 1 << 20
	versions := [][]byte{pattern(10, size), pattern(11, size), pattern(12, size)}
	if err := os.WriteFile(final, versions[0], 0o644); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 40; i++ {
				tmp := fmt.Sprintf("%s.tmp.%d.%d", final, w, i)
				if err := os.WriteFile(tmp, versions[(w+i)%3], 0o644); err != nil {
					t.Error(err)
					return
				}
				if err := os.Rename(tmp, final); err != nil {
					t.Error(err)
					return
				}
			}
		}(w)
	}
	reads := atomic.Int64{}
	for r := 0; r < 2; r++ {
		go func() {
			buf := make([]byte, size+1)
			for !stop.Load() {
				fd, err := syscall.Open(final, syscall.O_RDONLY, 0)
				if err != nil {
					t.Error(err)
					return
				}
				n, err := syscall.Read(fd, buf)
				syscall.Close(fd)
				if err != nil || n != size {
					t.Errorf("read %d, %v", n, err)
					return
				}
				ok := false
				for _, v := range versions {
					ok = ok || bytes.Equal(buf[:n], v)
				}
				if !ok {
					t.Error("read a mixed or corrupt version")
					return
				}
				reads.Add(1)
			}
		}()
	}
	wg.Wait()
	stop.Store(true)
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 || ents[0].Name() != "key.bin" {
		t.Errorf("directory after the run: %v", ents)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return m.be.count() == 1 }, "replaced objects deleted")
	t.Logf("%d whole-file reads", reads.Load())
}
