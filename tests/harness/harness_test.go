package harness

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/ctxmem/ctxmemd/internal/testenv"
)

func TestUnescapeMountinfo(t *testing.T) {
	if got := unescapeMountinfo(`/tmp/a\040b\011c`); got != "/tmp/a b\tc" {
		t.Fatalf("got %q", got)
	}
	if got := unescapeMountinfo("/plain"); got != "/plain" {
		t.Fatalf("got %q", got)
	}
}

func TestRepoRootHasGoMod(t *testing.T) {
	root, err := RepoRoot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatal(err)
	}
}

// fakeBinary builds testdata/fakectxmemd, a go-fuse loopback daemon with
// ctxmemd's run/status surface.
func fakeBinary(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skip(t, "needs root to mount FUSE")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		testenv.Skip(t, "no /dev/fuse")
	}
	bin := filepath.Join(t.TempDir(), "fakectxmemd")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/fakectxmemd").CombinedOutput(); err != nil {
		t.Fatalf("build fake: %v\n%s", err, out)
	}
	return bin
}

// TestLifecycle drives the harness through start, status, kill -9 (stale
// mount), recovery, SIGTERM and cleanup against the fake daemon.
func TestLifecycle(t *testing.T) {
	bin := fakeBinary(t)
	var mnt string
	t.Run("daemon", func(t *testing.T) {
		d := Start(t, bin, Options{DRAM: "16MiB"})
		mnt = d.Mount
		if !IsLiveFuse(d.Mount) {
			t.Fatal("not a live FUSE mount after Start")
		}
		p := filepath.Join(d.Namespace(), "f")
		if err := os.WriteFile(p, []byte("hello"), 0o644); err != nil {
			t.Fatal(err)
		}
		st, err := d.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if g2, ok := st.Tier("g2"); !ok || g2.Blocks != 1 {
			t.Fatalf("status tiers %+v", st.Tiers)
		}
		d.Kill9()
		if !IsStale(d.Mount) {
			t.Fatal("mount not stale after kill -9")
		}
		if m, _ := IsMounted(d.Mount); !m {
			t.Fatal("stale mount not in mountinfo")
		}
		d.StartAgain()
		if b, err := os.ReadFile(p); err != nil || string(b) != "hello" {
			t.Fatalf("after recovery: %q %v", b, err)
		}
		if err := d.Stop(); err != nil {
			t.Fatal(err)
		}
		if d.Running() || IsLiveFuse(d.Mount) {
			t.Fatal("still running or mounted after Stop")
		}
		d.Restart() // from stopped: starts again; cleanup must unmount it
		if !d.Running() {
			t.Fatal("not running after Restart")
		}
	})
	if m, err := IsMounted(mnt); err != nil || m {
		t.Fatalf("cleanup leaked the mount %s (%v)", mnt, err)
	}
}

func TestForceUnmountDetachesStaleMount(t *testing.T) {
	bin := fakeBinary(t)
	d := Start(t, bin, Options{})
	d.Kill9()
	if err := ForceUnmount(d.Mount); err != nil {
		t.Fatal(err)
	}
	if m, _ := IsMounted(d.Mount); m {
		t.Fatal("still mounted")
	}
}
