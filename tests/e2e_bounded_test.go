package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/internal/testenv"
	"github.com/ctxmem/ctxmemd/tests/harness"
	"github.com/ctxmem/ctxmemd/tiering/g4/s3/s3test"
)

// boundedPattern returns n deterministic bytes for seed.
func boundedPattern(seed, n int) []byte {
	b := make([]byte, n)
	x := uint32(seed)*2654435761 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

// writeFileWithin writes data to path (create, write, close) and fails the
// test if that takes longer than d (a hung write would hang the test).
func writeFileWithin(t *testing.T, path string, data []byte, d time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- os.WriteFile(path, data, 0o644) }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("writing %s (%d bytes) did not return within %v", path, len(data), d)
		return nil
	}
}

// TestE2EG2OnlyKeepsFiles is issue 11 item 3 through the mount:
// `--dram 64MiB --g3-size 0 --g4 none` kept no file (write-back had nowhere
// to go). A 64 KiB file must still read back seconds later, and files of
// 12-32 MiB must be written and read whole.
func TestE2EG2OnlyKeepsFiles(t *testing.T) {
	bin := needE2E(t)
	d := harness.Start(t, bin, harness.Options{DRAM: "64MiB", G3Size: "0", G4: "none"})
	ns := d.Namespace()
	small := boundedPattern(1, 64<<10)
	if err := writeFileWithin(t, filepath.Join(ns, "r1"), small, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if got, err := os.ReadFile(filepath.Join(ns, "r1")); err != nil || !bytes.Equal(got, small) {
		t.Fatalf("r1 after 3 s: %d bytes, %v", len(got), err)
	}
	for i, mib := range []int{12, 24, 32} {
		want := boundedPattern(10+i, mib<<20)
		p := filepath.Join(ns, fmt.Sprintf("big%d", mib))
		if err := writeFileWithin(t, p, want, 60*time.Second); err != nil {
			t.Fatalf("%d MiB file: %v", mib, err)
		}
		if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%d MiB file read back: %d bytes, %v", mib, len(got), err)
		}
	}
	if !strings.Contains(d.Log(), "no tier below G2") {
		t.Error("the daemon did not say at start that files live in DRAM only")
	}
}

// TestE2EFullDiskBoundsWriters is issue 11 item 4(a) through the mount: G3
// and G4 on a 48 MiB filesystem with the default 10 GiB G3 (the 10th 8 MiB
// file hung for minutes, the log filled with "tier full" warnings and
// status said every tier was ok). Now the G3 size is clamped at start; 40
// files of 8 MiB are each written and fsynced within a bound; G3 works as a
// cache ring over the full G4, so old files are dropped whole (counted,
// with their reason) and never read wrong bytes; the log is not flooded.
func TestE2EFullDiskBoundsWriters(t *testing.T) {
	bin := needE2E(t)
	small := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", small).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", small).Run() })
	d := harness.Start(t, bin, harness.Options{DRAM: "64MiB", G4: "file://" + filepath.Join(small, "g4"),
		Extra: []string{"--g3-dir", filepath.Join(small, "g3"), "--g3-segment-size", "4MiB", "--write-timeout", "3s", "--dirty-bytes", "16MiB"}})
	if !strings.Contains(d.Log(), "clamped") {
		t.Error("a 10 GiB G3 on a 48 MiB filesystem was not clamped at start")
	}
	ns := d.Namespace()
	const files = 40
	for i := 0; i < files; i++ {
		p := filepath.Join(ns, fmt.Sprintf("f%02d", i))
		if err := writeFileWithin(t, p, boundedPattern(i, 8<<20), 40*time.Second); err != nil {
			if !errors.Is(err, syscall.ENOSPC) && !errors.Is(err, syscall.EIO) {
				t.Fatalf("file %d: %v; want success, ENOSPC or EIO", i, err)
			}
			continue
		}
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			continue // dropped already
		}
		done := make(chan error, 1)
		go func() { done <- f.Sync() }()
		select {
		case err = <-done:
			if err != nil && !errors.Is(err, syscall.ENOSPC) && !errors.Is(err, syscall.EIO) && !errors.Is(err, syscall.ENOENT) {
				t.Fatalf("fsync of file %d: %v", i, err)
			}
		case <-time.After(40 * time.Second):
			t.Fatalf("fsync of file %d did not return within 40 s", i)
		}
		f.Close()
	}
	present := 0
	for i := 0; i < files; i++ {
		got, err := os.ReadFile(filepath.Join(ns, fmt.Sprintf("f%02d", i)))
		if err != nil {
			continue
		}
		if !bytes.Equal(got, boundedPattern(i, 8<<20)) {
			t.Fatalf("file %d reads %d wrong or short bytes", i, len(got))
		}
		present++
	}
	ctx := context.Background()
	st, err := d.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g3, _ := st.Tier("G3")
	if g3.CapacityBytes == 0 || g3.CapacityBytes > 48<<20 {
		t.Errorf("G3 capacity %d: want clamped under the 48 MiB filesystem", g3.CapacityBytes)
	}
	var lost int64
	fmt.Sscan(string(st.Stats["objects_lost"]), &lost)
	if present == files || lost == 0 {
		t.Errorf("%d of %d files present, %d objects counted lost: 320 MiB cannot fit in 48 MiB", present, files, lost)
	}
	t.Logf("%d of %d files present, %d lost; dropped %s", present, files, lost, st.Stats["dropped"])
	for _, msg := range []string{"write-back failed", "demote to G4 failed", `msg="object lost"`} {
		if n := strings.Count(d.Log(), msg); n > 30 {
			t.Errorf("%d %q lines: want them rate-limited", n, msg)
		}
	}
}

// TestE2EStuckWriterKillable is issue 11 item 4(b) through the mount: G3
// off and the S3 server hung (SIGSTOP). Dirty bytes reach their bound and
// writes wait; a writer that gets SIGKILL must die at once (FUSE INTERRUPT
// is honoured while it waits, so it is not left in D state), and one that
// is left alone must get an error within the write timeout plus the G4
// call timeout, not wait forever. Once S3 answers again writes succeed.
func TestE2EStuckWriterKillable(t *testing.T) {
	bin := needE2E(t)
	srv := s3test.StartServer(t)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	t.Setenv("AWS_SESSION_TOKEN", "")
	d := harness.Start(t, bin, harness.Options{DRAM: "64MiB", G3Size: "0", G4: s3URL(srv, srv.Bucket, s3Prefix),
		Extra: []string{"--write-timeout", "5s", "--dirty-bytes", "8MiB"}})
	ns := d.Namespace()
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume()
		}
	}()
	// dd starts a writer; its exit arrives on the returned channel (one
	// Wait per process).
	dd := func(name string) (*exec.Cmd, <-chan error) {
		c := exec.Command("dd", "if=/dev/zero", "of="+filepath.Join(ns, name), "bs=1M", "count=64", "status=none")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- c.Wait() }()
		return c, done
	}
	waitExit := func(done <-chan error, limit time.Duration) (error, bool) {
		select {
		case err := <-done:
			return err, true
		case <-time.After(limit):
			return nil, false
		}
	}
	w1, w1done := dd("killed")
	if err, exited := waitExit(w1done, 2*time.Second); exited {
		t.Fatalf("dd of 64 MiB with S3 hung and an 8 MiB dirty bound finished: %v", err)
	}
	start := time.Now()
	if err := w1.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, exited := waitExit(w1done, 5*time.Second); !exited {
		t.Fatal("a writer waiting on the hung tier did not die within 5 s of SIGKILL (D state)")
	}
	t.Logf("killed writer exited %v after SIGKILL", time.Since(start))
	start = time.Now()
	w2, w2done := dd("left")
	err, exited := waitExit(w2done, 90*time.Second)
	if !exited {
		w2.Process.Kill()
		t.Fatal("a writer waiting on the hung tier had no answer within 90 s")
	}
	if err == nil {
		t.Fatal("dd of 64 MiB with S3 hung succeeded")
	}
	t.Logf("writer left alone failed after %v: %v", time.Since(start), err)
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed = true
	p := filepath.Join(ns, "after")
	ok := testenv.Poll(60*time.Second, func() bool {
		if err := os.WriteFile(p, boundedPattern(3, 1<<20), 0o644); err != nil {
			return false
		}
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			return false
		}
		defer f.Close()
		return f.Sync() == nil
	})
	if !ok {
		t.Fatal("writes did not succeed again within 60 s of S3 answering")
	}
}
