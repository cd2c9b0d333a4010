package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/internal/testenv"
	"github.com/ctxmem/ctxmemd/tests/harness"
)

// TestE2EKernelFilesBound: with --kernel-files, the kernel keeps about
// that many files looked up however many are created (status --json's
// kernel_entries; the rest were invalidated and forgotten, freeing the
// kernel's dentries and inodes and the daemon's FUSE state), every file
// still reads its own bytes by path, and `ctxmemd status` says so.
func TestE2EKernelFilesBound(t *testing.T) {
	bin := needE2E(t)
	const limit, files = 100, 1500
	d := harness.Start(t, bin, harness.Options{Extra: []string{"--kernel-files", fmt.Sprint(limit)}})
	dir := filepath.Join(d.Namespace(), "kv")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	want := func(i int) []byte { return boundedPattern(900+i, 4096) }
	for i := range files {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("b%04d", i)), want(i), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	type entries struct{ Files, Limit, Invalidated, Forgotten int64 }
	status := func() entries {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		st, err := d.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var raw struct {
			K entries `json:"kernel_entries"`
		}
		if err := json.Unmarshal(st.Raw, &raw); err != nil {
			t.Fatal(err)
		}
		return raw.K
	}
	testenv.Eventually(t, 20*time.Second, func() bool { return status().Files <= limit },
		"files looked up in the kernel down to --kernel-files %d", limit)
	k := status()
	t.Logf("after %d creates: %+v", files, k)
	if k.Limit != limit || k.Invalidated < files-limit || k.Forgotten < files-limit {
		t.Fatalf("kernel_entries %+v: want limit %d and at least %d invalidated and forgotten", k, limit, files-limit)
	}
	for i := range files {
		if got, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("b%04d", i))); err != nil || !bytes.Equal(got, want(i)) {
			t.Fatalf("b%04d after its entry was invalidated: %d bytes, %v", i, len(got), err)
		}
	}
	out, err := exec.Command(bin, "status", "--admin", d.Admin).CombinedOutput()
	if err != nil || !strings.Contains(string(out), fmt.Sprintf("(bound %d)", limit)) {
		t.Fatalf("ctxmemd status: %v\n%s", err, out)
	}
}
