package nbd

// Interop tests: the server runs in-process on a unix socket over a real
// tiering store (G2 + G3 on a temporary directory) and real clients talk
// to it: nbdinfo, nbdcopy, nbdsh/python libnbd (libnbd-bin,
// python3-libnbd), qemu-io and qemu-img (qemu-utils), fio's nbd engine.
// A missing tool skips its test unless CTXMEM_REQUIRE_TOOLS=1.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

const toolTimeout = 90 * time.Second

// interopServer serves a 64 MiB read-write export "disk" (64 KiB blocks)
// and a 16 MiB read-only export "ro" over a store with a G2 budget of g2
// bytes.
func interopServer(t *testing.T, g2 int64, diskSize int64) (*running, *testStore) {
	st := newStore(t, g2)
	r := serve(t, st, st.dir, []Export{
		{Name: "disk", Size: diskSize, Description: "interop disk"},
		{Name: "ro", Size: 16 << 20, ReadOnly: true},
	}, Options{})
	return r, st
}

// python runs a python script with libnbd's bindings; args follow the
// script path in sys.argv.
func python(t *testing.T, script string, args ...string) string {
	t.Helper()
	py := pythonNBD(t)
	f := filepath.Join(t.TempDir(), "script.py")
	if err := os.WriteFile(f, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	return run(t, toolTimeout, py, append([]string{f}, args...)...)
}

func TestInteropNbdinfo(t *testing.T) {
	needTool(t, "nbdinfo")
	r, _ := interopServer(t, 64<<20, 64<<20)

	var info struct {
		Protocol string `json:"protocol"`
		Exports  []struct {
			Name         string   `json:"export-name"`
			Size         int64    `json:"export-size"`
			Description  string   `json:"description"`
			Contexts     []string `json:"contexts"`
			ReadOnly     bool     `json:"is_read_only"`
			CanFlush     bool     `json:"can_flush"`
			CanFUA       bool     `json:"can_fua"`
			CanTrim      bool     `json:"can_trim"`
			CanZero      bool     `json:"can_zero"`
			CanMultiConn bool     `json:"can_multi_conn"`
			CanDF        bool     `json:"can_df"`
			MinBlock     int      `json:"block_size_minimum"`
			PrefBlock    int      `json:"block_size_preferred"`
			MaxBlock     int      `json:"block_size_maximum"`
		} `json:"exports"`
	}
	out := run(t, toolTimeout, "nbdinfo", "--json", r.uri("disk"))
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatalf("nbdinfo --json: %v\n%s", err, out)
	}
	e := info.Exports[0]
	if e.Name != "disk" || e.Size != 64<<20 || e.ReadOnly || !e.CanFlush || !e.CanFUA || !e.CanTrim ||
		!e.CanZero || !e.CanMultiConn || !e.CanDF || e.MinBlock != 512 || e.PrefBlock != 64<<10 ||
		e.MaxBlock != MaxPayload || e.Description != "interop disk" || !strings.Contains(strings.Join(e.Contexts, ","), "base:allocation") {
		t.Fatalf("nbdinfo: %+v", e)
	}
	if !strings.Contains(info.Protocol, "newstyle-fixed") {
		t.Errorf("protocol %q", info.Protocol)
	}

	out = run(t, toolTimeout, "nbdinfo", "--list", "--json", r.uri(""))
	info.Exports = nil
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatalf("nbdinfo --list: %v\n%s", err, out)
	}
	if len(info.Exports) != 2 || info.Exports[0].Name != "disk" || info.Exports[1].Name != "ro" ||
		!info.Exports[1].ReadOnly || info.Exports[1].Size != 16<<20 {
		t.Fatalf("nbdinfo --list: %+v", info.Exports)
	}

	// --map: a fresh export is one hole; after writing 1 MiB at 2 MiB the
	// map shows data there and holes around it.
	if out := run(t, toolTimeout, "nbdinfo", "--map", r.uri("disk")); strings.Join(strings.Fields(out), " ") != "0 67108864 3 hole,zero" {
		t.Fatalf("map of a fresh export: %q", out)
	}
	python(t, `import nbd, sys
h = nbd.NBD(); h.connect_uri(sys.argv[1])
h.pwrite(b"\xab" * (1 << 20), 2 << 20); h.flush(); h.shutdown()
`, r.uri("disk"))
	out = run(t, toolTimeout, "nbdinfo", "--map", r.uri("disk"))
	want := "0 2097152 3 hole,zero\n2097152 1048576 0 data\n3145728 63963136 3 hole,zero"
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		got = append(got, strings.Join(strings.Fields(l), " "))
	}
	if strings.Join(got, "\n") != want {
		t.Fatalf("nbdinfo --map:\n%s\nwant\n%s", out, want)
	}
}

// randomFile writes n random bytes to a new file and returns its path and
// SHA-256.
func randomFile(t *testing.T, n int) (string, [32]byte) {
	t.Helper()
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{1, 2, 3})
	_, _ = r.Read(b)
	p := filepath.Join(t.TempDir(), "random.bin")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p, sha256.Sum256(b)
}

func fileSum(t *testing.T, p string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// TestInteropNbdcopy copies a 256 MiB random file in and out through an
// export whose G2 budget is 64 MiB, so most blocks are written back to G3
// and read back (promoted) from it: every byte goes through the tiering
// core.
func TestInteropNbdcopy(t *testing.T) {
	needTool(t, "nbdcopy")
	const size = 256 << 20
	r, st := interopServer(t, 64<<20, size)
	in, sum := randomFile(t, size)
	run(t, toolTimeout, "nbdcopy", "--flush", in, r.uri("disk"))
	out := filepath.Join(t.TempDir(), "out.bin")
	run(t, toolTimeout, "nbdcopy", r.uri("disk"), out)
	if fileSum(t, out) != sum {
		t.Fatal("nbdcopy out differs from what nbdcopy put in")
	}
	// Multi-conn: four connections in parallel.
	out4 := filepath.Join(t.TempDir(), "out4.bin")
	run(t, toolTimeout, "nbdcopy", "--connections=4", r.uri("disk"), out4)
	if fileSum(t, out4) != sum {
		t.Fatal("nbdcopy --connections=4 out differs")
	}
	if s := st.Stats(); s.Demotions["G3"] == 0 || s.Promotions == 0 {
		t.Errorf("expected blocks to go through G3: demotions %v promotions %d", s.Demotions, s.Promotions)
	}
	if s := r.srv.Stats(); s.BytesWritten != size || s.BytesRead < 2*size || s.Errors != 0 {
		t.Errorf("server stats %+v", s)
	}
}

// nbdshBadRequests turns libnbd's strict mode off, sends requests the
// server must refuse, and checks after each that the same connection
// still serves a read.
const nbdshBadRequests = `import nbd, errno, sys
h = nbd.NBD()
h.add_meta_context("base:allocation")
h.connect_uri(sys.argv[1])
h.set_strict_mode(0)
size = h.get_size()
h.pwrite(b"\x5a" * 4096, 0)

def still_works():
    assert h.pread(4096, 0) == b"\x5a" * 4096

def expect(code, what, fn, *args):
    try:
        fn(*args)
    except nbd.Error as e:
        if e.errno not in (code, errno.errorcode[code]):  # libnbd gives the name
            sys.exit("%s: errno %s, want %s (%s)" % (what, e.errno, code, e.string))
    else:
        sys.exit("%s: no error" % what)
    still_works()

expect(errno.EINVAL, "unaligned read", h.pread, 4096, 1)
expect(errno.EINVAL, "unaligned length", h.pread, 1000, 0)
expect(errno.EINVAL, "unaligned write", h.pwrite, b"x" * 100, 4096)
expect(errno.EINVAL, "read past end", h.pread, 8192, size - 4096)
expect(errno.EINVAL, "read beyond the end", h.pread, 4096, size + 4096)
expect(errno.ENOSPC, "write past end", h.pwrite, b"x" * 8192, size - 4096)
expect(errno.ENOSPC, "trim past end", h.trim, 8192, size - 4096)
expect(errno.ENOSPC, "zero past end", h.zero, 8192, size - 4096)
expect(errno.EINVAL, "oversize read", h.pread, (32 << 20) + 4096, 0)
expect(errno.EINVAL, "oversize write", h.pwrite, b"y" * ((32 << 20) + 4096), 0)
expect(errno.EINVAL, "flag not valid for read", h.pread, 4096, 0, nbd.CMD_FLAG_NO_HOLE)
expect(errno.EINVAL, "fast zero (not advertised)", h.zero, 4096, 0, nbd.CMD_FLAG_FAST_ZERO)
expect(errno.EINVAL, "block status past end", h.block_status, 4096, size, lambda *a: 0)
expect(errno.EINVAL, "cache (not advertised)", h.cache, 4096, 0)

# Many requests in flight at once, some bad, on the same handle.
bufs = []
for i in range(32):
    off = (i * 65536) if i % 4 else size + i
    buf = nbd.Buffer(4096)
    bufs.append((i, buf, h.aio_pread(buf, off)))
while h.aio_in_flight() > 0:
    h.poll(-1)
for i, buf, cookie in bufs:
    try:
        h.aio_command_completed(cookie)
        ok = True
    except nbd.Error as e:
        ok = False
        assert e.errno in (errno.EINVAL, "EINVAL"), e
    assert ok == (i % 4 != 0), (i, ok)
still_works()
h.shutdown()
print("ok")
`

func TestInteropNbdshBadRequests(t *testing.T) {
	r, _ := interopServer(t, 64<<20, 64<<20)
	if out := python(t, nbdshBadRequests, r.uri("disk")); strings.TrimSpace(out) != "ok" {
		t.Fatalf("script output %q", out)
	}
	if s := r.srv.Stats(); s.Errors < 14+8 {
		t.Errorf("server counted %d errors", s.Errors)
	}
}

// TestInteropNbdshMultiConn writes on one connection, flushes on a second
// and reads on a third, with the nbdsh command itself.
func TestInteropNbdshMultiConn(t *testing.T) {
	nbdsh := needTool(t, "nbdsh")
	py := pythonNBD(t)
	r, st := interopServer(t, 64<<20, 64<<20)
	script := `
import nbd
u = "` + r.uri("disk") + `"
hs = []
for i in range(3):
    x = nbd.NBD(); x.connect_uri(u); hs.append(x)
assert all(x.can_multi_conn() for x in hs)
data = bytes(range(256)) * 4096
for i in range(8):
    hs[0].pwrite(data, i * len(data))
hs[1].flush()
for i in range(8):
    assert hs[2].pread(len(data), i * len(data)) == data
for x in hs: x.shutdown()
print("multiconn ok")
`
	cmd := exec.Command(nbdsh, "-c", script)
	// nbdsh runs the first python3 in PATH; put the one with libnbd first.
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(py)+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "multiconn ok") {
		t.Fatalf("nbdsh: %v\n%s", err, out)
	}
	if info, _ := st.Stat(r.srv.Exports()[0].Object); info.Dirty {
		t.Fatal("export dirty after a flush on another connection")
	}
}

func TestInteropReadOnlyEPERM(t *testing.T) {
	r, _ := interopServer(t, 64<<20, 64<<20)
	out := python(t, `import nbd, errno, sys
h = nbd.NBD(); h.connect_uri(sys.argv[1])
assert h.is_read_only()
h.set_strict_mode(0)  # libnbd would refuse writes to a read-only export itself
for what, fn in (("write", lambda: h.pwrite(b"x" * 4096, 0)),
                 ("trim", lambda: h.trim(4096, 0)),
                 ("zero", lambda: h.zero(4096, 0))):
    try:
        fn()
        sys.exit(what + " succeeded on a read-only export")
    except nbd.Error as e:
        assert e.errno in (errno.EPERM, "EPERM"), (what, e.errno)
    assert h.pread(4096, 0) == bytes(4096)
h.flush()
h.shutdown()
print("ro ok")
`, r.uri("ro"))
	if !strings.Contains(out, "ro ok") {
		t.Fatal(out)
	}
	if qemuIO, err := exec.LookPath("qemu-io"); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), toolTimeout)
		defer cancel()
		out, err := exec.CommandContext(ctx, qemuIO, "-f", "raw", "-c", "write -P 1 0 4k", r.uri("ro")).CombinedOutput()
		if err == nil && !strings.Contains(string(out), "failed") {
			t.Fatalf("qemu-io wrote to a read-only export: %s", out)
		}
	}
}

func TestInteropQemu(t *testing.T) {
	qemuIO := needTool(t, "qemu-io")
	qemuImg := needTool(t, "qemu-img")
	r, _ := interopServer(t, 64<<20, 64<<20)
	u := r.uri("disk")
	out := run(t, toolTimeout, qemuIO, "-f", "raw",
		"-c", "write -P 0xab 0 1M",
		"-c", "write -P 0xcd 1M 512k",
		"-c", "write -P 0x11 8M 64k",
		"-c", "write -z -u 8M 64k", // zeroes, unmap allowed: a hole again
		"-c", "write -P 0x44 9M 64k",
		"-c", "write -z 9M 64k", // zeroes without unmap (NO_HOLE): stays data
		"-c", "aio_write -P 0x22 16M 256k",
		"-c", "aio_write -P 0x33 17M 256k",
		"-c", "aio_flush",
		"-c", "flush",
		"-c", "read -P 0xab 0 1M",
		"-c", "read -P 0xcd 1M 512k",
		"-c", "read -P 0 8M 64k",
		"-c", "read -P 0 9M 64k",
		"-c", "read -P 0x22 16M 256k",
		"-c", "read -P 0x33 17M 256k",
		"-c", "read -P 0 32M 1M",
		u)
	if strings.Contains(out, "failed") || strings.Contains(out, "error") {
		t.Fatalf("qemu-io:\n%s", out)
	}

	// qemu-img map: data where written, holes elsewhere.
	var ext []struct {
		Start, Length int64
		Data, Zero    bool
	}
	out = run(t, toolTimeout, qemuImg, "map", "--output=json", "-f", "raw", u)
	if err := json.Unmarshal([]byte(out), &ext); err != nil {
		t.Fatalf("qemu-img map: %v\n%s", err, out)
	}
	var data []string
	for _, e := range ext {
		if e.Data {
			data = append(data, strconv.FormatInt(e.Start, 10)+"+"+strconv.FormatInt(e.Length, 10))
		}
	}
	if got, want := strings.Join(data, " "), "0+1572864 9437184+65536 16777216+262144 17825792+262144"; got != want {
		t.Fatalf("qemu-img map data extents %q, want %q\n%s", got, want, out)
	}

	// qemu-img convert out of the export, and a file into it.
	img := filepath.Join(t.TempDir(), "img.raw")
	run(t, toolTimeout, qemuImg, "convert", "-f", "raw", "-O", "raw", u, img)
	b, err := os.ReadFile(img)
	if err != nil || len(b) != 64<<20 {
		t.Fatalf("converted image: %v, %d bytes", err, len(b))
	}
	exp := make([]byte, 64<<20)
	copy(exp, bytes.Repeat([]byte{0xab}, 1<<20))
	copy(exp[1<<20:], bytes.Repeat([]byte{0xcd}, 512<<10))
	copy(exp[16<<20:], bytes.Repeat([]byte{0x22}, 256<<10))
	copy(exp[17<<20:], bytes.Repeat([]byte{0x33}, 256<<10))
	if !bytes.Equal(b, exp) {
		t.Fatal("qemu-img convert: image differs from what qemu-io wrote")
	}
	src, sum := randomFile(t, 64<<20)
	run(t, toolTimeout, qemuImg, "convert", "-n", "-f", "raw", "-O", "raw", src, u)
	run(t, toolTimeout, qemuImg, "convert", "-f", "raw", "-O", "raw", u, img)
	if fileSum(t, img) != sum {
		t.Fatal("qemu-img convert into the export and back differs")
	}
	run(t, toolTimeout, qemuImg, "compare", "-f", "raw", "-F", "raw", src, u)
}

func TestInteropFioVerify(t *testing.T) {
	fio := needTool(t, "fio")
	r, _ := interopServer(t, 32<<20, 64<<20)
	for _, job := range [][]string{
		{"--rw=randwrite", "--bs=4k"},
		{"--rw=randrw", "--bsrange=4k-256k"},
	} {
		args := append([]string{"--name=verify", "--ioengine=nbd", "--uri=" + r.uri("disk"),
			"--iodepth=16", "--size=48M", "--verify=crc32c", "--do_verify=1", "--verify_fatal=1",
			"--verify_backlog=1024", "--verify_state_save=0", "--output-format=terse"}, job...)
		run(t, toolTimeout, fio, args...)
	}
	if s := r.srv.Stats(); s.Errors != 0 {
		t.Fatalf("server errors during fio: %+v", s)
	}
}
