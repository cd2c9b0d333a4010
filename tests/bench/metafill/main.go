// Command metafill creates many small files with parallel writers, the way a
// KV-cache engine fills a namespace: file i (0 ≤ i < -files) is
// DIR/dNNNNN/fNNNNNNNN with -per-dir files per directory, except the first
// -big files, which all go into one directory DIR/big (the `ls -f` case of
// the metadata benchmark, tests/bench/meta_bench.sh). Each file is
// create+write -size bytes+close. -from and -to select a slice of the index
// range, so the benchmark can interleave slices on two targets; every slice
// prints one line: "files N seconds S files_per_s R".
//
//	go run ./tests/bench/metafill -dir /mnt/ctxmem/default/meta -files 1000000 -big 500000 -from 0 -to 100000
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	dir := flag.String("dir", "", "target directory (created when missing)")
	files := flag.Int("files", 1000000, "files in the whole layout")
	big := flag.Int("big", 0, "how many of them (the first) go into the one directory DIR/big")
	perDir := flag.Int("per-dir", 1000, "files per directory outside DIR/big")
	size := flag.Int("size", 4096, "bytes per file")
	workers := flag.Int("workers", 8, "parallel writers")
	from := flag.Int("from", 0, "first file index of this run")
	to := flag.Int("to", -1, "end of the index range of this run (exclusive; -1 = -files)")
	flag.Parse()
	if *dir == "" || *files < 1 || *big < 0 || *big > *files || *perDir < 1 || *size < 0 || *workers < 1 {
		fmt.Fprintln(os.Stderr, "metafill: bad flags")
		os.Exit(2)
	}
	if *to < 0 || *to > *files {
		*to = *files
	}
	data := bytes.Repeat([]byte{0x5a}, *size)
	path := func(i int) (string, string) {
		if i < *big {
			return filepath.Join(*dir, "big"), fmt.Sprintf("f%08d", i)
		}
		j := i - *big
		return filepath.Join(*dir, fmt.Sprintf("d%05d", j / *perDir)), fmt.Sprintf("f%08d", i)
	}
	// Directories first (single-threaded, in order), so writers never race on mkdir.
	made := map[string]bool{}
	for i := *from; i < *to; i++ {
		d, _ := path(i)
		if !made[d] {
			if err := os.MkdirAll(d, 0o755); err != nil {
				fmt.Fprintln(os.Stderr, "metafill:", err)
				os.Exit(1)
			}
			made[d] = true
		}
		if i >= *big {
			i += *perDir - 1 - (i-*big)%*perDir // next directory
		}
	}
	var next atomic.Int64
	next.Store(int64(*from))
	var failed atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for range *workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= *to || failed.Load() != nil {
					return
				}
				d, name := path(i)
				if err := os.WriteFile(filepath.Join(d, name), data, 0o644); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	if err := failed.Load(); err != nil {
		fmt.Fprintln(os.Stderr, "metafill:", err)
		os.Exit(1)
	}
	n := *to - *from
	fmt.Printf("files %d seconds %.3f files_per_s %.0f\n", n, secs, float64(n)/secs)
}
