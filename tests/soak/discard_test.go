package soak

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/tests/harness"
)

// TestDiscardDurable is the soak's TRIM / WRITE_ZEROES finding as a
// deterministic sequence: write whole export blocks, FLUSH, let write-back
// put them below G2, discard them (TRIM, or WRITE_ZEROES without NO_HOLE,
// which maps to the same discard; WRITE_ZEROES with NO_HOLE for contrast),
// FLUSH, kill -9, restart: an acknowledged FLUSH after the discard must
// leave zeros (ctxmemd documents that a discarded range reads as zeros and
// that flushed state survives kill -9). Runs with CTXMEM_SOAK=1 or
// CTXMEM_E2E=1 (make test; root, /dev/fuse).
func TestDiscardDurable(t *testing.T) {
	bin := reproBinary(t)
	trim := func(cl *nbdClient, off int64, n uint32) error { return cl.Trim(off, n, false) }
	for _, prof := range []string{"tiny", "g4", "small"} {
		for _, tc := range []struct {
			name string
			op   func(cl *nbdClient, off int64, n uint32) error
			idle time.Duration // between the FLUSH and the kill
		}{
			{"trim", trim, 0},
			{"trim-fua", func(cl *nbdClient, off int64, n uint32) error { return cl.Trim(off, n, true) }, 0},
			{"write-zeroes", func(cl *nbdClient, off int64, n uint32) error { return cl.WriteZeroes(off, n, false, false) }, 0},
			{"write-zeroes-nohole", func(cl *nbdClient, off int64, n uint32) error { return cl.WriteZeroes(off, n, false, true) }, 0},
			{"trim-idle-2s", trim, 2 * time.Second},
		} {
			discardCase(t, bin, prof, tc.name, tc.op, tc.idle)
		}
	}
}

func discardCase(t *testing.T, bin, prof, name string, op func(cl *nbdClient, off int64, n uint32) error, idle time.Duration) {
	const blk = 64 << 10 // write unit; the discarded 2 MiB covers whole blocks of every profile
	t.Run(prof+"/"+name, func(t *testing.T) {
		dir, err := os.MkdirTemp("", "soak-discard-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		sock := filepath.Join(dir, "nbd.sock")
		opts := profiles[prof].opts
		opts.LogLevel = "info"
		opts.Extra = append(append([]string(nil), opts.Extra...), "--nats", "none",
			"--nbd", "unix://"+sock, "--nbd-size", strconv.Itoa(exportBytes))
		d := harness.Start(t, bin, opts)
		dial := func() *nbdClient {
			for i := 0; ; i++ {
				cl, err := dialNBD(sock, "default", opTimeout)
				if err == nil {
					return cl
				}
				if i == 100 {
					t.Fatal(err)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		const nblk = 32
		seed := uint64(0xd15c)
		buf := make([]byte, blk)
		cl := dial()
		for b := 0; b < nblk; b++ {
			for i := 0; i < blk/pageSize; i++ {
				sec := b*blk/pageSize + i
				fillPage(buf[i*pageSize:(i+1)*pageSize], magicNBD, 0, 1, uint64(sec), seed)
			}
			if err := cl.WriteAt(buf, int64(b*blk), false); err != nil {
				t.Fatal(err)
			}
		}
		if err := cl.Flush(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // idle clean, G3 records settled
		if err := op(cl, 0, nblk*blk); err != nil {
			t.Fatal(err)
		}
		if err := cl.Flush(); err != nil {
			t.Fatal(err)
		}
		zero := make([]byte, nblk*blk)
		got := make([]byte, nblk*blk)
		if err := cl.ReadAt(got, 0); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, zero) {
			t.Fatal("not zeros right after the discard (daemon running)")
		}
		cl.Close()
		time.Sleep(idle)
		d.Kill9()
		d.StartAgain()
		cl = dial()
		defer cl.Close()
		if err := cl.ReadAt(got, 0); err != nil {
			t.Fatal(err)
		}
		var stale []string
		scratch := make([]byte, pageSize)
		for b := 0; b < nblk; b++ {
			if !bytes.Equal(got[b*blk:(b+1)*blk], zero[:blk]) {
				stale = append(stale, fmt.Sprintf("block %d: first sector %s", b, decodePage(got[b*blk:b*blk+pageSize], scratch)))
			}
		}
		if len(stale) > 0 {
			t.Errorf("%s %s + FLUSH acknowledged, kill -9, restart: %d of %d 64 KiB ranges read pre-discard data, want zeros:\n  %v",
				prof, name, len(stale), nblk, stale)
		}
	})
}

// TestTruncateDurable is the file-side counterpart of TestDiscardDurable
// (issue 11 item 1's pattern, deterministic): write a 260 KiB file, fsync,
// let write-back settle, ftruncate(4096) (which drops blocks 1..3 of 64
// KiB), pwrite 4 KiB at 256 KiB, fsync, kill -9, restart: pages 1..63
// must read zeros (the holes the truncate made), page 64 the new page.
func TestTruncateDurable(t *testing.T) {
	bin := reproBinary(t)
	opts := profiles["tiny"].opts
	opts.LogLevel = "info"
	opts.Extra = append(append([]string(nil), opts.Extra...), "--nats", "none")
	d := harness.Start(t, bin, opts)
	const id, seed, files = 5, 0x7c, 16
	first := fileVer{v: 1, size: 65 * pageSize}
	want := fileVer{v: 2, pages: make([]uint64, 65), size: 65 * pageSize}
	want.pages[0], want.pages[64] = 1, 2
	var fds []*os.File
	for i := 0; i < files; i++ {
		fd, err := os.OpenFile(filepath.Join(d.Namespace(), fmt.Sprintf("t%d", i)), os.O_CREATE|os.O_TRUNC|os.O_RDWR, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer fd.Close()
		if _, err := fd.Write(first.image(id, seed)); err != nil {
			t.Fatal(err)
		}
		if err := fd.Sync(); err != nil {
			t.Fatal(err)
		}
		fds = append(fds, fd)
	}
	time.Sleep(time.Second)
	page := make([]byte, pageSize)
	fillPage(page, magicFile, id, 2, 64, seed)
	for _, fd := range fds {
		if err := fd.Truncate(pageSize); err != nil {
			t.Fatal(err)
		}
		if _, err := fd.WriteAt(page, 64*pageSize); err != nil {
			t.Fatal(err)
		}
		if err := fd.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	d.Kill9()
	for _, fd := range fds {
		fd.Close()
	}
	d.StartAgain()
	for i := 0; i < files; i++ {
		got, err := os.ReadFile(filepath.Join(d.Namespace(), fmt.Sprintf("t%d", i)))
		if err != nil {
			t.Fatalf("file t%d after restart: %v", i, err)
		}
		if w, _, why := matchState(id, seed, got, &want, nil); w == nil {
			t.Errorf("file t%d after fsync'd truncate+pwrite, kill -9, restart: %s; want %s", i, why, want)
		}
	}
}

// reproBinary gates the short reproductions (CTXMEM_SOAK=1, or
// CTXMEM_E2E=1 as make test sets) and returns the ctxmemd binary:
// CTXMEM_E2E_BIN, else one built for the test.
func reproBinary(t *testing.T) string {
	t.Helper()
	if os.Getenv("CTXMEM_SOAK") != "1" && os.Getenv("CTXMEM_E2E") != "1" {
		t.Skip("set CTXMEM_SOAK=1 or CTXMEM_E2E=1 (root, /dev/fuse); make test runs it")
	}
	if bin := os.Getenv("CTXMEM_E2E_BIN"); bin != "" {
		return bin
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bin, err := harness.BuildBinary(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return bin
}
