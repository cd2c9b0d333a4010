// Command nbdserve serves one NBD export backed by a tiering store (G2 DRAM
// plus a G3 segment directory) in a data directory, for benchmarks and
// manual tests. Unlike `ctxmemd run --nbd` it needs no FUSE mount, root,
// configuration file or control plane: only the NBD server over the
// store, so a benchmark measures the NBD path alone, and it can write a
// CPU profile (-cpuprofile).
//
//	nbdserve -listen unix:///tmp/ctx.sock -dir /tmp/ctxdata -size 1073741824
//
// It runs until SIGINT or SIGTERM, then closes the server and the store
// (writing back every dirty block). The data directory holds meta.db,
// g3/ and nbd-exports.json; reusing it serves the same bytes.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	_ "net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"syscall"

	"github.com/ctxmem/ctxmemd/nbd"
	"github.com/ctxmem/ctxmemd/tiering"
	"github.com/ctxmem/ctxmemd/tiering/g3"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "nbdserve:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		listen    = flag.String("listen", "", "listen URL: unix:///PATH or tcp://HOST:PORT (required)")
		dir       = flag.String("dir", "", "data directory (required)")
		name      = flag.String("export", "default", "export name")
		size      = flag.Int64("size", 1<<30, "export size in bytes")
		blockSize = flag.Int("block-size", nbd.DefaultBlockSize, "tiering block size in bytes")
		minBlock  = flag.Int("min-block-size", nbd.DefaultMinBlockSize, "advertised minimum block size in bytes")
		g2        = flag.Int64("g2", 2<<30, "G2 (DRAM) budget in bytes")
		g3cap     = flag.Int64("g3", 8<<30, "G3 capacity in bytes (0: no G3 tier)")
		readOnly  = flag.Bool("read-only", false, "serve the export read-only")
		workers   = flag.Int("workers", 0, "workers per connection (0: default)")
		cpuProf   = flag.String("cpuprofile", "", "write a CPU profile to this file until exit")
		pprofAddr = flag.String("pprof", "", "serve net/http/pprof on this loopback address (e.g. 127.0.0.1:6060)")
		verbose   = flag.Bool("v", false, "debug logging")
	)
	flag.Parse()
	if *listen == "" || *dir == "" {
		flag.Usage()
		return fmt.Errorf("-listen and -dir are required")
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if *cpuProf != "" {
		f, err := os.Create(*cpuProf)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if *pprofAddr != "" {
		go func() { log.Warn("pprof server", "err", http.ListenAndServe(*pprofAddr, nil)) }()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	cfg := tiering.Config{DataDir: *dir, G2Bytes: *g2, Logger: log}
	if *g3cap > 0 {
		t, err := g3.Open(g3.Options{Dir: filepath.Join(*dir, "g3"), CapacityBytes: *g3cap, Logger: log})
		if err != nil {
			return err
		}
		defer t.Close()
		cfg.G3 = t
	}
	store, err := tiering.Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() {
		if err := store.Close(); err != nil {
			log.Error("close store", "err", err)
		}
	}()
	srv, err := nbd.NewServer(ctx, store, []nbd.Export{{Name: *name, Size: *size, BlockSize: *blockSize,
		MinBlockSize: *minBlock, ReadOnly: *readOnly}}, nbd.Options{StateDir: *dir, Logger: log, Workers: *workers})
	if err != nil {
		return err
	}
	ln, err := nbd.Listen(*listen)
	if err != nil {
		return err
	}
	log.Info("serving", "listen", *listen, "export", *name, "size", *size)
	return srv.Serve(ctx, ln)
}
