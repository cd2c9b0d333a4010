package fusefs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ctxmem/ctxmemd/internal/testenv"
)

// alignedBuf returns n bytes aligned to 4 KiB (for O_DIRECT).
func alignedBuf(n int) []byte {
	b := make([]byte, n+4096)
	off := 4096 - int(uintptr(unsafe.Pointer(&b[0]))&4095)
	return b[off%4096 : off%4096+n]
}

func TestCreateExclTrunc(t *testing.T) {
	m := mount(t, nil, Options{})
	p := filepath.Join(m.ns(""), "f")
	if err := os.WriteFile(p, []byte("hello world"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644); !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("O_EXCL on existing file: %v, want EEXIST", err)
	}
	id := m.obj(p)
	info, _ := m.be.Stat(id)
	gen := info.Gen
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("new")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	got, err := os.ReadFile(p)
	if err != nil || string(got) != "new" {
		t.Fatalf("after O_TRUNC: %q, %v", got, err)
	}
	info, _ = m.be.Stat(id)
	if info.Gen != gen+1 || info.Size != 3 {
		t.Errorf("object after O_TRUNC: gen %d size %d, want gen %d size 3", info.Gen, info.Size, gen+1)
	}
	m.be.mu.Lock()
	tr := m.be.truncs[id]
	m.be.mu.Unlock()
	if len(tr) != 1 || tr[0] != 0 {
		t.Errorf("Backend.Truncate calls %v, want [0]", tr)
	}
	// A new O_EXCL file works, and a second O_EXCL create loses.
	q := filepath.Join(m.ns(""), "dest_x.tmp")
	fd, err := syscall.Open(q, syscall.O_CREAT|syscall.O_EXCL|syscall.O_TRUNC|syscall.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if _, err := syscall.Open(q, syscall.O_CREAT|syscall.O_EXCL|syscall.O_WRONLY, 0o644); err != syscall.EEXIST {
		t.Fatalf("second O_EXCL: %v, want EEXIST", err)
	}
}

func TestLargeSingleReadWrite(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags int
		cache CacheMode
	}{{"buffered", 0, CacheKeep}, {"odirect", syscall.O_DIRECT, CacheKeep}, {"cachedirect", 0, CacheDirect}} {
		t.Run(tc.name, func(t *testing.T) {
			m := mount(t, nil, Options{Cache: tc.cache})
			size := 32 << 20
			if raceEnabled {
				size = 8 << 20
			}
			p := filepath.Join(m.ns(""), "big")
			data := alignedBuf(size)
			copy(data, pattern(7, size))
			fd, err := syscall.Open(p, syscall.O_CREAT|syscall.O_WRONLY|tc.flags, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			if n, err := syscall.Write(fd, data); n != size || err != nil {
				t.Fatalf("write: %d, %v; want %d in one call", n, err, size)
			}
			syscall.Close(fd)
			if got, _ := m.be.data(m.obj(p)); !bytes.Equal(got, data) {
				t.Fatal("backend object differs from what was written")
			}
			fd, err = syscall.Open(p, syscall.O_RDONLY|tc.flags, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer syscall.Close(fd)
			buf := alignedBuf(size)
			if n, err := syscall.Read(fd, buf); n != size || err != nil {
				t.Fatalf("read: %d, %v; want %d in one call", n, err, size)
			}
			if !bytes.Equal(buf, data) {
				t.Fatal("read back different bytes")
			}
		})
	}
}

// TestODirectBypassesPageCache changes an object behind the kernel's back
// (which never happens in service): a buffered read returns the cached
// bytes, while O_DIRECT, at open or set later with F_SETFL, reads the
// store.
func TestODirectBypassesPageCache(t *testing.T) {
	m := mount(t, nil, Options{})
	p := filepath.Join(m.ns(""), "f")
	orig := pattern(1, 64<<10)
	if err := os.WriteFile(p, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	// The kernel may reclaim the cached pages between the two reads (a CI
	// machine under memory pressure did once): that is not the mount's
	// doing, so a round whose second read finds the store's bytes is
	// tried again, three times at most.
	var changed []byte
	for round := byte(0); ; round++ {
		cached, _ := os.ReadFile(p) // populate the page cache
		if got, _ := m.be.data(m.obj(p)); !bytes.Equal(cached, got) {
			t.Fatal("read back")
		}
		changed = pattern(2+round, 64<<10)
		if _, err := m.be.WriteAt(t.Context(), m.obj(p), changed, 0); err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(p)
		if bytes.Equal(got, cached) {
			break
		}
		if round == 2 || !bytes.Equal(got, changed) {
			t.Fatalf("buffered read did not come from the page cache (round %d)", round)
		}
		t.Logf("round %d: the cached pages were reclaimed between the reads; again", round)
	}
	buf := alignedBuf(64 << 10)
	fd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := syscall.Pread(fd, buf, 0); n != len(buf) || err != nil || !bytes.Equal(buf, changed) {
		t.Fatalf("O_DIRECT read: %d, %v, same=%v", n, err, bytes.Equal(buf, changed))
	}
	syscall.Close(fd)

	fd, err = syscall.Open(p, syscall.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl|unix.O_DIRECT); err != nil {
		t.Fatalf("F_SETFL O_DIRECT: %v", err)
	}
	clear(buf)
	if n, err := syscall.Pread(fd, buf, 0); n != len(buf) || err != nil || !bytes.Equal(buf, changed) {
		t.Fatalf("read after F_SETFL O_DIRECT: %d, %v, same=%v", n, err, bytes.Equal(buf, changed))
	}
	// An aligned O_DIRECT write reaches the store and drops stale pages.
	third := alignedBuf(8192)
	copy(third, pattern(3, 8192))
	if n, err := syscall.Pwrite(fd, third, 4096); n != 8192 || err != nil {
		t.Fatalf("O_DIRECT pwrite: %d, %v", n, err)
	}
	want := append(append(append([]byte{}, changed[:4096]...), third...), changed[12288:]...)
	if got, _ := m.be.data(m.obj(p)); !bytes.Equal(got, want) {
		t.Fatal("store content after O_DIRECT pwrite")
	}
	if got, _ := os.ReadFile(p); !bytes.Equal(got[4096:12288], third) {
		t.Fatal("buffered read after O_DIRECT write returned stale pages")
	}
	// Misaligned O_DIRECT (buffer, offset and length) is served exactly,
	// not rejected and not corrupted.
	odd := alignedBuf(8192)[1 : 1+5000]
	copy(odd, pattern(4, 5000))
	if n, err := syscall.Pwrite(fd, odd, 3); n != 5000 || err != nil {
		t.Fatalf("misaligned O_DIRECT pwrite: %d, %v", n, err)
	}
	back := alignedBuf(8192)[3 : 3+5000]
	if n, err := syscall.Pread(fd, back, 3); n != 5000 || err != nil || !bytes.Equal(back, odd) {
		t.Fatalf("misaligned O_DIRECT pread: %d, %v", n, err)
	}
	if got, _ := m.be.data(m.obj(p)); !bytes.Equal(got[3:5003], odd) || !bytes.Equal(got[:3], changed[:3]) {
		t.Fatal("store content after misaligned O_DIRECT write")
	}
}

func TestPreadPwriteConcurrentSlots(t *testing.T) {
	m := mount(t, nil, Options{})
	p := filepath.Join(m.ns(""), "slots")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const slot, slots = 256 << 10, 16
	var wg sync.WaitGroup
	for i := 0; i < slots; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for round := 0; round < 3; round++ {
				if _, err := f.WriteAt(pattern(byte(i*3+round), slot), int64(i)*slot); err != nil {
					t.Error(err)
				}
			}
		}(i)
	}
	wg.Wait()
	buf := make([]byte, slot)
	for i := 0; i < slots; i++ {
		if _, err := f.ReadAt(buf, int64(i)*slot); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf, pattern(byte(i*3+2), slot)) {
			t.Fatalf("slot %d: not the last write", i)
		}
	}
	// A hole reads as zeros.
	if _, err := f.WriteAt([]byte{1}, 40<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadAt(buf, 20<<20); err != nil || !bytes.Equal(buf, make([]byte, slot)) {
		t.Fatalf("hole: %v", err)
	}
}

func TestTruncate(t *testing.T) {
	m := mount(t, nil, Options{})
	p := filepath.Join(m.ns(""), "f")
	if err := os.WriteFile(p, pattern(1, 10000), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, 100); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(5000); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(p)
	want := append(pattern(1, 10000)[:100], make([]byte, 4900)...)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("after truncate 100 then ftruncate 5000: len %d, %v", len(got), err)
	}
	if st, _ := os.Stat(p); st.Size() != 5000 {
		t.Errorf("size %d", st.Size())
	}
	if info, _ := m.be.Stat(m.obj(p)); info.Size != 5000 {
		t.Errorf("object size %d", info.Size)
	}
}

func TestUtimensAtimeOnly(t *testing.T) {
	m := mount(t, nil, Options{})
	p := filepath.Join(m.ns(""), "f")
	if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	mt := unix.NsecToTimespec(time.Date(2020, 1, 2, 3, 4, 5, 6, time.UTC).UnixNano())
	at := unix.NsecToTimespec(time.Date(2021, 1, 2, 3, 4, 5, 7, time.UTC).UnixNano())
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{at, mt}, 0); err != nil {
		t.Fatal(err)
	}
	// atime = now, mtime omitted (vLLM FS tier / llm-d on a hit).
	before := time.Now()
	omit := unix.Timespec{Nsec: unix.UTIME_OMIT}
	now := unix.Timespec{Nsec: unix.UTIME_NOW}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{now, omit}, 0); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mtim != mt {
		t.Errorf("mtime changed: %v, want %v", st.Mtim, mt)
	}
	if got := time.Unix(st.Atim.Unix()); got.Before(before.Add(-time.Second)) {
		t.Errorf("atime %v not updated to now", got)
	}
	// mtime only.
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{omit, at}, 0); err != nil {
		t.Fatal(err)
	}
	unix.Stat(p, &st)
	if st.Mtim != at {
		t.Errorf("mtime %v, want %v", st.Mtim, at)
	}
}

func TestFsync(t *testing.T) {
	m := mount(t, nil, Options{})
	p := filepath.Join(m.ns(""), "f")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Write([]byte("data"))
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		t.Fatal(err)
	}
	id := m.obj(p)
	m.be.mu.Lock()
	n := m.be.flushes[id]
	dirty := m.be.objs[id].info.Dirty
	m.be.mu.Unlock()
	if n != 2 || dirty {
		t.Errorf("Backend.Flush calls %d (want 2), dirty %v", n, dirty)
	}
	d, err := os.Open(m.ns(""))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		t.Fatalf("fsync of a directory: %v", err)
	}
}

func TestStatfs(t *testing.T) {
	be := newFakeBackend()
	be.total = 1 << 30
	m := mount(t, be, Options{Namespaces: []Namespace{
		{Name: "big", Mode: 0o777},
		{Name: "small", Mode: 0o777, QuotaBytes: 8 << 20},
	}})
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Join(m.mnt, "big"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Bsize != 4096 || st.Frsize != 4096 || st.Blocks != (1<<30)/4096 || st.Bavail != st.Blocks {
		t.Fatalf("statfs: bsize %d frsize %d blocks %d bavail %d", st.Bsize, st.Frsize, st.Blocks, st.Bavail)
	}
	if err := os.WriteFile(filepath.Join(m.mnt, "big", "f"), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	unix.Statfs(filepath.Join(m.mnt, "big"), &st)
	if st.Bavail != (1<<30-1<<20)/4096 {
		t.Errorf("bavail after 1 MiB write: %d", st.Bavail)
	}
	if err := os.WriteFile(filepath.Join(m.mnt, "small", "f"), make([]byte, 2<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	unix.Statfs(filepath.Join(m.mnt, "small", "f"), &st)
	if st.Blocks != (8<<20)/4096 || st.Bavail != (6<<20)/4096 {
		t.Errorf("quota statfs: blocks %d bavail %d", st.Blocks, st.Bavail)
	}
}

func TestFallocate(t *testing.T) {
	m := mount(t, nil, Options{})
	p := filepath.Join(m.ns(""), "f")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	if err := unix.Fallocate(fd, 0, 0, 100<<20); err != nil {
		t.Fatalf("fallocate mode 0: %v", err)
	}
	if st, _ := f.Stat(); st.Size() != 100<<20 {
		t.Fatalf("size after fallocate: %d", st.Size())
	}
	if err := unix.Fallocate(fd, 0, 0, 4096); err != nil { // inside: no-op
		t.Fatal(err)
	}
	for _, mode := range []uint32{unix.FALLOC_FL_KEEP_SIZE, unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE, unix.FALLOC_FL_ZERO_RANGE} {
		if err := unix.Fallocate(fd, mode, 0, 4096); err != unix.EOPNOTSUPP {
			t.Errorf("fallocate mode %#x: %v, want EOPNOTSUPP", mode, err)
		}
	}
	buf := make([]byte, 4096)
	if _, err := f.ReadAt(buf, 50<<20); err != nil || !bytes.Equal(buf, make([]byte, 4096)) {
		t.Fatalf("fallocated range reads %v", err)
	}
}

func TestTmpfile(t *testing.T) {
	m := mount(t, nil, Options{})
	dir := m.ns("")
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("O_TMPFILE: %v", err)
	}
	if _, err := unix.Pwrite(fd, []byte("anon"), 0); err != nil {
		t.Fatal(err)
	}
	if m.be.count() != 1 {
		t.Fatalf("objects: %d", m.be.count())
	}
	unix.Close(fd)
	testenv.Eventually(t, 10*time.Second, func() bool { return m.be.count() == 0 }, "O_TMPFILE object deleted at close")

	// linkat through /proc/self/fd names it.
	fd, err = unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	unix.Pwrite(fd, []byte("named"), 0)
	if err := unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), unix.AT_FDCWD, filepath.Join(dir, "named"), unix.AT_SYMLINK_FOLLOW); err != nil {
		t.Fatalf("linkat: %v", err)
	}
	unix.Close(fd)
	time.Sleep(50 * time.Millisecond)
	if got, err := os.ReadFile(filepath.Join(dir, "named")); err != nil || string(got) != "named" {
		t.Fatalf("linked tmpfile: %q %v", got, err)
	}
	if m.be.count() != 1 {
		t.Fatalf("objects after linkat+close: %d", m.be.count())
	}
}

func TestMmapSharedWrite(t *testing.T) {
	m := mount(t, nil, Options{})
	p := filepath.Join(m.ns(""), "mm")
	const size = 1 << 20
	if err := os.WriteFile(p, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	want := pattern(9, size)
	copy(mem, want)
	// Visible to a reader through read(2) before munmap.
	if got, _ := os.ReadFile(p); !bytes.Equal(got, want) {
		t.Fatal("read(2) does not see the mmap writes")
	}
	if err := unix.Msync(mem, unix.MS_SYNC); err != nil {
		t.Fatal(err)
	}
	unix.Munmap(mem)
	f.Close()
	if got, _ := m.be.data(m.obj(p)); !bytes.Equal(got, want) {
		t.Fatal("mmap writes did not reach the store")
	}
	buf := alignedBuf(size)
	fd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if n, err := syscall.Read(fd, buf); n != size || err != nil || !bytes.Equal(buf, want) {
		t.Fatalf("O_DIRECT read after mmap write: %d %v", n, err)
	}
}

func TestReadAhead(t *testing.T) {
	m := mount(t, nil, Options{ReadAhead: 2 << 20})
	var st unix.Stat_t
	if err := unix.Stat(m.mnt, &st); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev)))
	if err != nil {
		testenv.Skip(t, "no bdi in sysfs: %v", err)
	}
	if strings.TrimSpace(string(b)) != "2048" {
		t.Fatalf("read_ahead_kb %q, want 2048", b)
	}
}

// TestOpenTruncate: open(O_TRUNC) of an existing file truncates in the
// OPEN (FUSE_ATOMIC_O_TRUNC). What was written before must be gone for
// every reader, one holding the file open (its page cache) included, and
// what is written after must be all there is; the store's size, quota
// usage and the setuid bit (cleared for non-root callers) follow as they
// did with the SETATTR.
func TestOpenTruncate(t *testing.T) {
	m := mount(t, nil, Options{Namespaces: []Namespace{{Name: "q", Mode: 0o1777, QuotaBytes: 4 << 20}}})
	for d := m.mnt; d != "/tmp" && d != "/"; d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	p := filepath.Join(m.ns("q"), "f")
	old := pattern(1, 1<<20)
	if err := os.WriteFile(p, old, 0o644); err != nil {
		t.Fatal(err)
	}
	reader, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	buf := make([]byte, len(old))
	if n, err := reader.ReadAt(buf, 0); n != len(old) || !bytes.Equal(buf, old) {
		t.Fatalf("first read: %d %v", n, err)
	}

	// O_RDONLY|O_TRUNC truncates too (Linux; the kernel checks write
	// permission for it).
	fd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	syscall.Close(fd)
	if st, err := os.Stat(p); err != nil || st.Size() != 0 {
		t.Fatalf("after O_RDONLY|O_TRUNC: %v %v", st, err)
	}

	short := pattern(2, 100)
	if err := os.WriteFile(p, short, 0o644); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(p); err != nil || st.Size() != int64(len(short)) {
		t.Fatalf("after rewrite: %v %v", st, err)
	}
	if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, short) {
		t.Fatalf("new reader: %d bytes %v", len(got), err)
	}
	if n, _ := reader.ReadAt(buf, 0); n != len(short) || !bytes.Equal(buf[:n], short) {
		t.Fatalf("old reader: %d bytes, want the %d new ones", n, len(short))
	}
	if info, err := m.be.Stat(m.obj(p)); err != nil || info.Size != int64(len(short)) {
		t.Fatalf("store: %+v %v", info, err)
	}
	if used := m.srv.fsys.nss[0].Used(); used != int64(len(short)) {
		t.Fatalf("quota usage %d, want %d", used, len(short))
	}

	// setuid survives root's O_TRUNC and not another user's.
	if err := syscall.Chmod(p, 0o4666); err != nil {
		t.Fatal(err)
	}
	fd, err = syscall.Open(p, syscall.O_WRONLY|syscall.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	syscall.Close(fd)
	if st, _ := os.Stat(p); st.Mode()&os.ModeSetuid == 0 {
		t.Fatalf("root's O_TRUNC cleared setuid: %v", st.Mode())
	}
	asUser(t, 1000, 1000, func() {
		fd, err := syscall.Open(p, syscall.O_WRONLY|syscall.O_TRUNC, 0)
		if err != nil {
			t.Error(err)
			return
		}
		syscall.Close(fd)
	})
	if st, _ := os.Stat(p); st.Mode()&os.ModeSetuid != 0 {
		t.Fatalf("O_TRUNC by uid 1000 kept setuid: %v", st.Mode())
	}
}

// TestRelatimeOnRelease is issue 18 item 4: closing an open for reading
// updates atime by the relatime rule (older than mtime, or a day old), so
// atime-ordered evictors do not evict a file just read; a fresh atime and
// O_NOATIME are left alone, and so is an open for writing only.
func TestRelatimeOnRelease(t *testing.T) {
	m := mount(t, nil, Options{AttrTimeout: -1})
	p := filepath.Join(m.ns(""), "kv")
	if err := os.WriteFile(p, []byte("block"), 0o644); err != nil {
		t.Fatal(err)
	}
	atime := func() time.Time {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		return time.Unix(st.Atim.Unix())
	}
	read := func(flags int) {
		fd, err := unix.Open(p, flags, 0)
		if err != nil {
			t.Fatal(err)
		}
		if flags&unix.O_ACCMODE != unix.O_WRONLY {
			unix.Read(fd, make([]byte, 8))
		}
		unix.Close(fd)
		// RELEASE is asynchronous to close(2): wait for it.
		time.Sleep(50 * time.Millisecond)
	}
	mtime := time.Now().Add(-time.Hour).Truncate(time.Second)
	older := mtime.Add(-time.Hour)
	if err := os.Chtimes(p, older, mtime); err != nil {
		t.Fatal(err)
	}
	read(unix.O_WRONLY)
	if got := atime(); !got.Equal(older) {
		t.Fatalf("open for writing moved atime to %v", got)
	}
	read(unix.O_RDONLY | unix.O_NOATIME)
	if got := atime(); !got.Equal(older) {
		t.Fatalf("O_NOATIME open moved atime to %v", got)
	}
	read(unix.O_RDONLY)
	testenv.Eventually(t, 10*time.Second, func() bool { return atime().After(mtime) }, "atime past mtime after a read")
	// Newer than mtime and ctime, less than a day old: unchanged.
	fresh := time.Now().Add(time.Minute).Truncate(time.Second)
	if err := os.Chtimes(p, fresh, mtime); err != nil {
		t.Fatal(err)
	}
	read(unix.O_RDONLY)
	if got := atime(); !got.Equal(fresh) {
		t.Fatalf("fresh atime %v moved to %v", fresh, got)
	}
	// A day old: updated.
	day := time.Now().Add(-25 * time.Hour).Truncate(time.Second)
	if err := os.Chtimes(p, day, day.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	read(unix.O_RDONLY)
	testenv.Eventually(t, 10*time.Second, func() bool { return atime().After(time.Now().Add(-time.Minute)) }, "day-old atime updated")
}
