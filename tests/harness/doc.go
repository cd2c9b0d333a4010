// Package harness runs the real ctxmemd binary for end-to-end tests: it
// builds the binary once (BuildBinary), starts `ctxmemd run` on a private
// mount point and data directory (Start), waits until the FUSE mount is live,
// and offers the lifecycle a test needs — Stop (SIGTERM, the mount must be
// gone), Kill9 (SIGKILL, the stale mount stays for the next start to
// recover), Restart — plus Status (`ctxmemd status --json`) and Replay
// (`ctxmemd replay --json`).
//
// Every Daemon registers a t.Cleanup that kills a still-running process and
// always unmounts (umount2 MNT_DETACH, then fusermount3 -uz), failing the
// test if a mount would leak; when the test failed, the daemon's log (stdout
// and stderr of every start) is printed.
package harness
