package g3

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func TestFitCapacity(t *testing.T) {
	dir := t.TempDir()
	if c, clamped, err := FitCapacity(dir, 1<<20, 1<<20); err != nil || clamped || c != 1<<20 {
		t.Fatalf("small capacity = %d, %v, %v; want unchanged", c, clamped, err)
	}
	c, clamped, err := FitCapacity(dir, 1<<62, 1<<20)
	if err != nil || !clamped || c <= 0 || c%(1<<20) != 0 || c >= 1<<62 {
		t.Fatalf("huge capacity = %d, %v, %v; want clamped to whole segments", c, clamped, err)
	}
}

// TestFitCapacityTinyFilesystem mounts a 16 MiB tmpfs (root only) and asks
// for 10 GiB: clamped below 16 MiB; with 8 MiB segments it is refused.
func TestFitCapacityTinyFilesystem(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CTXMEM_REQUIRE_TOOLS") == "1" {
			t.Fatal("needs root to mount a tmpfs")
		}
		t.Skip("needs root to mount a tmpfs")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, out)
	}
	defer exec.Command("umount", dir).Run()
	g3dir := filepath.Join(dir, "g3")
	c, clamped, err := FitCapacity(g3dir, 10<<30, 1<<20)
	if err != nil || !clamped || c > 16<<20 || c < 12<<20 {
		t.Fatalf("10 GiB on a 16 MiB tmpfs = %d, %v, %v; want clamped to about 15 MiB", c, clamped, err)
	}
	if _, _, err := FitCapacity(g3dir, 10<<30, 8<<20); err == nil {
		t.Fatal("8 MiB segments on a 16 MiB tmpfs accepted; want refused")
	}
}
