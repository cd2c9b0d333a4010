package tests

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxmem/ctxmemd/internal/testenv"
	"github.com/ctxmem/ctxmemd/tests/harness"
)

// TestE2ES3Packed: files sunk to an S3 G4 (`ctxmemd sink`, with a G3, so
// the blocks go as packs: one object per file here) read back through the
// mount with one batched GET each (status g4_run_reads); a byte flipped in
// the middle of a pack makes its file a miss (EIO or ENOENT, then gone),
// never wrong bytes, and leaves the other files alone; a hung or killed
// server makes a read fail with EIO within the request deadlines and the
// file reads again once it answers; after a restart of the daemon (no CRC
// table in memory) the packed files read back.
func TestE2ES3Packed(t *testing.T) {
	srv, d := startS3DaemonWith(t, harness.Options{DRAM: "64MiB", G3Size: "256MiB"})
	ns := d.Namespace()
	files := []s3File{{"good pack ü+%.kv", 8 << 20}, {"flipped pack.kv", 8 << 20}, {"hung read.kv", 4 << 20}, {"after restart.kv", 8<<20 + 4097},
		{"server killed.kv", 4 << 20}}
	prev := blockObjects(t, srv)
	packOf := map[string]string{}
	for _, f := range files {
		p := filepath.Join(ns, f.name)
		if err := writePattern(p, f.name, f.size); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(d.Binary(), "sink", "--quiet", "--admin", d.Admin, p).CombinedOutput(); err != nil {
			t.Fatalf("sink %q: %v\n%s", f.name, err, out)
		}
		if !allG4(ns, []s3File{f}) {
			tiers, err := blockTiers(p)
			t.Fatalf("after sink %q: tiers %v %v; want every block in G4 only", f.name, tiers, err)
		}
		cur := blockObjects(t, srv)
		var added []string
		for k := range cur {
			if _, ok := prev[k]; !ok {
				added = append(added, k)
			}
		}
		prev = cur
		if len(added) != 1 || !strings.HasPrefix(added[0][strings.LastIndexByte(added[0], '/')+1:], "p") {
			t.Fatalf("sink of %q (%d blocks) added %v to the bucket; want one pack object", f.name, f.blocks(), added)
		}
		packOf[f.name] = added[0]
	}
	status := func() harness.Status {
		t.Helper()
		st, err := d.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	readOK := func(f s3File, what string) {
		t.Helper()
		r := timedRead(30*time.Second, func() ([]byte, error) { return readDirect(filepath.Join(ns, f.name)) })
		if r.hung || r.err != nil {
			t.Fatalf("%s: read of %q: %v (hung %v)", what, f.name, r.err, r.hung)
		}
		if bad := checkPattern(r.data, f.name, f.size); bad != "" {
			t.Fatalf("%s: read of %q: %s", what, f.name, bad)
		}
	}

	before := status()
	readOK(files[0], "packed")
	runs := statCounter(t, status(), "g4_run_reads", "") - statCounter(t, before, "g4_run_reads", "")
	t.Logf("read of a sunk 8 MiB file: %d batched G4 reads", runs)
	if runs < 1 || runs > 2 {
		t.Errorf("read of a sunk 8 MiB file (one pack) made %d batched G4 reads; want 1 (2 if a read raced the first)", runs)
	}

	// A byte of block 12's payload flipped in the pack object.
	flipped := files[1]
	obj := srv.ObjectPath(s3Prefix + "/" + packOf[flipped.name])
	fi, err := os.Stat(obj)
	if err != nil {
		t.Fatal(err)
	}
	flipObjectByte(t, srv, packOf[flipped.name], fi.Size()-(flipped.blocks()-12)*s3BlockSize+777)
	r := timedRead(30*time.Second, func() ([]byte, error) { return readDirect(filepath.Join(ns, flipped.name)) })
	switch {
	case r.hung:
		t.Fatalf("read of %q over a corrupt packed block hangs", flipped.name)
	case r.err == nil:
		t.Fatalf("read of %q returned %d bytes without an error over a corrupt packed block (bytes %s)", flipped.name, len(r.data),
			map[bool]string{true: "happen to be right", false: "WRONG"}[checkPattern(r.data, flipped.name, flipped.size) == ""])
	case !errors.Is(r.err, unix.EIO) && !errors.Is(r.err, fs.ErrNotExist):
		t.Errorf("read of %q over a corrupt packed block: %v; want EIO or ENOENT", flipped.name, r.err)
	}
	if !testenv.Poll(2*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(ns, flipped.name))
		return errors.Is(err, fs.ErrNotExist)
	}) {
		t.Errorf("%q still listed 2 s after its corrupt block was found", flipped.name)
	}
	if crc := statCounter(t, status(), "crc_errors", "") - statCounter(t, before, "crc_errors", ""); crc < 1 {
		t.Errorf("status crc_errors rose by %d after a corrupt packed block was read; want >= 1", crc)
	}

	// The server hung (SIGSTOP), then killed (SIGKILL): EIO within the
	// deadlines, then the file reads again once it answers.
	for _, c := range []struct {
		f          s3File
		what       string
		stop, back func() error
	}{
		{files[2], "hung", srv.Pause, srv.Resume},
		{files[4], "killed", func() error { srv.Stop(); return nil }, srv.Start},
	} {
		if err := c.stop(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		r = timedRead(60*time.Second, func() ([]byte, error) { return readDirect(filepath.Join(ns, c.f.name)) })
		took := time.Since(start)
		if err := c.back(); err != nil {
			t.Fatal(err)
		}
		t.Logf("read of %q with the server %s: %v after %v", c.f.name, c.what, r.err, took.Round(time.Millisecond))
		if r.hung || !errors.Is(r.err, unix.EIO) {
			t.Fatalf("read of %q with the server %s: %v (hung %v); want EIO", c.f.name, c.what, r.err, r.hung)
		}
		var last error
		if !testenv.Poll(30*time.Second, func() bool {
			r := timedRead(30*time.Second, func() ([]byte, error) { return readDirect(filepath.Join(ns, c.f.name)) })
			last = r.err
			return r.err == nil && checkPattern(r.data, c.f.name, c.f.size) == ""
		}) {
			t.Fatalf("%q does not read back after the %s server answers again: %v", c.f.name, c.what, last)
		}
	}

	// Restart: the daemon knows the packs from the listing alone.
	d.Restart()
	readOK(files[3], "after a restart")
	readOK(files[0], "after a restart, read again")
	if strings.Contains(d.Log(), "panic:") {
		t.Fatal("daemon log shows a panic")
	}
}
