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
// checked without it is that Attach refuses clearly.
func TestAttachWithoutKernelNBD(t *testing.T) {
	if _, err := os.Stat("/sys/module/nbd"); err == nil {
		t.Skip("this machine has the nbd module; the refusal path is not reachable")
	}
	err := Attach(context.Background(), "unix:///nonexistent.sock", "default", "/dev/nbd0")
	if !errors.Is(err, ErrNoKernelNBD) || !strings.Contains(err.Error(), "modprobe nbd") {
		t.Fatalf("Attach without the module: %v", err)
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
