package tests

import (
	"bytes"
	"crypto/rand"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
