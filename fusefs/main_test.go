package fusefs

import (
	"testing"

	"github.com/ctxmem/ctxmemd/internal/testchild"
)

// TestMain runs the tests, or, in a child process of one, its role: the
// mount TestCrashRecovery kills, or the appender of
// TestTailReaderNeverShort.
func TestMain(m *testing.M) {
	testchild.Main(m, testchild.Roles{"crash-mount": crashMount, "tail-append": tailAppend})
}
