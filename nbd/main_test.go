package nbd

import (
	"testing"

	"github.com/ctxmem/ctxmemd/internal/testchild"
)

// TestMain runs the tests, or, in a child process of a crash test, the
// child's role.
func TestMain(m *testing.M) {
	testchild.Main(m, testchild.Roles{"crash-serve": crashServe})
}
