package tests

import (
	"bytes"
	"crypto/rand"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxmem/ctxmemd/tests/harness"

	"github.com/ctxmem/ctxmemd/internal/testenv"
)

// TestE2ENBDFromConfig serves the NBD exports declared in the YAML config
// through `ctxmemd run --nbd`, copies data in with nbdcopy --flush,
// kills the daemon with SIGKILL, restarts it and copies the data out.
func TestE2ENBDFromConfig(t *testing.T) {
	bin := needE2E(t)
	for _, tool := range []string{"nbdinfo", "nbdcopy"} {
		testenv.RequireTool(t, tool, "Debian: libnbd-bin")
	}
	sock := filepath.Join(t.TempDir(), "nbd.sock")
	d := harness.Start(t, bin, harness.Options{DRAM: "64MiB", G3Size: "512MiB", Extra: []string{"--nbd", "unix://" + sock}})
	cfg := "exports:\n  - name: swap\n    size: 64MiB\n  - name: golden\n    size: 16MiB\n    read_only: true\n"
	if err := os.WriteFile(d.Config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	d.Restart()
	uri := func(name string) string { return "nbd+unix:///" + name + "?socket=" + sock }
	waitSocket(t, sock)
	out, err := exec.Command("nbdinfo", "--list", "nbd+unix://?socket="+sock).CombinedOutput()
	if err != nil || !strings.Contains(string(out), `export="swap"`) || !strings.Contains(string(out), `export="golden"`) {
		t.Fatalf("nbdinfo --list: %v\n%s", err, out)
	}
	src := filepath.Join(t.TempDir(), "src")
	data := make([]byte, 64<<20)
	rand.Read(data)
	os.WriteFile(src, data, 0o644)
	if out, err := exec.Command("nbdcopy", "--flush", src, uri("swap")).CombinedOutput(); err != nil {
		t.Fatalf("nbdcopy in: %v\n%s", err, out)
	}
	if out, err := exec.Command("nbdcopy", src, uri("golden")).CombinedOutput(); err == nil {
		t.Fatalf("nbdcopy into a read-only export succeeded: %s", out)
	}
	d.Kill9()
	d.StartAgain()
	waitSocket(t, sock)
	dst := filepath.Join(t.TempDir(), "dst")
	if out, err := exec.Command("nbdcopy", uri("swap"), dst).CombinedOutput(); err != nil {
		t.Fatalf("nbdcopy out: %v\n%s", err, out)
	}
	got, _ := os.ReadFile(dst)
	if !bytes.Equal(got, data) {
		t.Fatal("export bytes differ after kill -9 and restart")
	}
}

// waitSocket waits until the NBD listener accepts connections (the harness
// waits for the mount, which comes up first).
func waitSocket(t *testing.T, sock string) {
	t.Helper()
	for i := 0; i < 100; i++ {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("NBD socket %s never answered", sock)
}

// TestE2ENBDExportInNamespaceQuota: an export counted in a namespace
// (exports[].namespace) takes its whole size from that namespace's quota,
// so the namespace's files get only what is left (EDQUOT past it), and
// exports that do not fit the quota are a configuration error: exit 2
// before anything is mounted.
func TestE2ENBDExportInNamespaceQuota(t *testing.T) {
	bin := needE2E(t)
	testenv.RequireTool(t, "nbdinfo", "Debian: libnbd-bin")
	sock := filepath.Join(t.TempDir(), "nbd.sock")
	d := harness.Start(t, bin, harness.Options{DRAM: "64MiB", G3Size: "512MiB", Extra: []string{"--nbd", "unix://" + sock}})
	const nss = "namespaces:\n  - name: default\n    mode: \"1777\"\n  - name: kv\n    mode: \"0777\"\n    quota: 64MiB\n"
	if err := os.WriteFile(d.Config, []byte(nss+"exports:\n  - name: vol\n    size: 48MiB\n    namespace: kv\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d.Restart()
	waitSocket(t, sock)
	if out, err := exec.Command("nbdinfo", "--size", "nbd+unix:///vol?socket="+sock).CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != strconv.Itoa(48<<20) {
		t.Fatalf("nbdinfo --size: %v %s", err, out)
	}
	kv := filepath.Join(d.Mount, "kv")
	if err := os.WriteFile(filepath.Join(kv, "fits"), make([]byte, 12<<20), 0o644); err != nil {
		t.Fatalf("a 12 MiB file in the 16 MiB the export leaves: %v", err)
	}
	err := os.WriteFile(filepath.Join(kv, "too-big"), make([]byte, 8<<20), 0o644)
	if !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("a file past the quota the export shares: %v, want EDQUOT", err)
	}
	var sf unix.Statfs_t
	if err := unix.Statfs(kv, &sf); err != nil {
		t.Fatal(err)
	}
	if used := int64(sf.Blocks-sf.Bfree) * int64(sf.Bsize); used < 60<<20 {
		t.Errorf("statfs of kv shows %d bytes used; want the export's 48 MiB and the file's 12 MiB", used)
	}
	d.Stop()

	// Exports that need more than the quota: refused at start.
	if err := os.WriteFile(d.Config, []byte(nss+"exports:\n  - name: vol\n    size: 48MiB\n    namespace: kv\n  - name: vol2\n    size: 32MiB\n    namespace: kv\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "--config", d.Config, "--mount", d.Mount, "--data-dir", d.DataDir,
		"--admin", filepath.Join(t.TempDir(), "a.sock"), "--metrics=", "--nbd", "unix://"+sock)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "more than its quota") {
		t.Fatalf("exports past their namespace's quota: %v, want exit status 2 saying so:\n%s", err, out)
	}
	if m, _ := harness.IsMounted(d.Mount); m {
		harness.ForceUnmount(d.Mount)
		t.Error("a refused start left the mount")
	}
}
