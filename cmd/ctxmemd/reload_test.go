package main

import (
	"strings"
	"testing"

	"github.com/ctxmem/ctxmemd/fusefs"
)

// TestPlanNamespacesWarnsOfIdentity: a reload that changes an identity
// field (block_size here) says the namespace will start empty; another
// change only that it needs a restart.
func TestPlanNamespacesWarnsOfIdentity(t *testing.T) {
	cur := []fusefs.Namespace{{Name: "a", BlockSize: 256 << 10}, {Name: "b", BlockSize: 256 << 10, Mode: 0o755}}
	next := []fusefs.Namespace{{Name: "a", BlockSize: 64 << 10}, {Name: "b", BlockSize: 256 << 10, Mode: 0o777}}
	_, restart := planNamespaces(cur, next)
	if len(restart) != 2 || !strings.Contains(restart[0], "starts EMPTY") || strings.Contains(restart[1], "EMPTY") {
		t.Fatalf("restart keys %q", restart)
	}
}
