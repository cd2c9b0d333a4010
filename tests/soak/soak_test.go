// Package soak is the crash soak (`make soak`): it runs the real ctxmemd
// binary with a FUSE mount and an NBD export, drives both with writers
// and verifying readers, kills the daemon with SIGKILL at random points
// (during writes, during fsync, during an NBD FLUSH, during write-back,
// right after start) or stops it with SIGTERM, restarts it on the same
// data directory and verifies every file and every export sector against
// the durability contract:
//
//   - a file whose fsync returned reads back exactly (unless rewritten
//     since); a file not acknowledged may be gone, or hold a complete
//     version (or a clean prefix of one) that was written to it — never a
//     mix, zeros or garbage;
//   - a file of a truncate/rewrite run (pwrite at 256 KiB, ftruncate 4096,
//     pwrite again, on one descriptor) is exactly one state the run went
//     through from its last fsync on — never a mix of two, never zeros
//     where that state has written data;
//   - a file whose unlink returned is absent until it is written again;
//   - an export sector holds the version of the last write acknowledged
//     before an acknowledged FLUSH (or a FUA write), or a later version
//     written to it — never an older one, never a torn sector; TRIM and
//     WRITE_ZEROES are versions that read as zeros.
//
// It runs only with CTXMEM_SOAK=1 (root, /dev/fuse). Knobs (environment):
// CTXMEM_SOAK_CYCLES (default 1000), CTXMEM_SOAK_DURATION (a Go duration;
// stop after it, whichever comes first), CTXMEM_SOAK_SEED, CTXMEM_SOAK_EPOCH
// (cycles per data directory, default 40), CTXMEM_SOAK_PROFILES (comma list
// of tiny,small,g4,roomy — the default — and g3only, dram), CTXMEM_SOAK_KEEP
// (where a failure's data dir, log and report are kept; default
// /var/tmp/ctxmem-soak), CTXMEM_SOAK_SNAPSHOT=1 (also keep the data dir as
// it was before the failing start), CTXMEM_SOAK_NBD=0 (files only),
// CTXMEM_SOAK_DISCARD=0 (no NBD TRIM, no WRITE_ZEROES without NO_HOLE),
// CTXMEM_E2E_BIN (a prebuilt binary).
package soak

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/tests/harness"
)

// profile is one daemon configuration; small tiers keep write-back,
// eviction and G3 reclaim busy.
type profile struct {
	name    string
	opts    harness.Options
	maxFile int // largest file version, bytes
	// mayFill: no G4, so the tiers can fill up: ENOSPC from a write,
	// fsync, NBD WRITE or FLUSH is a legitimate answer (the write is then
	// unacknowledged), a writer that waits forever is not.
	mayFill bool
	// volatile: no tier below G2 at all, so nothing survives a restart;
	// only "never wrong bytes" and liveness are checked.
	volatile bool
	// filesOnly: no NBD export (the daemon refuses exports on G3 without
	// G4: see config validation).
	filesOnly bool
}

var profiles = map[string]profile{
	"tiny": {"tiny", harness.Options{DRAM: "8MiB", G3Size: "48MiB", BlockSize: "64KiB",
		Extra: []string{"--g3-segment-size", "4MiB"}}, 256 << 10, false, false, false},
	"small": {"small", harness.Options{DRAM: "64MiB", G3Size: "256MiB",
		Extra: []string{"--g3-segment-size", "16MiB"}}, 512 << 10, false, false, false},
	"g4":    {"g4", harness.Options{DRAM: "16MiB", G3Size: "0", BlockSize: "128KiB"}, 384 << 10, false, false, false},
	"roomy": {"roomy", harness.Options{DRAM: "256MiB", G3Size: "1GiB"}, 1 << 20, false, false, false},
	// Not in the default rotation (select with CTXMEM_SOAK_PROFILES):
	// G3 alone, smaller than what the soak keeps live plus the
	// overwritten garbage, so G3 fills and cannot reclaim.
	"g3only": {"g3only", harness.Options{DRAM: "8MiB", G3Size: "32MiB", BlockSize: "64KiB", G4: "none",
		Extra: []string{"--g3-segment-size", "4MiB"}}, 256 << 10, true, false, true},
	// DRAM only.
	"dram": {"dram", harness.Options{DRAM: "32MiB", G3Size: "0", G4: "none"}, 256 << 10, true, true, false},
}

const (
	nFiles       = 32
	nFileWriters = 3
	nNBDWriters  = 2
	exportBytes  = 16 << 20
	sectors      = exportBytes / pageSize
	opTimeout    = 30 * time.Second // a worker op (whole file write) or a verification read
	mountBound   = 5 * time.Second  // statfs + readdir after a start
	drainBound   = 15 * time.Second // workers must return this soon after a kill
)

// failure is what stops the soak: kind (WRONG BYTES, ACKED LOST, HANG,
// I/O ERROR, ...) and the details.
type failure struct {
	kind, detail string
}

type soak struct {
	t       *testing.T
	bin     string
	seed    uint64
	rng     *rand.Rand
	keep    string
	prof    profile
	d       *harness.Daemon
	sockDir string
	sock    string
	files   []*fileState
	exp     *exportModel
	version atomic.Uint64
	st      stats
	cycle   int
	kept    bool
	// snapshot (CTXMEM_SOAK_SNAPSHOT=1): copy the data dir before every
	// restart; preCycle is the cycle whose start the copy precedes.
	snapshot bool
	preCycle int
	// noNBD (CTXMEM_SOAK_NBD=0, or a filesOnly profile): files only; the
	// export is served but not written or verified (filesOnly: not
	// served). envNoNBD is the environment's choice.
	noNBD, envNoNBD bool
	// noDiscard (CTXMEM_SOAK_DISCARD=0): NBD writers send no TRIM and no
	// WRITE_ZEROES without NO_HOLE (the requests that discard blocks).
	noDiscard bool
	// cycleFirstVersion[c-1] is the first version number cycle c used;
	// cycleLog says how each cycle of the current epoch ended.
	cycleFirstVersion []uint64
	cycleLog          []string
	epoch             int
	killed            atomic.Bool
	mu                sync.Mutex // guards fails and the live counters below
	fails             []failure
	maxMount          time.Duration
	// live counters, updated by workers
	liveReads, filesWritten, fsyncs, nbdWrites, nbdFlushes, bytesWritten, enospc, lostLive atomic.Int64
	// workload extensions
	nbdTrims, nbdZeroes, truncRuns, truncRounds, punchRefused, punchDone, unlinks, recreates, heldReads, directWrites atomic.Int64
}

func envInt(name string, def int) int {
	if v := os.Getenv(name); v != "" {
		n, err := strconv.Atoi(v)
		if err == nil {
			return n
		}
	}
	return def
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// newEpoch starts a daemon on a fresh data directory with profile p.
func (s *soak) newEpoch(p profile) {
	s.prof = p
	dir, err := os.MkdirTemp("", "soak-nbd-")
	if err != nil {
		s.t.Fatal(err)
	}
	s.sockDir, s.sock = dir, filepath.Join(dir, "nbd.sock")
	opts := p.opts
	opts.LogLevel = "info"
	opts.MountTimeout = 30 * time.Second
	s.noNBD = s.envNoNBD || p.filesOnly
	opts.Extra = append(append([]string(nil), opts.Extra...), "--nats", "none")
	if !p.filesOnly {
		opts.Extra = append(opts.Extra, "--nbd", "unix://"+s.sock, "--nbd-size", strconv.Itoa(exportBytes))
	}
	s.files = make([]*fileState, nFiles)
	for i := range s.files {
		s.files[i] = &fileState{id: uint64(s.epoch)<<32 | uint64(i)}
	}
	s.exp = newExportModel(sectors)
	s.cycleLog = nil
	t0 := time.Now()
	s.d = harness.Start(s.t, s.bin, opts)
	// Runs before the harness's cleanup (LIFO), which removes the root:
	// a start that failed (t.Fatal inside the harness) keeps its evidence.
	d := s.d
	s.t.Cleanup(func() {
		if s.t.Failed() && s.d == d {
			s.keepEvidence("START", "the daemon did not come up (see the test log)")
		}
	})
	s.t.Logf("soak: epoch %d: profile %s, root %s, first start %s: ctxmemd %s", s.epoch, p.name,
		s.d.Root, time.Since(t0).Round(time.Millisecond), strings.Join(s.d.Args(), " "))
	s.checkResponsive()
}

// endEpoch verifies the epoch's last state, stops the daemon with SIGTERM
// (which must unmount), and removes the data directory.
func (s *soak) endEpoch() {
	if !s.d.Running() {
		s.startAgain()
	}
	s.verify()
	if err := s.stopGraceful(); err != nil {
		s.fail("UNMOUNT", err.Error())
	}
	os.RemoveAll(s.d.Root)
	os.RemoveAll(s.sockDir)
	s.d = nil
}

func (s *soak) startAgain() {
	s.killed.Store(false)
	if s.snapshot {
		// The data dir exactly as the kill left it: a failure found by this
		// start can be replayed by starting ctxmemd on the copy.
		pre := filepath.Join(s.keep, "pre-restart")
		_ = os.RemoveAll(pre)
		_ = os.MkdirAll(s.keep, 0o755)
		if out, err := exec.Command("cp", "-a", "--reflink=auto", s.d.DataDir, pre).CombinedOutput(); err != nil {
			s.t.Fatalf("snapshot %s: %v: %s", s.d.DataDir, err, out)
		}
		s.preCycle = s.cycle
	}
	s.d.StartAgain()
	s.checkResponsive()
}

// stopGraceful sends SIGTERM: the daemon must exit within the harness's
// bound and leave no mount behind.
func (s *soak) stopGraceful() error {
	done := make(chan error, 1)
	go func() { done <- s.d.Stop() }()
	select {
	case err := <-done:
		return err
	case <-time.After(45 * time.Second):
		return errors.New("SIGTERM stop did not return within 45 s")
	}
}

// timed runs fn with a bound and returns its error; a hang is a failure
// (the goroutine is left behind until the daemon is killed, which aborts
// its FUSE requests). fn must not call s.fail (not the test goroutine).
func (s *soak) timed(what string, bound time.Duration, fn func() error) error {
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(bound):
		s.fail("HANG", fmt.Sprintf("%s did not return within %v", what, bound))
		return nil // not reached
	}
}

// checkResponsive: after every start the mount answers statfs and a
// listing, and the NBD socket accepts a handshake, within mountBound.
func (s *soak) checkResponsive() {
	t0 := time.Now()
	if err := s.timed("statfs + readdir of the namespace after start", mountBound, func() error {
		var st syscall.Statfs_t
		if err := syscall.Statfs(s.d.Namespace(), &st); err != nil {
			return fmt.Errorf("statfs: %w", err)
		}
		_, err := os.ReadDir(s.d.Namespace())
		return err
	}); err != nil {
		s.fail("MOUNT", fmt.Sprintf("%s after start: %v", s.d.Namespace(), err))
	}
	if s.prof.filesOnly {
		return
	}
	var cl *nbdClient
	var err error
	for i := 0; i < 100; i++ {
		if cl, err = dialNBD(s.sock, "default", mountBound); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		s.fail("NBD", fmt.Sprintf("NBD export not served after start: %v", err))
	}
	if cl.size != exportBytes {
		s.fail("NBD", fmt.Sprintf("export size %d, want %d", cl.size, exportBytes))
	}
	cl.Close()
	if w := time.Since(t0); w > s.maxMount {
		s.maxMount = w
	}
}

// fail stops the soak: it keeps the evidence (goroutine dump of the daemon
// for hangs, the data directory as the daemon left it, the log, a report)
// under s.keep and fails the test.
func (s *soak) fail(kind, detail string) {
	msg := fmt.Sprintf("SOAK FAILURE %s in cycle %d (epoch %d, profile %s, seed %#x):\n%s", kind, s.cycle, s.epoch, s.prof.name, s.seed, detail)
	msg += s.keepEvidence(kind, msg)
	if n := len(s.cycleLog); n > 0 {
		msg += "\nlast cycles on this data dir:\n  " + strings.Join(s.cycleLog[max(0, n-5):], "\n  ")
	}
	s.t.Fatalf("%s\n%s", msg, s.report())
}

// keepEvidence copies the data directory and log of a failed cycle to
// s.keep, once, and returns a note saying where.
func (s *soak) keepEvidence(kind, msg string) (note string) {
	if s.kept {
		return ""
	}
	s.kept = true
	dir := filepath.Join(s.keep, fmt.Sprintf("fail-%s-cycle%d", time.Now().Format("20060102-150405"), s.cycle))
	if s.d != nil {
		if s.d.Running() {
			if kind == "HANG" { // SIGQUIT: the Go runtime prints every goroutine to the log
				_ = syscall.Kill(s.d.PID(), syscall.SIGQUIT)
				time.Sleep(2 * time.Second)
			}
			if s.d.Running() {
				s.killed.Store(true)
				s.d.Kill9()
			}
		}
		if err := os.MkdirAll(dir, 0o755); err == nil {
			_ = exec.Command("cp", "-a", s.d.DataDir, filepath.Join(dir, "data")).Run()
			_ = exec.Command("cp", "-a", s.d.LogPath, filepath.Join(dir, "daemon.log")).Run()
			note = fmt.Sprintf("\nkept: %s (data dir after the failure, daemon.log; daemon args: %s)", dir, strings.Join(s.d.Args(), " "))
			note += "\nreproduce: CTXMEM_SOAK=1 CTXMEM_SOAK_SEED=" + fmt.Sprintf("%#x", s.seed) + " make soak (timing makes a replay approximate)"
			if s.snapshot && s.preCycle == s.cycle {
				if os.Rename(filepath.Join(s.keep, "pre-restart"), filepath.Join(dir, "data-before-restart")) == nil {
					note += fmt.Sprintf("\ndata-before-restart: the data dir as the kill before this cycle's start left it; replay the start with\n  %s %s",
						s.bin, strings.Join(replayArgs(s.d.Args(), s.d.DataDir, filepath.Join(dir, "data-before-restart")), " "))
				}
			}
			_ = os.WriteFile(filepath.Join(dir, "REPORT"), []byte(msg+note+"\n\n"+s.report()+"\n\nthis data dir's cycles:\n"+
				strings.Join(s.cycleLog, "\n")+"\n"), 0o644)
		}
	}
	return note
}

func (s *soak) summary() string {
	return fmt.Sprintf("wrong bytes %d, acked bytes verified %s, files checked %d (lost-allowed %d, prefix/empty-allowed %d), sectors checked %d",
		s.st.WrongBytes, mib(s.st.AckedBytes), s.st.FilesChecked, s.st.FilesLostAllow, s.st.FilesTruncAllow, s.st.SectorsChecked)
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

func (s *soak) report() string {
	st := s.st
	return fmt.Sprintf(`cycles                       %d
kills/stops by point         %v
bytes verified after restart %s (acknowledged: %s)
files checked                %d: acked version exact %d, newer unacked version %d, lost-allowed %d (of them acknowledged, no-G4 profile: %d), prefix/empty-allowed %d, temp files %d, EIO then gone %d
  of them at a truncate/rewrite state %d, unlinked and absent %d
export sectors checked       %d: at durable version %d, newer unflushed %d, older-than-unflushed-ack (allowed) %d; zeros of a TRIM/WRITE_ZEROES %d
live verified reads          %d (held descriptors of unlinked files %d)
written                      %d files (%d fsync'd, %d O_DIRECT), %d NBD writes, %d NBD flushes, %d NBD TRIMs, %d NBD WRITE_ZEROES, %s; ENOSPC answers %d; files lost while running (no G4) %d
truncate/rewrite             %d runs closed, %d rounds; fallocate(PUNCH_HOLE) refused %d, done %d
unlink                       %d unlinks while held open, %d recreated
slowest mount+NBD answer     %s
WRONG BYTES                  %d`,
		st.Cycles, st.Kills, mib(st.BytesVerified), mib(st.AckedBytes), st.FilesChecked, st.FilesAcked, st.FilesNewer,
		st.FilesLostAllow, st.FilesAckedCapLost, st.FilesTruncAllow, st.TmpChecked, st.FilesEIOGone, st.FilesTruncState, st.FilesUnlinkedGone,
		st.SectorsChecked, st.SectorsDurable, st.SectorsNewer, st.SectorsLostOK, st.SectorsZeroed,
		s.liveReads.Load(), s.heldReads.Load(), s.filesWritten.Load(), s.fsyncs.Load(), s.directWrites.Load(), s.nbdWrites.Load(), s.nbdFlushes.Load(),
		s.nbdTrims.Load(), s.nbdZeroes.Load(), mib(s.bytesWritten.Load()), s.enospc.Load(), s.lostLive.Load(),
		s.truncRuns.Load(), s.truncRounds.Load(), s.punchRefused.Load(), s.punchDone.Load(), s.unlinks.Load(), s.recreates.Load(),
		s.maxMount.Round(time.Millisecond), st.WrongBytes)
}

// replayArgs are the daemon's arguments with the data dir replaced (and
// the mount, admin socket and NBD socket moved next to it).
func replayArgs(args []string, from, to string) []string {
	out := make([]string, len(args))
	base := filepath.Dir(to)
	for i, a := range args {
		switch {
		case a == from:
			a = to
		case i > 0 && args[i-1] == "--mount":
			a = filepath.Join(base, "mnt")
		case i > 0 && args[i-1] == "--admin":
			a = filepath.Join(base, "admin.sock")
		case i > 0 && args[i-1] == "--config":
			a = os.DevNull
		case strings.HasPrefix(a, "unix://"):
			a = "unix://" + filepath.Join(base, "nbd.sock")
		}
		out[i] = a
	}
	return out
}
