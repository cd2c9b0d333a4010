package g3

import (
	"fmt"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/ctxmem/ctxmemd/tiering/tier"
	"github.com/ctxmem/ctxmemd/tiering/tiertest"

	"github.com/ctxmem/ctxmemd/internal/testenv"
)

// mountTmpfs mounts a tmpfs of the given size on a fresh directory and
// unmounts it when the test ends. It skips the test when not root or when
// mount fails.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skip(t, "needs root to mount tmpfs")
	}
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", mnt).CombinedOutput(); err != nil {
		testenv.Skip(t, "mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { umount(t, mnt) })
	return mnt
}

// mountLoopExt4 formats a sparse image of size bytes as ext4 and mounts it
// through a loop device (which enforces O_DIRECT alignment). It skips the
// test when not root or when losetup/mkfs/mount are not available.
func mountLoopExt4(t *testing.T, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skip(t, "needs root for a loop mount")
	}
	base := t.TempDir()
	img, mnt := filepath.Join(base, "img"), filepath.Join(base, "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", img).CombinedOutput(); err != nil {
		testenv.Skip(t, "mkfs.ext4: %v: %s", err, out)
	}
	dev, err := exec.Command("losetup", "-f", "--show", img).Output()
	if err != nil {
		testenv.Skip(t, "losetup: %v", err)
	}
	loop := string(dev[:len(dev)-1])
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "-d", loop).CombinedOutput(); err != nil {
			t.Logf("losetup -d %s: %v: %s", loop, err, out)
		}
	})
	if out, err := exec.Command("mount", "-t", "ext4", loop, mnt).CombinedOutput(); err != nil {
		testenv.Skip(t, "mount %s: %v: %s", loop, err, out)
	}
	t.Cleanup(func() { umount(t, mnt) })
	return mnt
}

func umount(t *testing.T, mnt string) {
	if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
		t.Errorf("umount %s: %v: %s", mnt, err, out)
	}
}

// TestDirectOnLoopExt4 runs the conformance suite on an ext4 filesystem on
// a loop device, where misaligned O_DIRECT I/O fails with EINVAL, and
// checks that the store really uses O_DIRECT there.
func TestDirectOnLoopExt4(t *testing.T) {
	mnt := mountLoopExt4(t, 256*mib)
	s := openT(t, Options{Dir: filepath.Join(mnt, "probe")})
	if !s.Direct() {
		t.Fatal("O_DIRECT not used on a loop-mounted ext4")
	}
	// Every suite directory maps to its own directory on the loop mount.
	onLoop := func(t *testing.T, dir string) string {
		d := filepath.Join(mnt, fmt.Sprintf("%08x", crc32.ChecksumIEEE([]byte(dir))))
		return d
	}
	h := harness(false)
	open, openSmall := h.Open, h.OpenSmall
	h.Open = func(t *testing.T, dir string) tier.Tier {
		d := onLoop(t, dir)
		t.Cleanup(func() { os.RemoveAll(d) })
		tr := open(t, d)
		if !tr.(*Store).Direct() {
			t.Fatal("not direct")
		}
		return tr
	}
	h.OpenSmall = func(t *testing.T, dir string) tier.Tier {
		d := onLoop(t, dir)
		t.Cleanup(func() { os.RemoveAll(d) })
		return openSmall(t, d)
	}
	h.Corrupt = func(t *testing.T, dir string, key tier.Key) error { return corruptPayload(t, onLoop(t, dir), key) }
	tiertest.Run(t, h)
}
