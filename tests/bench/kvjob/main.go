// Command kvjob measures the KV-cache object pattern fio cannot express
// directly: create+write+close N files of S bytes, then open+read+close
// them in random order, checking every byte. It prints one JSON object:
// per-file latency percentiles (µs), files/s and MiB/s of each phase.
//
// With -dropped and -warm it adds two more read passes (each in its own
// random order): "read_dropped" after posix_fadvise(POSIX_FADV_DONTNEED) of
// every file (the page cache of that file only: on tmpfs this is a no-op,
// the pages are the file; on a FUSE mount it empties the mount's cache, so
// every read goes to the daemon — or, with passthrough, to the backing
// file), and "read_warm" right after it, every page cached. The fraction of
// pages still resident after the fadvise (mincore) is reported as
// resident_after_drop.
//
// The job itself is internal/kvbench (also run by `ctxmemd bench`); this
// program is its wrapper for tests/bench/fio_bench.sh.
//
//	go run ./tests/bench/kvjob -dir /mnt/ctxmem/default/bench -files 2000 -size 256KiB
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/ctxmem/ctxmemd/config"
	"github.com/ctxmem/ctxmemd/internal/kvbench"
)

func main() {
	dir := flag.String("dir", "", "directory to create the files in (created; emptied of its files afterwards)")
	files := flag.Int("files", 2000, "number of files")
	sizeS := flag.String("size", "256KiB", "bytes per file (suffixes KiB, MiB)")
	seed := flag.Int64("seed", 1, "seed of the read order")
	keep := flag.Bool("keep", false, "keep the files")
	dropped := flag.Bool("dropped", false, "add a read pass after posix_fadvise(DONTNEED) of every file")
	warm := flag.Bool("warm", false, "add a read pass with the page cache warm (after the others)")
	flag.Parse()
	size, err := config.ParseSize(*sizeS)
	if err == nil && (size < 1 || size > kvbench.MaxSize) {
		err = fmt.Errorf("size %q: want 1 byte to 1 GiB", *sizeS)
	}
	if err != nil || *dir == "" || *files < 1 {
		fmt.Fprintln(os.Stderr, "kvjob: need -dir, -files >= 1 and a valid -size:", err)
		os.Exit(2)
	}
	// Interrupted, the job stops and removes its files (unless -keep).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	res, err := kvbench.Run(ctx, kvbench.Options{Dir: *dir, Files: *files, Size: size, Seed: *seed,
		Keep: *keep, Dropped: *dropped, Warm: *warm})
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "kvjob:", err)
		os.Exit(1)
	}
	json.NewEncoder(os.Stdout).Encode(res)
}
