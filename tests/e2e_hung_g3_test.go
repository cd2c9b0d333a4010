package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/internal/testenv"
	"github.com/ctxmem/ctxmemd/tests/harness"
)

// TestE2EHungG3 is a new user's run: G3 on a directory whose device stops
// answering (here a second daemon's mount, frozen with SIGSTOP: its reads
// never return, as a hung NVMe's). Before, a read of a file only G3 held
// waited for as long as the device did (783 s in that run), status stopped
// answering and SIGTERM waited too. Now each such read fails with EIO
// after local_read_timeout, G3 goes down after five, status answers and
// says so, the daemon stops on SIGTERM, and once the device answers again
// the files read their bytes.
func TestE2EHungG3(t *testing.T) {
	bin := needE2E(t)
	// Passthrough off: every read of its files is a request to it (with
	// passthrough the kernel reads its memory files without asking it).
	dev := harness.Start(t, bin, harness.Options{DRAM: "256MiB", G3Size: "0", G4: "none", Extra: []string{"--passthrough=false"}})
	g3dir := filepath.Join(dev.Namespace(), "g3")
	if err := os.Mkdir(g3dir, 0o755); err != nil {
		t.Fatal(err)
	}
	d := harness.Start(t, bin, harness.Options{DRAM: "16MiB", G3Size: "48MiB", G4: "none",
		Extra: []string{"--g3-dir", g3dir, "--g3-segment-size", "4MiB", "--local-read-timeout", "500ms"}})
	resumed := false
	t.Cleanup(func() { // before the daemons' own cleanups: never leave the device frozen
		if !resumed {
			_ = dev.Signal(syscall.SIGCONT)
		}
	})
	ns := d.Namespace()
	const files, size = 4, 4 << 20
	for i := range files {
		p := filepath.Join(ns, fmt.Sprintf("k%d", i))
		if err := os.WriteFile(p, boundedPattern(500+i, size), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(bin, "evict", "--admin", d.Admin, p).CombinedOutput(); err != nil {
			t.Fatalf("evict %s: %v: %s", p, err, out)
		}
		if v := tierOf(t, p); !allIn(v, "G3") {
			t.Fatalf("after evict: k%d is in %q, want all G3", i, v)
		}
	}
	// The device's kernel page cache may hold G3's segments (O_DIRECT is
	// not always honoured through FUSE): dropped, so G3's reads reach it.
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0o200); err != nil {
		t.Fatalf("drop caches (root): %v", err)
	}
	if err := dev.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Reads of G3-only files: EIO, each within its deadline (five of them
	// take G3 down; later ones fail at once).
	for i := range 6 {
		p := filepath.Join(ns, fmt.Sprintf("k%d", i%files))
		done := make(chan error, 1)
		go func() { _, err := os.ReadFile(p); done <- err }()
		select {
		case err := <-done:
			if !errors.Is(err, syscall.EIO) {
				t.Fatalf("read %d of %s from a hung G3: %v; want EIO", i, p, err)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("read %d of %s from a hung G3 did not return within 60 s", i, p)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	st, err := d.Status(ctx)
	cancel()
	if err != nil {
		t.Fatalf("status with G3 hung: %v", err)
	}
	if !strings.Contains(string(st.Raw), `"local_reads_abandoned"`) {
		t.Errorf("status --json has no local_reads_abandoned counter")
	}
	g3, _ := st.Tier("G3")
	if !g3.Degraded {
		t.Errorf("G3 %+v after reads that did not return; want it down", g3)
	}
	if err := dev.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed = true
	for i := range files {
		p := filepath.Join(ns, fmt.Sprintf("k%d", i))
		testenv.Eventually(t, 30*time.Second, func() bool {
			got, err := os.ReadFile(p)
			return err == nil && bytes.Equal(got, boundedPattern(500+i, size))
		}, "k%d reading its bytes once the device answers", i)
	}
}
