package fusefs

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxmem/ctxmemd/internal/testenv"
)

func TestQuota(t *testing.T) {
	const quota = 1 << 20
	m := mount(t, nil, Options{Namespaces: []Namespace{{Name: "q", Mode: 0o777, QuotaBytes: quota}}})
	dir := filepath.Join(m.mnt, "q")
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	if err := os.WriteFile(a, make([]byte, quota), 0o644); err != nil {
		t.Fatalf("write up to the quota: %v", err)
	}
	if err := os.WriteFile(b, []byte{1}, 0o644); !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("write past the quota: %v, want EDQUOT", err)
	}
	if err := os.Truncate(a, quota+1); !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("truncate past the quota: %v, want EDQUOT", err)
	}
	f, err := os.OpenFile(a, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Fallocate(int(f.Fd()), 0, 0, quota+4096); err != unix.EDQUOT {
		t.Fatalf("fallocate past the quota: %v, want EDQUOT", err)
	}
	// Overwriting in place needs no quota.
	if _, err := f.WriteAt(pattern(1, quota), 0); err != nil {
		t.Fatalf("overwrite within the size: %v", err)
	}
	f.Close()
	// O_TRUNC gives the space back before the rewrite.
	if err := os.WriteFile(a, pattern(2, quota), 0o644); err != nil {
		t.Fatalf("O_TRUNC rewrite at the quota: %v", err)
	}
	if err := os.Truncate(a, quota/2); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b, make([]byte, quota/2), 0o644); err != nil {
		t.Fatalf("write into space freed by truncate: %v", err)
	}
	// An unlinked file counts until its last close.
	r, err := os.Open(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(b); err != nil {
		t.Fatal(err)
	}
	c := filepath.Join(dir, "c")
	if err := os.WriteFile(c, make([]byte, quota/2), 0o644); !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("write while an unlinked file is open: %v, want EDQUOT", err)
	}
	r.Close()
	testenv.Eventually(t, 10*time.Second, func() bool {
		return os.WriteFile(c, make([]byte, quota/2), 0o644) == nil
	}, "quota released at last close")
	if used := m.srv.fsys.nss[0].Used(); used != quota {
		t.Errorf("namespace usage %d, want %d", used, quota)
	}
	// Usage is rebuilt from object sizes at mount.
	m.restart()
	if used := m.srv.fsys.nss[0].Used(); used != quota {
		t.Errorf("usage after remount %d, want %d", used, quota)
	}
	if err := os.WriteFile(filepath.Join(dir, "d"), []byte{1}, 0o644); !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("write past the quota after remount: %v", err)
	}
}
