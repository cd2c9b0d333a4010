package tests

import (
	"bytes"
	"context"
	"encoding/json"
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
)

// TestE2EHungG3 is a new user's run: G3 on a directory whose device stops
// answering (here a second daemon's mount, frozen with SIGSTOP: its reads
// never return, as a hung NVMe's). Before, a read of a file only G3 held
// waited for as long as the device did (783 s in that run), status stopped
// answering and SIGTERM waited too. Now each such read fails with EIO
// after local_read_timeout, G3 goes down after five, status answers and
// says so, the daemon stops on SIGTERM, and once the device answers again
// the files read their bytes.
func TestE2EHungG3(t *testing.T) {
	dev, d := startOnFreezableG3(t, harness.Options{DRAM: "16MiB", G3Size: "48MiB", G4: "none",
		Extra: []string{"--g3-segment-size", "4MiB", "--local-read-timeout", "500ms"}})
	bin := needE2E(t)
	ns := d.Namespace()
	const files, size = 4, 4 << 20
	for i := range files {
		p := filepath.Join(ns, fmt.Sprintf("k%d", i))
		if err := os.WriteFile(p, boundedPattern(500+i, size), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(bin, "evict", "--admin", d.Admin, p).CombinedOutput(); err != nil {
			t.Fatalf("evict %s: %v: %s", p, err, out)
		}
		if v := tierOf(t, p); !allIn(v, "G3") {
			t.Fatalf("after evict: k%d is in %q, want all G3", i, v)
		}
	}
	// The device's kernel page cache may hold G3's segments (O_DIRECT is
	// not always honoured through FUSE): dropped, so G3's reads reach it.
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0o200); err != nil {
		t.Fatalf("drop caches (root): %v", err)
	}
	dev.freeze(t)
	// Reads of G3-only files: EIO, each within its deadline (five of them
	// take G3 down; later ones fail at once).
	for i := range 6 {
		p := filepath.Join(ns, fmt.Sprintf("k%d", i%files))
		done := make(chan error, 1)
		go func() { _, err := os.ReadFile(p); done <- err }()
		select {
		case err := <-done:
			if !errors.Is(err, syscall.EIO) {
				t.Fatalf("read %d of %s from a hung G3: %v; want EIO", i, p, err)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("read %d of %s from a hung G3 did not return within 60 s", i, p)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	st, err := d.Status(ctx)
	cancel()
	if err != nil {
		t.Fatalf("status with G3 hung: %v", err)
	}
	if !strings.Contains(string(st.Raw), `"local_reads_abandoned"`) {
		t.Errorf("status --json has no local_reads_abandoned counter")
	}
	g3, _ := st.Tier("G3")
	if !g3.Degraded {
		t.Errorf("G3 %+v after reads that did not return; want it down", g3)
	}
	dev.resume(t)
	for i := range files {
		p := filepath.Join(ns, fmt.Sprintf("k%d", i))
		testenv.Eventually(t, 30*time.Second, func() bool {
			got, err := os.ReadFile(p)
			return err == nil && bytes.Equal(got, boundedPattern(500+i, size))
		}, "k%d reading its bytes once the device answers", i)
	}
}

// TestE2EHungG3Writes: G3 on a device that stops answering (a second
// daemon's mount frozen with SIGSTOP) while files are written and fsynced.
// Before, every write-back put into it waited for the device, G3 never
// went down, and each write or fsync waited write_timeout (30 s) and
// failed with EIO, one after another (12 files took 6 minutes, all EIO).
// Now each put fails after local_write_timeout, five take G3 down, and
// write-back goes to G4: every write and fsync returns in seconds, status
// says G3 is down with local_writes_abandoned counted, and every file
// reads its own bytes, before and after the device answers again. The
// blocks whose puts are still in flight in the device are written back
// to G4 anyway, their G3 copies recorded stale (G4-wins), so every fsync
// returns; a build before that kept them dirty in G2 and failed the
// first files' fsync with EIO until the device answered, which the test
// still allows.
func TestE2EHungG3Writes(t *testing.T) {
	dev, d := startOnFreezableG3(t, harness.Options{DRAM: "16MiB", G3Size: "48MiB",
		Extra: []string{"--g3-segment-size", "4MiB", "--local-write-timeout", "500ms"}})
	ns := d.Namespace()
	dev.freeze(t)
	const files, size = 12, 4 << 20
	start := time.Now()
	var fenced []int
	var slowest time.Duration
	for i := range files {
		p := filepath.Join(ns, fmt.Sprintf("w%d", i))
		done := make(chan error, 1)
		go func() {
			f, err := os.Create(p)
			if err != nil {
				done <- err
				return
			}
			_, err = f.Write(boundedPattern(700+i, size))
			if err == nil {
				err = f.Sync()
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			done <- err
		}()
		t0 := time.Now()
		select {
		case err := <-done:
			switch {
			case err == nil:
			case errors.Is(err, syscall.EIO) && i < 2:
				// Its blocks' puts are still in flight in the device:
				// fenced, kept dirty in G2, and its fsync fails at once.
				fenced = append(fenced, i)
			default:
				t.Fatalf("write and fsync of w%d with G3 hung and G4 up: %v", i, err)
			}
			slowest = max(slowest, time.Since(t0))
		case <-time.After(60 * time.Second):
			t.Fatalf("write and fsync of w%d with G3 hung did not return within 60 s", i)
		}
	}
	t.Logf("%d files of %d MiB written and fsynced with G3 hung in %v (slowest %v); fsync failed (EIO) for %v",
		files, size>>20, time.Since(start).Round(time.Millisecond), slowest.Round(time.Millisecond), fenced)
	if slowest > 10*time.Second {
		t.Errorf("a write and fsync took %v with G3 hung; want well under write_timeout (30 s)", slowest)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	st, err := d.Status(ctx)
	cancel()
	if err != nil {
		t.Fatalf("status with G3 hung: %v", err)
	}
	var abandoned int64
	if err := json.Unmarshal(st.Stats["local_writes_abandoned"], &abandoned); err != nil || abandoned < 5 {
		t.Errorf("local_writes_abandoned = %d (%v); want at least 5", abandoned, err)
	}
	if g3, _ := st.Tier("G3"); !g3.Degraded {
		t.Errorf("G3 %+v after puts that did not return; want it down", g3)
	}
	check := func(when string) {
		for i := range files {
			p := filepath.Join(ns, fmt.Sprintf("w%d", i))
			got, err := os.ReadFile(p)
			if err != nil || !bytes.Equal(got, boundedPattern(700+i, size)) {
				t.Fatalf("%s: w%d: %d bytes, %v; want its own %d bytes", when, i, len(got), err, size)
			}
		}
	}
	check("with G3 hung")
	dev.resume(t)
	testenv.Eventually(t, 30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := d.Status(ctx)
		g3, _ := st.Tier("G3")
		return err == nil && !g3.Degraded
	}, "G3 up again once the device answers")
	for _, i := range fenced { // their late puts returned: fsync works again
		p := filepath.Join(ns, fmt.Sprintf("w%d", i))
		testenv.Eventually(t, 30*time.Second, func() bool {
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				return false
			}
			defer f.Close()
			return f.Sync() == nil
		}, "fsync of w%d once the device answers", i)
	}
	// Rewritten files go through G3 again, past the late puts' copies.
	for i := range files / 2 {
		p := filepath.Join(ns, fmt.Sprintf("w%d", i))
		if err := os.WriteFile(p, boundedPattern(700+i, size), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	check("after the device answered")
}

// freezableDevice is a daemon whose mount stands in for a device that can
// hang: freeze stops the daemon (SIGSTOP), so every call into its mount
// waits, as a hung NVMe's pread and pwrite do; resume lets it go on.
type freezableDevice struct {
	*harness.Daemon
	frozen bool
}

func (v *freezableDevice) freeze(t *testing.T) {
	t.Helper()
	if err := v.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	v.frozen = true
}

func (v *freezableDevice) resume(t *testing.T) {
	t.Helper()
	if err := v.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	v.frozen = false
}

// startOnFreezableG3 starts a daemon with opts whose G3 directory is on a
// freezableDevice (a second daemon's mount, with passthrough off, so that
// every read of its files is a request to it: with passthrough the kernel
// reads its memory files without asking it). The device is never left
// frozen: its cleanup, which runs before the daemons', resumes it.
func startOnFreezableG3(t *testing.T, opts harness.Options) (*freezableDevice, *harness.Daemon) {
	t.Helper()
	bin := needE2E(t)
	dev := startFreezableDevice(t, bin)
	g3dir := filepath.Join(dev.Namespace(), "g3")
	if err := os.Mkdir(g3dir, 0o755); err != nil {
		t.Fatal(err)
	}
	opts.Extra = append([]string{"--g3-dir", g3dir}, opts.Extra...)
	d := harness.Start(t, bin, opts)
	dev.resumeAtCleanup(t)
	return dev, d
}

// startFreezableDevice starts the daemon whose mount is a freezableDevice
// (passthrough off: every read of its files is a request to it).
func startFreezableDevice(t *testing.T, bin string) *freezableDevice {
	t.Helper()
	return &freezableDevice{Daemon: harness.Start(t, bin, harness.Options{DRAM: "256MiB", G3Size: "0", G4: "none", Extra: []string{"--passthrough=false"}})}
}

// resumeAtCleanup resumes the device at cleanup if it is left frozen.
// Call it after starting whatever uses the device: cleanups run last
// first, so this one then runs before theirs, which would wait on it.
func (v *freezableDevice) resumeAtCleanup(t *testing.T) {
	t.Cleanup(func() {
		if v.frozen {
			_ = v.Signal(syscall.SIGCONT)
		}
	})
}

// TestE2EHungG3RewriteAndStop: a file written back to G3 is rewritten in
// place (no truncation) after G3's device stopped answering and G3 went
// down, then the daemon is stopped with SIGTERM, with calls still stuck in
// the device. Before, the old G3 copy's delete went into the down device
// for each block (local_write_timeout each, and the object stayed
// unrecorded until one worked): the fsync waited write_timeout and failed
// with EIO; and SIGTERM never finished, since closing G3 waited for the
// calls stuck in it. Now the fsync returns (the rewrite is in G4, the old
// G3 copies recorded G4-wins), SIGTERM ends (G3 is left open, as after a
// crash), and after a restart with the device back the file reads the
// rewrite, never the old bytes.
func TestE2EHungG3RewriteAndStop(t *testing.T) {
	dev, d := startOnFreezableG3(t, harness.Options{DRAM: "32MiB", G3Size: "48MiB",
		Extra: []string{"--g3-segment-size", "4MiB", "--local-write-timeout", "500ms", "--local-read-timeout", "500ms"}})
	ns := d.Namespace()
	const size = 2 << 20
	p := filepath.Join(ns, "r0")
	v1, v2 := boundedPattern(900, size), boundedPattern(901, size)
	if err := os.WriteFile(p, v1, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(d.Binary(), "evict", "--admin", d.Admin, p).CombinedOutput(); err != nil {
		t.Fatalf("evict %s: %v: %s", p, err, out)
	}
	if v := tierOf(t, p); !allIn(v, "G3") {
		t.Fatalf("r0 after evict is in %q, want all G3", v)
	}
	dev.freeze(t)
	// Other files' write-back takes G3 down (their puts stay stuck in it).
	testenv.Eventually(t, 60*time.Second, func() bool {
		q := filepath.Join(ns, fmt.Sprintf("w%d", time.Now().UnixNano()))
		_ = os.WriteFile(q, boundedPattern(902, 1<<20), 0o644)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := d.Status(ctx)
		g3, _ := st.Tier("G3")
		return err == nil && g3.Degraded
	}, "G3 degraded after puts into its hung device")
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		f, err := os.OpenFile(p, os.O_WRONLY, 0) // in place: no O_TRUNC, the same keys
		if err != nil {
			done <- err
			return
		}
		defer f.Close()
		if _, err := f.WriteAt(v2, 0); err != nil {
			done <- err
			return
		}
		done <- f.Sync()
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("rewrite and fsync of r0 with G3 down: %v after %v", err, time.Since(start))
		}
	case <-time.After(60 * time.Second):
		t.Fatal("rewrite and fsync of r0 with G3 down did not return within 60 s")
	}
	t.Logf("r0 rewritten in place and fsynced with G3 down in %v", time.Since(start).Round(time.Millisecond))
	if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, v2) {
		t.Fatalf("r0 after the rewrite: %v, rewrite %v", err, bytes.Equal(got, v2))
	}
	// SIGTERM: the daemon does all its stop (unmount, final write-back,
	// metadata) within its deadlines and says so. Its process exit may
	// wait for the device still: a thread blocked in a hung device's I/O
	// cannot be interrupted, not even by SIGKILL.
	start = time.Now()
	if err := d.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() bool {
		return strings.Contains(d.Log(), `msg=stopped`)
	}, "the daemon's stop finishing with G3 hung")
	t.Logf("SIGTERM with G3 hung: stopped in %v", time.Since(start).Round(time.Millisecond))
	if !strings.Contains(d.Log(), "G3 left open at the stop") {
		t.Errorf("the log does not say G3 was left open at the stop")
	}
	if m, err := harness.IsMounted(d.Mount); err != nil || m {
		t.Errorf("%s still mounted after the stop (%v)", d.Mount, err)
	}
	dev.resume(t)
	if err := d.Stop(); err != nil && strings.Contains(err.Error(), "did not exit") {
		t.Fatalf("%v; log:\n%s", err, tailString(d.Log(), 3000))
	}
	d.StartAgain()
	got, err := os.ReadFile(p)
	if err != nil || !bytes.Equal(got, v2) {
		t.Fatalf("r0 after a restart: %v, %d bytes, the rewrite %v, the old version %v", err, len(got), bytes.Equal(got, v2), bytes.Equal(got, v1))
	}
}

// TestE2EHungG3Truncate: truncates while G3's device hangs (a breaker's
// finding). A truncate to 1 byte of a file whose blocks only G3 holds
// must zero the tail of its first block, which it cannot read: it fails
// with EIO and changes nothing (before, it freed the other blocks first:
// the file kept its size and read zeros where they were, also after a
// restart). A truncate of a file held in DRAM to a whole block fsyncs at
// once (before: 30 s, then EIO). After a restart with the device back,
// each file reads as its last successful change left it.
func TestE2EHungG3Truncate(t *testing.T) {
	dev, d := startOnFreezableG3(t, harness.Options{DRAM: "32MiB", G3Size: "48MiB",
		Extra: []string{"--g3-segment-size", "4MiB", "--local-write-timeout", "500ms", "--local-read-timeout", "500ms"}})
	ns := d.Namespace()
	const size = 1 << 20
	cold, warm := filepath.Join(ns, "cold"), filepath.Join(ns, "warm")
	coldV, warmV := boundedPattern(910, size), boundedPattern(911, size)
	for _, f := range []struct {
		p string
		v []byte
	}{{cold, coldV}, {warm, warmV}} {
		if err := os.WriteFile(f.p, f.v, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command(d.Binary(), "evict", "--admin", d.Admin, cold).CombinedOutput(); err != nil {
		t.Fatalf("evict %s: %v: %s", cold, err, out)
	}
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0o200); err != nil {
		t.Fatalf("drop caches (root): %v", err)
	}
	dev.freeze(t)
	within := func(what string, f func() error) error {
		t.Helper()
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- f() }()
		select {
		case err := <-done:
			t.Logf("%s: %v after %v", what, err, time.Since(start).Round(time.Millisecond))
			return err
		case <-time.After(20 * time.Second):
			t.Fatalf("%s with G3 hung did not return within 20 s", what)
			return nil
		}
	}
	if err := within("truncate cold to 1 byte", func() error { return os.Truncate(cold, 1) }); err == nil {
		t.Log("the truncate succeeded (its first block was readable after all)")
		coldV = coldV[:1]
	}
	warmBS := int64(256 << 10) // the default block size: a whole block, no tail to read
	err := within("truncate warm to a block and fsync", func() error {
		f, err := os.OpenFile(warm, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := f.Truncate(warmBS); err != nil {
			return err
		}
		return f.Sync()
	})
	if err != nil {
		t.Fatalf("truncate and fsync of a file in DRAM with G3 hung: %v", err)
	}
	warmV = warmV[:warmBS]
	dev.resume(t)
	check := func(when string) {
		t.Helper()
		for _, f := range []struct {
			p string
			v []byte
		}{{cold, coldV}, {warm, warmV}} {
			var got []byte
			testenv.Eventually(t, 30*time.Second, func() bool {
				var err error
				got, err = os.ReadFile(f.p)
				return err == nil
			}, "%s: %s readable", when, f.p)
			if !bytes.Equal(got, f.v) {
				t.Fatalf("%s: %s reads %d bytes, not its last successful change (%d bytes)", when, filepath.Base(f.p), len(got), len(f.v))
			}
		}
	}
	check("device back")
	d.Restart()
	check("after a restart")
}
