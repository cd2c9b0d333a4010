package g3

import (
	"testing"

	"github.com/ctxmem/ctxmemd/internal/testchild"
)

// TestMain runs the tests, or, in the child process of TestKill9, its
// writer.
func TestMain(m *testing.M) {
	testchild.Main(m, testchild.Roles{"kill": killChild})
}
