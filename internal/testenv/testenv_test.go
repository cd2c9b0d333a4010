package testenv

import (
	"os"
	"testing"

	"github.com/ctxmem/ctxmemd/internal/testchild"
)

// TestStrictFails: under CTXMEM_REQUIRE_TOOLS=1 a missing tool fails the
// test; without it the test skips. Checked in a child process, since a
// failing subtest would fail this one.
func TestStrictFails(t *testing.T) {
	if os.Getenv("TESTENV_CHILD") == "1" {
		RequireTool(t, "ctxmem-no-such-tool", "none")
		return
	}
	for _, strict := range []string{"0", "1"} {
		cmd := testchild.Tests("^TestStrictFails$", "TESTENV_CHILD=1", StrictEnv+"="+strict)
		out, err := cmd.CombinedOutput()
		failed := err != nil
		if failed != (strict == "1") {
			t.Errorf("%s=%s: failed=%v\n%s", StrictEnv, strict, failed, out)
		}
	}
}
