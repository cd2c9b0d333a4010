package tests

// End-to-end tests of G4 on S3 (issue 4) through the real mount against a
// real S3 server: versitygw serving a temporary directory on 127.0.0.1
// (tiering/g4/s3/s3test), with G3 disabled so that blocks leave G2 straight
// for G4. File data is read back with O_DIRECT, so every read reaches the
// daemon instead of the kernel page cache (the mount keeps the page cache
// across opens).
//
//	CTXMEM_E2E=1 go test -count=1 -run S3 -v ./tests/

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxmem/ctxmemd/internal/testenv"
	"github.com/ctxmem/ctxmemd/tests/harness"
	"github.com/ctxmem/ctxmemd/tests/workloads"
	"github.com/ctxmem/ctxmemd/tiering/g4/s3/s3test"
)

// s3Prefix is the key prefix of the daemon's G4 objects in the bucket: a
// space, '%', '+' and non-ASCII letters, so every S3 request and listing
// must escape and unescape keys exactly.
const s3Prefix = "ctx mem/100%+ü é"

// s3BlockSize is the namespace block size of the S3 tests (the default).
const s3BlockSize = 256 << 10

// maxFailTime bounds how long a read of a G4-only block may take to fail
// while the S3 server is down or hung.
const maxFailTime = 15 * time.Second

// s3URL returns the --g4 URL of srv with prefix (path-escaped per segment).
func s3URL(srv *s3test.Server, bucket, prefix string) string {
	return s3URLAt(srv.Endpoint, bucket, prefix)
}

// s3URLAt is s3URL with another endpoint (host:port), e.g. a proxy.
func s3URLAt(endpoint, bucket, prefix string) string {
	segs := strings.Split(prefix, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	q := url.Values{"endpoint": {endpoint}, "path_style": {"true"}, "insecure": {"true"}, "region": {s3test.Region}}
	return "s3://" + bucket + "/" + strings.Join(segs, "/") + "?" + q.Encode()
}

// startS3Daemon starts a versitygw and a daemon whose G4 is its bucket
// (credentials through AWS_* of the daemon's environment), with dram of G2
// and G3 disabled.
func startS3Daemon(t *testing.T, dram string) (*s3test.Server, *harness.Daemon) {
	t.Helper()
	return startS3DaemonWith(t, harness.Options{DRAM: dram, G3Size: "0"})
}

// startS3DaemonWith is startS3Daemon with opts (G4 set to the server).
func startS3DaemonWith(t *testing.T, opts harness.Options) (*s3test.Server, *harness.Daemon) {
	t.Helper()
	bin := needE2E(t)
	srv := s3test.StartServer(t)
	// The harness passes the test's environment to the daemon.
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	t.Setenv("AWS_SESSION_TOKEN", "")
	opts.G4 = s3URL(srv, srv.Bucket, s3Prefix)
	d := harness.Start(t, bin, opts)
	return srv, d
}

// flipObjectByte flips byte off of the daemon's object key (relative to
// the prefix) on the server's disk.
func flipObjectByte(t *testing.T, srv *s3test.Server, key string, off int64) {
	t.Helper()
	p := srv.ObjectPath(s3Prefix + "/" + key)
	fd, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	b := make([]byte, 1)
	if _, err := fd.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x5a
	if _, err := fd.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
	t.Logf("flipped byte %d of object %q", off, key)
}

// s3File is one test file: its bytes are the pattern of its name.
type s3File struct {
	name string // relative to the namespace
	size int64
}

func (f s3File) blocks() int64 { return (f.size + s3BlockSize - 1) / s3BlockSize }

// writePattern creates path with size bytes of the pattern of key, fsyncs
// and closes it.
func writePattern(path, key string, size int64) error {
	fd, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	for off := int64(0); off < size; {
		n := min(int64(len(buf)), size-off)
		workloads.Fill(buf[:n], key, 1, off)
		if _, err := fd.Write(buf[:n]); err != nil {
			fd.Close()
			return fmt.Errorf("write %s at %d: %w", path, off, err)
		}
		off += n
	}
	if err := fd.Sync(); err != nil {
		fd.Close()
		return fmt.Errorf("fsync %s: %w", path, err)
	}
	return fd.Close()
}

// readDirect reads the whole of path with O_DIRECT (bypassing the page
// cache) into a page-aligned buffer and returns a copy of the bytes.
func readDirect(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &fs.PathError{Op: "fstat", Path: path, Err: err}
	}
	capacity := (int(st.Size)/4096 + 1) * 4096 // room to see EOF
	buf, err := unix.Mmap(-1, 0, capacity, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, err
	}
	defer unix.Munmap(buf)
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:min(n+1<<20, len(buf))])
		if err != nil {
			return nil, &fs.PathError{Op: fmt.Sprintf("read at %d", n), Path: path, Err: err}
		}
		if m == 0 {
			break
		}
		n += m
	}
	return bytes.Clone(buf[:n]), nil
}

// preadDirect reads length bytes at off of path with O_DIRECT (off and
// length multiples of 4096).
func preadDirect(path string, off int64, length int) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	buf, err := unix.Mmap(-1, 0, length, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, err
	}
	defer unix.Munmap(buf)
	n, err := unix.Pread(fd, buf, off)
	if err != nil {
		return nil, &fs.PathError{Op: fmt.Sprintf("pread at %d", off), Path: path, Err: err}
	}
	return bytes.Clone(buf[:n]), nil
}

// readResult is one bounded read.
type readResult struct {
	data []byte
	err  error
	took time.Duration
	hung bool // did not return within the bound
}

// timedRead runs fn in a goroutine and waits at most limit for it. A read
// that hangs is left behind; it ends when the test's cleanup kills the
// daemon (the FUSE connection is then aborted).
func timedRead(limit time.Duration, fn func() ([]byte, error)) readResult {
	type out struct {
		b   []byte
		err error
	}
	ch := make(chan out, 1)
	start := time.Now()
	go func() { b, err := fn(); ch <- out{b, err} }() // owned by timedRead's caller's test; see above
	select {
	case o := <-ch:
		return readResult{data: o.b, err: o.err, took: time.Since(start)}
	case <-time.After(limit):
		return readResult{took: time.Since(start), hung: true}
	}
}

// checkPattern returns "" when data is exactly the size bytes of key's
// pattern, else what is wrong.
func checkPattern(data []byte, key string, size int64) string {
	if int64(len(data)) != size {
		return fmt.Sprintf("%d bytes, want %d", len(data), size)
	}
	if at := workloads.Verify(data, key, 1, 0); at != -1 {
		return fmt.Sprintf("wrong byte at offset %d (block %d)", at, int64(at)/s3BlockSize)
	}
	return ""
}

// blockTiers returns the tier of every block of path from its
// user.ctxmem.tier attribute ("G4*3 G2" → [G4 G4 G4 G2]).
func blockTiers(path string) ([]string, error) {
	buf := make([]byte, 4096)
	for {
		n, err := unix.Getxattr(path, "user.ctxmem.tier", buf)
		if errors.Is(err, unix.ERANGE) {
			buf = make([]byte, 4*len(buf))
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "getxattr user.ctxmem.tier", Path: path, Err: err}
		}
		var out []string
		for _, run := range strings.Fields(string(buf[:n])) {
			name, count, found := strings.Cut(run, "*")
			c := 1
			if found {
				if c, err = strconv.Atoi(count); err != nil || c < 1 {
					return nil, fmt.Errorf("%s: bad user.ctxmem.tier run %q in %q", path, run, buf[:n])
				}
			}
			for range c {
				out = append(out, name)
			}
		}
		return out, nil
	}
}

// countTier returns how many of tiers are name.
func countTier(tiers []string, name string) int {
	n := 0
	for _, t := range tiers {
		if t == name {
			n++
		}
	}
	return n
}

// blockObjects returns the files of the server's backing directory that
// hold the daemon's block objects (keys <s3Prefix>/blocks/...), keyed by
// the key relative to the prefix, with their sizes.
func blockObjects(t *testing.T, srv *s3test.Server) map[string]int64 {
	t.Helper()
	root := srv.ObjectPath(s3Prefix + "/blocks")
	out := map[string]int64{}
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p == root {
				return nil
			}
			return err
		}
		if !e.Type().IsRegular() {
			return nil
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(srv.ObjectPath(s3Prefix), p)
		out[filepath.ToSlash(rel)] = info.Size()
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", root, err)
	}
	return out
}

// stat reads one counter of the status's stats object (a number, or a
// per-tier map when tierName is set).
func statCounter(t *testing.T, st harness.Status, key, tierName string) int64 {
	t.Helper()
	raw, ok := st.Stats[key]
	if !ok {
		t.Fatalf("status stats has no %q: %s", key, st.Raw)
	}
	if tierName == "" {
		var v int64
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatalf("status stats %q: %v", key, err)
		}
		return v
	}
	var m map[string]int64
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("status stats %q: %v", key, err)
	}
	return m[tierName]
}

// pushOutOfG2 writes (and fsyncs) filler files of 8 MiB into dir until
// every block of the files of want is in G4 only, or rounds fillers were
// written; it returns the filler files (which hold their name's pattern).
func pushOutOfG2(t *testing.T, dir string, rounds int, want func() bool) []s3File {
	t.Helper()
	var fillers []s3File
	for i := 0; i < rounds && !want(); i++ {
		f := s3File{name: fmt.Sprintf("filler %02d ü+%%.bin", i), size: 8 << 20}
		if err := writePattern(filepath.Join(dir, f.name), f.name, f.size); err != nil {
			t.Fatal(err)
		}
		fillers = append(fillers, f)
		testenv.Poll(2*time.Second, want) // eviction is asynchronous
	}
	return fillers
}

// allG4 reports whether every block of every file is in G4 only.
func allG4(dir string, files []s3File) bool {
	for _, f := range files {
		tiers, err := blockTiers(filepath.Join(dir, f.name))
		if err != nil || countTier(tiers, "G4") != int(f.blocks()) {
			return false
		}
	}
	return true
}

// TestE2ES3RoundTrip: files of many sizes (0 bytes to 64 MiB) and names
// (spaces, %, +, unicode) written through the mount with G3 disabled and a
// 16 MiB G2 end up in the S3 bucket, one object per block under a prefix
// with the same kinds of characters; with G2 overrun they are G4-only and
// read back byte-exact, and again after a daemon restart, when G2 is empty
// and every byte comes from S3.
func TestE2ES3RoundTrip(t *testing.T) {
	srv, d := startS3Daemon(t, "16MiB")
	ns := d.Namespace()
	sub := filepath.Join("dir with space", "ü+%20")
	if err := os.MkdirAll(filepath.Join(ns, sub), 0o755); err != nil {
		t.Fatal(err)
	}
	files := []s3File{
		{"empty file", 0},
		{"one byte", 1},
		{"100% done.kv", 4096},
		{"a+b=c&d.kv", s3BlockSize},
		{"ünïcødé 日本語 🙂.kv", s3BlockSize + 1},
		{" lead and trail ", 3<<20 + 17},
		{"a%2Fb %20+.kv", 1 << 20},
		{filepath.Join(sub, "nested +%.kv"), 2<<20 - 3},
		{"big 64MiB.kv", 64 << 20},
	}
	start := time.Now()
	var total int64
	for _, f := range files {
		if err := writePattern(filepath.Join(ns, f.name), f.name, f.size); err != nil {
			t.Fatal(err)
		}
		total += f.size
	}
	t.Logf("wrote and fsynced %d files (%.1f MiB) in %v", len(files), float64(total)/(1<<20), time.Since(start).Round(time.Millisecond))
	small := files[:len(files)-1] // written before the 64 MiB file: surely pushed out
	fillers := pushOutOfG2(t, ns, 4, func() bool { return allG4(ns, small) })
	all := append(append([]s3File{}, files...), fillers...)

	// Where the blocks are: some (most) in G4 only.
	g4Blocks, wantBlocks := 0, int64(0)
	for _, f := range all {
		tiers, err := blockTiers(filepath.Join(ns, f.name))
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(tiers)) != f.blocks() {
			t.Errorf("%q: user.ctxmem.tier lists %d blocks, want %d (%v)", f.name, len(tiers), f.blocks(), tiers)
		}
		g4Blocks += countTier(tiers, "G4")
		wantBlocks += f.blocks()
	}
	t.Logf("%d of %d blocks are G4-only after %d filler files", g4Blocks, wantBlocks, len(fillers))
	if !allG4(ns, small) {
		for _, f := range small {
			tiers, _ := blockTiers(filepath.Join(ns, f.name))
			t.Logf("%q: %v", f.name, tiers)
		}
		t.Fatalf("files written before 64+ MiB of newer data are not all G4-only with a 16 MiB G2")
	}

	// The objects are really in the bucket: one per block, under the
	// prefix exactly as given (space, %, + and ü unescaped on disk), each
	// starting with the block header magic.
	objs := blockObjects(t, srv)
	if int64(len(objs)) != wantBlocks {
		t.Errorf("%d block objects under %q in the server's directory, want one per block: %d", len(objs), srv.ObjectPath(s3Prefix+"/blocks"), wantBlocks)
	}
	var payload int64
	for rel, size := range objs {
		hdr := make([]byte, 4)
		fd, err := os.Open(srv.ObjectPath(s3Prefix + "/" + rel))
		if err != nil {
			t.Fatal(err)
		}
		_, err = fd.ReadAt(hdr, 0)
		fd.Close()
		if err != nil || string(hdr) != "CXG4" {
			t.Errorf("object %s: header %q (%v), want magic CXG4", rel, hdr, err)
		}
		payload += size - int64(64+len("default"))
	}
	if payload != total+int64(len(fillers))*(8<<20) {
		t.Errorf("block objects hold %d payload bytes, files hold %d", payload, total+int64(len(fillers))*(8<<20))
	}
	st, err := d.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if g4, _ := st.Tier("G4"); g4.Blocks != int64(len(objs)) {
		t.Errorf("status: G4 holds %d blocks, the bucket %d objects", g4.Blocks, len(objs))
	}
	// g4_lifecycle auto on a server without bucket lifecycle (versitygw's
	// posix backend): status says so, and the sweeper alone expires.
	if !strings.HasPrefix(st.G4Lifecycle, "unsupported by the server") {
		t.Errorf("status g4_lifecycle %q, want unsupported by the server", st.G4Lifecycle)
	}

	verifyAll := func(phase string) {
		t.Helper()
		start := time.Now()
		var bytesRead int64
		for _, f := range all {
			r := timedRead(60*time.Second, func() ([]byte, error) { return readDirect(filepath.Join(ns, f.name)) })
			switch {
			case r.hung:
				t.Fatalf("%s: read of %q did not return within 60 s", phase, f.name)
			case r.err != nil:
				t.Errorf("%s: %q: %v", phase, f.name, r.err)
			default:
				if what := checkPattern(r.data, f.name, f.size); what != "" {
					t.Errorf("%s: %q: %s", phase, f.name, what)
				}
				bytesRead += int64(len(r.data))
			}
		}
		el := time.Since(start)
		t.Logf("%s: read %d files (%.1f MiB) byte-exact in %v (%.0f MiB/s)", phase, len(all), float64(bytesRead)/(1<<20),
			el.Round(time.Millisecond), float64(bytesRead)/(1<<20)/el.Seconds())
	}
	before, err := d.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	verifyAll("read back")
	after, err := d.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := statCounter(t, after, "byte_hits", "G4") - statCounter(t, before, "byte_hits", "G4") +
		(statCounter(t, after, "promotions", "")-statCounter(t, before, "promotions", ""))*s3BlockSize; got < int64(g4Blocks)*s3BlockSize/2 {
		t.Errorf("reading %d G4-only blocks moved only ~%d bytes out of G4 (byte_hits[G4] + promotions×block): reads did not reach S3?", g4Blocks, got)
	}

	// After a restart G2 is empty: the index comes from listing the bucket
	// under the escaped prefix, and every byte from GETs.
	d.Restart()
	for _, f := range all {
		tiers, err := blockTiers(filepath.Join(ns, f.name))
		if err != nil {
			t.Fatal(err)
		}
		if countTier(tiers, "G4") != len(tiers) || int64(len(tiers)) != f.blocks() {
			t.Fatalf("after restart %q: blocks %v, want %d in G4", f.name, tiers, f.blocks())
		}
	}
	verifyAll("after restart")
	if strings.Contains(d.Log(), "panic:") {
		t.Fatal("daemon log shows a panic")
	}
}

// TestE2ES3Outage: the S3 server hung (SIGSTOP) and then killed while
// G4-only files are read. Reads of G4-only blocks fail with EIO within
// maxFailTime, never hang and never return wrong bytes; the daemon keeps
// serving (mount, status, G2 data, new writes); once the server is back,
// every file reads back byte-exact (or, if the daemon gave it up, ENOENT).
func TestE2ES3Outage(t *testing.T) {
	srv, d := startS3Daemon(t, "16MiB")
	ns := d.Namespace()
	var files []s3File
	for i := range 8 {
		files = append(files, s3File{name: fmt.Sprintf("kv %d +%%ü.bin", i), size: 2<<20 + int64(i)*4096})
	}
	for _, f := range files {
		if err := writePattern(filepath.Join(ns, f.name), f.name, f.size); err != nil {
			t.Fatal(err)
		}
	}
	fillers := pushOutOfG2(t, ns, 5, func() bool { return allG4(ns, files) })
	all := append(append([]s3File{}, files...), fillers...)
	g4Only := func() []s3File {
		var out []s3File
		for _, f := range all {
			if tiers, err := blockTiers(filepath.Join(ns, f.name)); err == nil && countTier(tiers, "G4") == len(tiers) {
				out = append(out, f)
			}
		}
		return out
	}
	if n := len(g4Only()); n < 4 {
		t.Fatalf("only %d files are G4-only after %d filler files", n, len(fillers))
	}
	readOne := func(f s3File) readResult {
		return timedRead(2*maxFailTime, func() ([]byte, error) { return readDirect(filepath.Join(ns, f.name)) })
	}
	// expectFail reads a G4-only file while the server does not answer.
	expectFail := func(phase string, f s3File) {
		t.Helper()
		r := readOne(f)
		switch {
		case r.hung:
			t.Fatalf("%s: read of G4-only %q hangs (> %v)", phase, f.name, 2*maxFailTime)
		case r.err == nil:
			if what := checkPattern(r.data, f.name, f.size); what != "" {
				t.Fatalf("%s: read of G4-only %q returned WRONG BYTES: %s", phase, f.name, what)
			}
			t.Errorf("%s: read of G4-only %q succeeded although the S3 server is down (served from where?)", phase, f.name)
		case !errors.Is(r.err, unix.EIO):
			t.Errorf("%s: read of G4-only %q: %v, want EIO", phase, f.name, r.err)
		}
		if r.took > maxFailTime {
			t.Errorf("%s: read of G4-only %q took %v to fail, want < %v", phase, f.name, r.took.Round(time.Millisecond), maxFailTime)
		}
		t.Logf("%s: %q failed in %v: %v", phase, f.name, r.took.Round(time.Millisecond), r.err)
	}
	alive := func(phase string) {
		t.Helper()
		if !d.Running() || !harness.IsLiveFuse(d.Mount) {
			t.Fatalf("%s: daemon running %v, mount live %v", phase, d.Running(), harness.IsLiveFuse(d.Mount))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := d.Status(ctx); err != nil {
			t.Fatalf("%s: status does not answer: %v", phase, err)
		}
		ents, err := os.ReadDir(ns)
		if err != nil || len(ents) < len(all) {
			t.Fatalf("%s: readdir of the namespace: %d entries, %v", phase, len(ents), err)
		}
	}

	// Hung server: connections are accepted, nothing is answered.
	victims := g4Only()
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	expectFail("hung server", victims[0])
	alive("hung server")
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	r := readOne(victims[0])
	if r.hung || r.err != nil {
		t.Fatalf("after the hung server resumed, %q: %v (hung %v)", victims[0].name, r.err, r.hung)
	}
	if what := checkPattern(r.data, victims[0].name, victims[0].size); what != "" {
		t.Fatalf("after the hung server resumed, %q: %s", victims[0].name, what)
	}
	t.Logf("hung server resumed: %q reads back byte-exact (%v)", victims[0].name, r.took.Round(time.Millisecond))

	// Killed server, while a reader goes through the files.
	type seen struct {
		ok, failed, wrong int
		slowest           time.Duration
		msgs              []string
	}
	stopReader := make(chan struct{})
	readerDone := make(chan seen, 1)
	firstOK := make(chan struct{})
	go func() { // owned by this test: ends when stopReader closes
		var s seen
		signalled := false
		for i := 0; ; i++ {
			select {
			case <-stopReader:
				readerDone <- s
				return
			default:
			}
			f := all[i%len(all)]
			r := readOne(f)
			s.slowest = max(s.slowest, r.took)
			switch {
			case r.hung:
				s.msgs = append(s.msgs, fmt.Sprintf("%q hung", f.name))
				s.failed++
			case r.err != nil:
				s.failed++
				if r.took > maxFailTime {
					s.msgs = append(s.msgs, fmt.Sprintf("%q failed after %v", f.name, r.took))
				}
			default:
				if what := checkPattern(r.data, f.name, f.size); what != "" {
					s.wrong++
					s.msgs = append(s.msgs, fmt.Sprintf("%q: WRONG BYTES: %s", f.name, what))
				} else {
					s.ok++
				}
			}
			if s.ok >= 2 && !signalled {
				close(firstOK)
				signalled = true
			}
		}
	}()
	select {
	case <-firstOK:
	case <-time.After(30 * time.Second):
		close(stopReader)
		t.Fatalf("the reader read nothing in 30 s before the outage: %+v", <-readerDone)
	}
	srv.Stop()
	outage := time.Now()
	time.Sleep(3 * time.Second)
	close(stopReader)
	rs := <-readerDone
	t.Logf("reader across the kill: %d ok, %d failed, %d wrong, slowest %v %v", rs.ok, rs.failed, rs.wrong, rs.slowest.Round(time.Millisecond), rs.msgs)
	if rs.wrong > 0 || rs.slowest > maxFailTime {
		t.Errorf("reader across the server kill: %d wrong reads, slowest %v: %v", rs.wrong, rs.slowest, rs.msgs)
	}

	// Every file that is G4-only now fails, in bounded time.
	down := g4Only()
	if len(down) == 0 {
		t.Fatal("no G4-only file left to read during the outage")
	}
	for _, f := range down[:min(4, len(down))] {
		expectFail("server down", f)
	}
	// A range read inside one block fails the same way.
	f := down[len(down)-1]
	rr := timedRead(2*maxFailTime, func() ([]byte, error) { return preadDirect(filepath.Join(ns, f.name), s3BlockSize+8192, 4096) })
	if rr.hung || rr.err == nil || !errors.Is(rr.err, unix.EIO) || rr.took > maxFailTime {
		t.Errorf("server down: 4 KiB pread of G4-only %q: err %v, hung %v, took %v; want EIO within %v", f.name, rr.err, rr.hung, rr.took, maxFailTime)
	}
	alive("server down")
	for _, f := range all {
		if _, err := os.Stat(filepath.Join(ns, f.name)); err != nil {
			t.Errorf("server down: stat %q: %v (an unreachable G4 must not lose files)", f.name, err)
		}
	}

	// New files during the outage: write(2) lands in G2 and must not hang;
	// fsync needs a lower tier (G3 is disabled), so it may fail cleanly or
	// wait for the server — it is given until the server is back.
	newFiles := []s3File{{"outage 1 +%.kv", 100 << 10}, {"outage 2 ü.kv", 1 << 20}}
	fsyncDone := make(chan error, len(newFiles))
	var fsyncWaiting []string
	for _, nf := range newFiles {
		p := filepath.Join(ns, nf.name)
		fd, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
		if err != nil {
			t.Fatalf("server down: create %q: %v", nf.name, err)
		}
		defer fd.Close()
		buf := make([]byte, nf.size)
		workloads.Fill(buf, nf.name, 1, 0)
		wr := timedRead(maxFailTime, func() ([]byte, error) { _, err := fd.Write(buf); return nil, err })
		if wr.hung {
			t.Fatalf("server down: write of %d bytes to new %q hangs (> %v)", nf.size, nf.name, maxFailTime)
		}
		if wr.err != nil {
			t.Logf("server down: write to new %q failed cleanly: %v", nf.name, wr.err)
			continue
		}
		go func() { fsyncDone <- fd.Sync() }() // owned by this test: fsync returns at the latest once the server is back
		fsyncWaiting = append(fsyncWaiting, nf.name)
	}
	var fsyncErrs []error
	timer := time.After(8 * time.Second)
	pending := len(fsyncWaiting)
collect:
	for pending > 0 {
		select {
		case err := <-fsyncDone:
			pending--
			fsyncErrs = append(fsyncErrs, err)
		case <-timer:
			break collect
		}
	}
	t.Logf("server down: %d new files written to G2; fsync: %d returned (%v), %d still waiting after 8 s", len(fsyncWaiting), len(fsyncErrs), fsyncErrs, pending)
	for _, err := range fsyncErrs {
		if err == nil {
			t.Errorf("server down: fsync of a new file succeeded with G3 disabled and G4 unreachable: where are the bytes durable?")
		}
	}
	for _, nf := range newFiles {
		r := timedRead(maxFailTime, func() ([]byte, error) { return readDirect(filepath.Join(ns, nf.name)) })
		if r.hung {
			t.Fatalf("server down: read of new (G2) %q hangs", nf.name)
		}
		if r.err == nil {
			if what := checkPattern(r.data, nf.name, nf.size); what != "" {
				t.Errorf("server down: new %q reads back %s", nf.name, what)
			}
		} else {
			t.Errorf("server down: new %q, written to G2, cannot be read: %v", nf.name, r.err)
		}
	}
	alive("after writes during the outage")
	if st, err := d.Status(context.Background()); err != nil {
		t.Errorf("status during the outage: %v", err)
	} else if g4, _ := st.Tier("G4"); !g4.Degraded {
		t.Errorf("status during the outage does not show G4 degraded: %+v", g4)
	}

	// Server back: everything reads back, with no wrong byte.
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Logf("outage lasted %v", time.Since(outage).Round(time.Millisecond))
	back := time.Now()
	for pending > 0 {
		select {
		case err := <-fsyncDone:
			pending--
			if err != nil {
				t.Logf("fsync during the outage returned after the server came back: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%d fsyncs begun during the outage still blocked 30 s after the server came back", pending)
		}
	}
	// G4 is down until a probe (every 250 ms) finds the server again; the
	// fsyncs above may all have failed at once during the outage (no tier
	// below G2 was up), so nothing else has waited for that yet.
	testenv.Eventually(t, 30*time.Second, func() bool {
		st, err := d.Status(context.Background())
		g4, _ := st.Tier("G4")
		return err == nil && !g4.Degraded
	}, "G4 up again once the server answers")
	lost := 0
	for _, f := range append(all, newFiles...) {
		p := filepath.Join(ns, f.name)
		r := timedRead(60*time.Second, func() ([]byte, error) { return readDirect(p) })
		switch {
		case r.hung:
			t.Fatalf("server back: read of %q hangs", f.name)
		case errors.Is(r.err, fs.ErrNotExist):
			lost++
		case r.err != nil:
			if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
				lost++ // given up by the daemon at this read
				continue
			}
			t.Errorf("server back: %q: %v", f.name, r.err)
		default:
			if what := checkPattern(r.data, f.name, f.size); what != "" {
				t.Errorf("server back: %q: WRONG BYTES: %s", f.name, what)
			}
		}
	}
	t.Logf("server back: %d files read back byte-exact, %d ENOENT (given up), in %v", len(all)+len(newFiles)-lost, lost, time.Since(back).Round(time.Millisecond))
	alive("server back")
	if st, err := d.Status(context.Background()); err != nil {
		t.Errorf("status after the outage: %v", err)
	} else if g4, _ := st.Tier("G4"); g4.Degraded {
		t.Errorf("G4 still shown degraded after the server came back: %+v", g4)
	}
	if strings.Contains(d.Log(), "panic:") {
		t.Fatal("daemon log shows a panic")
	}
}

// TestE2ES3CorruptObject flips one payload byte of one file's block object
// and one header byte of another's in the server's backing directory: both
// files then read as an error (EIO, then ENOENT: the daemon drops the
// file), never wrong bytes, the corrupt objects are deleted (quarantine),
// status counts crc_errors, and an untouched file still reads back.
func TestE2ES3CorruptObject(t *testing.T) {
	srv, d := startS3Daemon(t, "16MiB")
	ns := d.Namespace()
	files := []s3File{{"payload flip +%ü.kv", 1 << 20}, {"header flip 日本.kv", 768 << 10}, {"untouched.kv", 512 << 10}}
	objsOf := map[string][]string{} // file → its block objects (key relative to the prefix)
	prev := blockObjects(t, srv)
	for _, f := range files {
		if err := writePattern(filepath.Join(ns, f.name), f.name, f.size); err != nil {
			t.Fatal(err)
		}
		cur := blockObjects(t, srv)
		for k := range cur {
			if _, ok := prev[k]; !ok {
				objsOf[f.name] = append(objsOf[f.name], k)
			}
		}
		prev = cur
		if int64(len(objsOf[f.name])) != f.blocks() {
			t.Fatalf("fsync of %q (%d blocks) added %d objects to the bucket: %v", f.name, f.blocks(), len(objsOf[f.name]), objsOf[f.name])
		}
	}
	pushOutOfG2(t, ns, 4, func() bool { return allG4(ns, files) })
	if !allG4(ns, files) {
		t.Fatal("the test files are not G4-only after 32 MiB of filler")
	}
	before, err := d.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}

	// objectFor returns the object of block idx of file f.
	objectFor := func(f s3File, idx int) string {
		suffix := fmt.Sprintf("/%08x", idx)
		for _, k := range objsOf[f.name] {
			if strings.HasSuffix(k, suffix) {
				return k
			}
		}
		t.Fatalf("no object of block %d of %q in %v", idx, f.name, objsOf[f.name])
		return ""
	}
	flip := func(key string, off int64) { flipObjectByte(t, srv, key, off) }
	hdr := int64(64 + len("default"))
	payloadObj := objectFor(files[0], 2)
	flip(payloadObj, hdr+12345) // payload of block 2
	headerObj := objectFor(files[1], 0)
	flip(headerObj, 9) // key.Object field of the header of block 0

	check := func(f s3File, what string, read func() ([]byte, error)) {
		t.Helper()
		r := timedRead(30*time.Second, read)
		switch {
		case r.hung:
			t.Fatalf("%s: read of %q hangs", what, f.name)
		case r.err == nil:
			t.Fatalf("%s: read of %q returned %d bytes without an error (corruption not detected; bytes %s)", what, f.name, len(r.data),
				map[bool]string{true: "happen to be right", false: "WRONG"}[checkPattern(r.data, f.name, f.size) == ""])
		case !errors.Is(r.err, unix.EIO) && !errors.Is(r.err, fs.ErrNotExist):
			t.Errorf("%s: read of %q: %v, want EIO or ENOENT", what, f.name, r.err)
		}
		// The front end drops a lost file asynchronously (fusefs notifier):
		// give it a moment.
		var err error
		found := time.Now()
		testenv.Poll(2*time.Second, func() bool {
			_, err = os.Stat(filepath.Join(ns, f.name))
			return errors.Is(err, fs.ErrNotExist)
		})
		t.Logf("%s: read of %q: %v; stat afterwards: %v (after %v)", what, f.name, r.err, err, time.Since(found).Round(time.Millisecond))
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: 2 s after the corrupt block was found, stat %q gives %v, want ENOENT (the file cannot be served whole any more)", what, f.name, err)
		}
	}
	// A 4 KiB range read inside the damaged block (range reads are
	// verified too), then a whole-file read of the other.
	check(files[0], "payload flip", func() ([]byte, error) {
		return preadDirect(filepath.Join(ns, files[0].name), 2*s3BlockSize+8192, 4096)
	})
	check(files[1], "header flip", func() ([]byte, error) { return readDirect(filepath.Join(ns, files[1].name)) })

	r := timedRead(30*time.Second, func() ([]byte, error) { return readDirect(filepath.Join(ns, files[2].name)) })
	if r.hung || r.err != nil {
		t.Fatalf("untouched %q: %v (hung %v)", files[2].name, r.err, r.hung)
	}
	if what := checkPattern(r.data, files[2].name, files[2].size); what != "" {
		t.Fatalf("untouched %q: %s", files[2].name, what)
	}

	after, err := d.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	crc := statCounter(t, after, "crc_errors", "") - statCounter(t, before, "crc_errors", "")
	lost := statCounter(t, after, "objects_lost", "") - statCounter(t, before, "objects_lost", "")
	t.Logf("status: crc_errors +%d, objects_lost +%d", crc, lost)
	if crc < 2 {
		t.Errorf("status crc_errors rose by %d after two corrupt objects were read, want >= 2: %s", crc, after.Raw)
	}
	// Quarantine: the corrupt objects are deleted from the bucket (and,
	// the files being dropped, their other blocks in the background).
	gone := testenv.Poll(10*time.Second, func() bool {
		objs := blockObjects(t, srv)
		_, a := objs[payloadObj]
		_, b := objs[headerObj]
		return !a && !b
	})
	if !gone {
		t.Errorf("corrupt objects %q / %q still in the bucket 10 s after they were read (no quarantine)", payloadObj, headerObj)
	}
	left := 0
	testenv.Poll(10*time.Second, func() bool {
		objs := blockObjects(t, srv)
		left = 0
		for _, f := range files[:2] {
			for _, k := range objsOf[f.name] {
				if _, ok := objs[k]; ok {
					left++
				}
			}
		}
		return left == 0
	})
	t.Logf("%d block objects of the two dropped files left in the bucket after 10 s", left)
	if strings.Contains(d.Log(), "panic:") {
		t.Fatal("daemon log shows a panic")
	}
}

// TestE2ES3BadStart: bad credentials or a missing bucket at start (the
// server answers and refuses the configuration) make `ctxmemd run` exit
// with status 2 within seconds with a message naming the problem, and
// leave nothing mounted. (An endpoint that does not answer is an outage,
// not a configuration error: see TestE2ES3StartUnreachable.)
func TestE2ES3BadStart(t *testing.T) {
	bin := needE2E(t)
	srv := s3test.StartServer(t)
	cases := []struct {
		name    string
		url     string
		ak, sk  string
		want    []string // substrings of the output, lower-cased
		maxSecs float64
		// noDirs: found from the URL alone, before the data directory is
		// made (a systemd restart loop otherwise: exit 1).
		noDirs bool
	}{
		{"wrong secret key", s3URL(srv, srv.Bucket, "p"), srv.AccessKey, "not-the-secret", []string{"access denied", "secret key", srv.AccessKey}, 20, false},
		{"unknown access key", s3URL(srv, srv.Bucket, "p"), "NOSUCHKEY123", srv.SecretKey, []string{"access denied", "access key", "nosuchkey123"}, 20, false},
		{"no credentials", s3URL(srv, srv.Bucket, "p"), "", "", []string{"access"}, 20, false},
		{"missing bucket", s3URL(srv, "no-such-bucket-x", "p"), srv.AccessKey, srv.SecretKey, []string{"bucket", "no-such-bucket-x", "does not exist"}, 20, false},
		{"unknown URL parameter", s3URL(srv, srv.Bucket, "p") + "&bogus=1", srv.AccessKey, srv.SecretKey, []string{"unknown parameter", "bogus", "--g4"}, 20, true},
		{"bad timeout", s3URL(srv, srv.Bucket, "p") + "&timeout=fast", srv.AccessKey, srv.SecretKey, []string{"timeout", "fast"}, 20, true},
		{"part size", s3URL(srv, srv.Bucket, "p") + "&part_size=1", srv.AccessKey, srv.SecretKey, []string{"part size"}, 20, true},
		{"missing credentials file", s3URL(srv, srv.Bucket, "p") + "&credentials_file=/nonexistent-ctxm-creds", "", "", []string{"credentials_file", "/nonexistent-ctxm-creds", "no such file"}, 20, true},
		{"bad bucket name", s3URL(srv, "Bad_Bucket", "p"), srv.AccessKey, srv.SecretKey, []string{"bucket", "bad_bucket", "--g4"}, 20, false}, // the server judges the name
		// HTTPS against the plain-HTTP server: exited 1 (a systemd restart loop).
		{"https to a plain endpoint", strings.Replace(s3URL(srv, srv.Bucket, "p"), "insecure=true", "insecure=false", 1), srv.AccessKey, srv.SecretKey, []string{"plain http", "insecure=true"}, 20, false},
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			root, err := os.MkdirTemp("", "ctxm-s3bad-")
			if err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(root)
			mnt, data, cfg := filepath.Join(root, "mnt"), filepath.Join(root, "data"), filepath.Join(root, "c.yaml")
			os.MkdirAll(mnt, 0o755)
			os.WriteFile(cfg, nil, 0o644)
			var env []string
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "AWS_") && !strings.HasPrefix(kv, "CTXMEM_") && !strings.HasPrefix(kv, "HOME=") {
					env = append(env, kv)
				}
			}
			env = append(env, "HOME="+root) // no ~/.aws of the machine
			if c.ak != "" {
				env = append(env, "AWS_ACCESS_KEY_ID="+c.ak, "AWS_SECRET_ACCESS_KEY="+c.sk)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, "run", "--config", cfg, "--mount", mnt, "--data-dir", data,
				"--admin", filepath.Join(root, "a.sock"), "--metrics=", "--dram", "16MiB", "--g3-size", "0", "--g4", c.url)
			cmd.Env = env
			start := time.Now()
			out, err := cmd.CombinedOutput()
			took := time.Since(start)
			if m, _ := harness.IsMounted(mnt); m {
				harness.ForceUnmount(mnt)
				t.Errorf("a failed start left %s mounted", mnt)
			}
			t.Logf("exit after %v: %v\n%s", took.Round(time.Millisecond), err, bytes.TrimSpace(out))
			if ctx.Err() != nil {
				t.Fatalf("ctxmemd run did not exit within 60 s")
			}
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 {
				t.Fatalf("ctxmemd run: %v, want exit status 2 (configuration error)", err)
			}
			if _, err := os.Stat(data); c.noDirs && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the data directory %s was made before the URL was refused (stat: %v)", data, err)
			}
			if took.Seconds() > c.maxSecs {
				t.Errorf("took %v to give up, want < %v s", took, c.maxSecs)
			}
			msg := strings.ToLower(string(out))
			for _, w := range c.want {
				if !strings.Contains(msg, strings.ToLower(w)) {
					t.Errorf("message does not contain %q:\n%s", w, out)
				}
			}
			if strings.Contains(msg, strings.ToLower(s3test.SecretKey)) || (c.sk != "" && strings.Contains(msg, strings.ToLower(c.sk))) {
				t.Errorf("message reveals the secret key:\n%s", out)
			}
			if strings.Contains(msg, "panic:") {
				t.Errorf("panic:\n%s", out)
			}
		})
	}
}

// TestE2ES3StartUnreachable: an endpoint with nothing listening, or one
// that accepts connections and never answers, at start is an outage: the
// daemon mounts within a bound with G4 degraded and recovering (nothing in
// G4 to lose here), and stops cleanly.
func TestE2ES3StartUnreachable(t *testing.T) {
	bin := needE2E(t)
	dead := s3test.StartServer(t)
	dead.Stop() // an endpoint with nothing listening
	hung := s3test.StartServer(t)
	if err := hung.Pause(); err != nil { // accepts connections, never answers
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		srv  *s3test.Server
	}{{"unreachable", dead}, {"hung", hung}} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("AWS_ACCESS_KEY_ID", c.srv.AccessKey)
			t.Setenv("AWS_SECRET_ACCESS_KEY", c.srv.SecretKey)
			start := time.Now()
			d := harness.Start(t, bin, harness.Options{DRAM: "16MiB", G3Size: "256MiB", G4: s3URL(c.srv, c.srv.Bucket, "p"),
				MountTimeout: 60 * time.Second})
			took := time.Since(start)
			t.Logf("mounted after %v with the %s endpoint", took.Round(time.Millisecond), c.name)
			if took > 40*time.Second {
				t.Errorf("start took %v, want < 40 s", took)
			}
			st, err := d.Status(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if g4, _ := st.Tier("G4"); !g4.Degraded || !g4.Recovering {
				t.Errorf("G4 %+v; want degraded and recovering", g4)
			}
			f := filepath.Join(d.Namespace(), "new.kv")
			if err := writePattern(f, "new.kv", 300<<10); err != nil {
				t.Fatalf("write+fsync with G4 unreachable (G3 up): %v", err)
			}
			if err := d.Stop(); err != nil {
				t.Fatalf("%v\n%s", err, d.Log())
			}
			if !strings.Contains(d.Log(), "starting degraded") {
				t.Errorf("log does not say the daemon starts degraded:\n%s", d.Log())
			}
		})
	}
}
