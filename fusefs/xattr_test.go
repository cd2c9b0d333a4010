package fusefs

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/ctxmem/ctxmemd/tiering"
	"golang.org/x/sys/unix"
)

func getx(t *testing.T, p, name string) (string, error) {
	t.Helper()
	buf := make([]byte, 4096)
	n, err := unix.Getxattr(p, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

func TestFormatTiers(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want string
	}{
		{nil, ""},
		{[]string{"G2"}, "G2"},
		{[]string{"G2", "G2", "G2", "G3", "G4", "G4"}, "G2*3 G3 G4*2"},
		{[]string{"hole", "G3.5", "G3.5", "hole"}, "hole G3.5*2 hole"},
	} {
		if got := formatTiers(tc.in); got != tc.want {
			t.Errorf("formatTiers(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestXattrs(t *testing.T) {
	m := mount(t, nil, Options{Namespaces: []Namespace{{Name: "ns", Mode: 0o777, BlockSize: 64 << 10}}})
	p := filepath.Join(m.mnt, "ns", "f")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if v, err := getx(t, p, XattrTier); err != nil || v != "" {
		t.Fatalf("tier of an empty file: %q, %v", v, err)
	}
	// 6 blocks of 64 KiB, block 5 never written (hole).
	f, _ := os.OpenFile(p, os.O_RDWR, 0)
	f.WriteAt(make([]byte, 5*64<<10), 0)
	f.WriteAt([]byte{1}, 6*64<<10-1)
	f.Close()
	id := m.obj(p)
	m.be.mu.Lock()
	delete(m.be.objs[id].written, 4)
	m.be.mu.Unlock()
	m.be.setTier(id, 3, tiering.TierG3)
	m.be.setTier(id, 1, tiering.TierG4)
	m.be.setTier(id, 2, tiering.TierG4)
	if v, err := getx(t, p, XattrTier); err != nil || v != "G2 G4*2 G3 hole G2" {
		t.Fatalf("tier: %q, %v", v, err)
	}
	m.be.setHeat(id, 42.6)
	if v, err := getx(t, p, XattrHeat); err != nil || v != "43" {
		t.Fatalf("heat: %q, %v", v, err)
	}
	if v, _ := getx(t, p, XattrPin); v != "0" {
		t.Fatalf("pin before: %q", v)
	}
	if err := unix.Setxattr(p, XattrPin, []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	if info, _ := m.be.Stat(id); !info.Pinned {
		t.Fatal("setting pin=1 did not pin")
	}
	if v, _ := getx(t, p, XattrPin); v != "1" {
		t.Fatalf("pin after: %q", v)
	}
	if err := unix.Setxattr(p, XattrPin, []byte("0"), 0); err != nil {
		t.Fatal(err)
	}
	if info, _ := m.be.Stat(id); info.Pinned {
		t.Fatal("setting pin=0 did not unpin")
	}
	if err := unix.Setxattr(p, XattrPin, []byte("yes"), 0); err != unix.EINVAL {
		t.Fatalf("pin=yes: %v, want EINVAL", err)
	}
	if err := unix.Setxattr(p, XattrPrestage, []byte("now"), 0); err != nil {
		t.Fatal(err)
	}
	m.be.mu.Lock()
	calls := m.be.prestage[id]
	m.be.mu.Unlock()
	if calls != 1 {
		t.Fatal("prestage not called")
	}
	if v, _ := getx(t, p, XattrTier); v != "G2*4 hole G2" {
		t.Fatalf("tier after prestage: %q", v)
	}
	for _, name := range []string{XattrTier, XattrHeat} {
		if err := unix.Setxattr(p, name, []byte("G2"), 0); err != unix.EPERM {
			t.Errorf("write %s: %v, want EPERM", name, err)
		}
		if err := unix.Removexattr(p, name); err != unix.EPERM {
			t.Errorf("remove %s: %v, want EPERM", name, err)
		}
	}
	// Other user.* attributes are stored, and survive a remount.
	if err := unix.Setxattr(p, "user.engine", []byte("sglang"), 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(p, "user.engine", []byte("x"), unix.XATTR_CREATE); err != unix.EEXIST {
		t.Fatalf("XATTR_CREATE on existing: %v", err)
	}
	if err := unix.Setxattr(p, "trusted.x", []byte("x"), 0); err != unix.ENOTSUP && err != unix.EPERM {
		t.Fatalf("trusted.x: %v", err)
	}
	sz, err := unix.Listxattr(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, sz)
	n, _ := unix.Listxattr(p, buf)
	names := strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00")
	sort.Strings(names)
	want := []string{XattrHeat, XattrPin, XattrPrestage, XattrTier, "user.engine"}
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Fatalf("listxattr: %v, want %v", names, want)
	}
	if err := unix.Setxattr(m.ns("ns"), "user.dir", []byte("d"), 0); err != nil {
		t.Fatal(err)
	}
	m.restart()
	if v, err := getx(t, p, "user.engine"); err != nil || v != "sglang" {
		t.Fatalf("user xattr after remount: %q %v", v, err)
	}
	if v, err := getx(t, m.ns("ns"), "user.dir"); err != nil || v != "d" {
		t.Fatalf("dir xattr after remount: %q %v", v, err)
	}
	if err := unix.Removexattr(p, "user.engine"); err != nil {
		t.Fatal(err)
	}
	if _, err := getx(t, p, "user.engine"); !errors.Is(err, syscall.ENODATA) {
		t.Fatalf("after remove: %v", err)
	}
}
