package nbd

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Kernel attach needs the nbd module, which test machines lack; what can be
// checked without it is that Attach refuses clearly. The check is run
// against a module directory that does not exist, so it runs on machines
// with the module too; Attach itself is checked where the module is
// missing.
func TestAttachWithoutKernelNBD(t *testing.T) {
	refused := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrNoKernelNBD) || !strings.Contains(err.Error(), "modprobe nbd") {
			t.Fatalf("%s without the module: %v", what, err)
		}
	}
	refused("the device check", checkNBDDevice("/dev/nbd0", filepath.Join(t.TempDir(), "nbd")))
	if _, err := os.Stat(nbdModule); err != nil {
		refused("Attach", Attach(context.Background(), "unix:///nonexistent.sock", "default", "/dev/nbd0"))
	}
}

func TestCheckBlockDevice(t *testing.T) {
	if err := checkBlockDevice("/nonexistent/nbd9", nbdMajor); !errors.Is(err, ErrNoKernelNBD) {
		t.Errorf("missing node: %v", err)
	}
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := checkBlockDevice(f, nbdMajor); err == nil || !strings.Contains(err.Error(), "not a block device") {
		t.Errorf("regular file: %v", err)
	}
	if err := checkBlockDevice("/dev/null", nbdMajor); err == nil || !strings.Contains(err.Error(), "not a block device") {
		t.Errorf("character device: %v", err)
	}
	if _, err := os.Stat("/dev/loop0"); err == nil {
		if err := checkBlockDevice("/dev/loop0", nbdMajor); err == nil || !strings.Contains(err.Error(), "not an NBD device") {
			t.Errorf("loop device: %v", err)
		}
		if err := checkBlockDevice("/dev/loop0", 7); err != nil {
			t.Errorf("loop device with its own major: %v", err)
		}
	}
}
