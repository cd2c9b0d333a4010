package workloads

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxmem/ctxmemd/internal/testenv"
)

const (
	ext4Magic  = 0xef53
	tmpfsMagic = 0x01021994
)

// runAll runs W1–W5 on dir as subtests, each under a 60 s deadline.
func runAll(t *testing.T, dir string, p Params) {
	for _, w := range []struct {
		name string
		fn   func(context.Context, string, Params) (Report, error)
	}{{"W1", RunW1}, {"W2", RunW2}, {"W3", RunW3}, {"W4", RunW4}, {"W5", RunW5}} {
		t.Run(w.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			rep, err := w.fn(ctx, dir, p)
			t.Log(rep)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Checks == 0 || rep.Ops == 0 || rep.BytesRead == 0 || rep.BytesWritten == 0 {
				t.Fatalf("%s did nothing: %v", w.name, rep)
			}
		})
	}
}

func fsType(t *testing.T, dir string) int64 {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return st.Type
}

// TestWorkloadsOnTempDir runs every workload on t.TempDir() (ext4 on the
// test machines). Free-space tracking is not required there: other
// processes share that file system.
func TestWorkloadsOnTempDir(t *testing.T) {
	dir := t.TempDir()
	ext4 := fsType(t, dir) == ext4Magic
	if !ext4 {
		t.Logf("%s is not ext4 (magic %#x): not requiring strict O_DIRECT alignment", dir, fsType(t, dir))
	}
	runAll(t, dir, Params{RequireODirect: ext4, StrictDIO: ext4, ExpectBsize4096: ext4})
}

// TestWorkloadsOnTmpfs runs every workload on a private tmpfs, where the
// run is the only user, so statvfs must track usage.
func TestWorkloadsOnTmpfs(t *testing.T) {
	dir := mountPrivate(t, "tmpfs", "size=1g")
	if fsType(t, dir) != tmpfsMagic {
		t.Fatalf("mounted %s is not tmpfs", dir)
	}
	runAll(t, dir, Params{RequireODirect: true, ExpectBsize4096: true, StatfsTracksUsage: true})
}

// TestWorkloadsOnLoopExt4 runs every workload on a private ext4 on a loop
// device: strict O_DIRECT alignment and exact free-space accounting.
func TestWorkloadsOnLoopExt4(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	img := filepath.Join(t.TempDir(), "ext4.img")
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		testenv.Skip(t, "mkfs.ext4 not installed")
	}
	if os.Geteuid() != 0 {
		testenv.Skip(t, "needs root to mount")
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-b", "4096", img, "1G").CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v %s", err, out)
	}
	dir := mountPrivate(t, "ext4", "loop", img)
	runAll(t, dir, Params{RequireODirect: true, StrictDIO: true, ExpectBsize4096: true, StatfsTracksUsage: true})
}

// mountPrivate mounts a file system of type typ with options opts (and
// source src when given) on a fresh directory, unmounting it in cleanup.
// It skips when not root.
func mountPrivate(t *testing.T, typ, opts string, src ...string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skip(t, "needs root to mount")
	}
	dir := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	args := []string{"-t", typ, "-o", opts}
	if len(src) > 0 {
		args = append(args, src[0])
	} else {
		args = append(args, typ)
	}
	if out, err := exec.Command("mount", append(args, dir)...).CombinedOutput(); err != nil {
		testenv.Skip(t, "mount %v: %v %s", args, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", dir, err, out)
			_ = unix.Unmount(dir, unix.MNT_DETACH)
		}
	})
	return dir
}
