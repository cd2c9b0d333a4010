package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// RepoRoot returns the directory of the main module's go.mod, found with
// `go env GOMOD` from the current directory.
func RepoRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("go env GOMOD: not inside a module")
	}
	return filepath.Dir(gomod), nil
}

// BuildBinary builds ./cmd/ctxmemd of the repository at RepoRoot into
// outDir/ctxmemd and returns its path. The build output is in the error
// when the build fails.
func BuildBinary(ctx context.Context, outDir string) (string, error) {
	root, err := RepoRoot(ctx)
	if err != nil {
		return "", err
	}
	bin := filepath.Join(outDir, "ctxmemd")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/ctxmemd")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/ctxmemd in %s: %w\n%s", root, err, out)
	}
	return bin, nil
}
