// Package testenv is the one test seam for what a test needs from the
// machine: root, FUSE, an external tool, a kernel feature. A test that
// lacks one skips, unless CTXMEM_REQUIRE_TOOLS=1 (as `make test` and CI
// set), where it fails instead, so that a missing tool can never pass as
// a silent skip.
//
// Skips that are not about the machine (a benchmark or soak that must be
// asked for, -short) keep using t.Skip. A child process of a test is not
// a test at all: see package internal/testchild. Eventually and Poll are
// the one way a test waits for a condition.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// StrictEnv is the environment variable that turns skips into failures.
const StrictEnv = "CTXMEM_REQUIRE_TOOLS"

// Strict reports whether a missing requirement fails the test
// (CTXMEM_REQUIRE_TOOLS=1) rather than skipping it.
func Strict() bool { return os.Getenv(StrictEnv) == "1" }

// Skip skips t because the machine lacks something (format and args say
// what), or fails it under Strict.
func Skip(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if Strict() {
		t.Fatalf("%s (%s=1: required)", msg, StrictEnv)
	}
	t.Skip(msg)
}

// RequireRoot skips (or, under Strict, fails) t unless it runs as root;
// why says what root is needed for.
func RequireRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Skip(t, "needs root: %s", why)
	}
}

// RequireFUSE skips (or fails) t unless real FUSE mounts are possible:
// /dev/fuse exists and the test runs as root.
func RequireFUSE(t testing.TB) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		Skip(t, "no /dev/fuse: %v", err)
	}
	RequireRoot(t, "FUSE mounts")
}

// RequireTool returns the path of the executable name, or skips (or
// fails) t when it is not on PATH; hint says how to get it (e.g. the
// Debian package).
func RequireTool(t testing.TB, name, hint string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Skip(t, "%s not installed (%s)", name, hint)
	}
	return p
}
