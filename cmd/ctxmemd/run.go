package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/ctxmem/ctxmemd/admin"
	"github.com/ctxmem/ctxmemd/catalog"
	"github.com/ctxmem/ctxmemd/config"
	"github.com/ctxmem/ctxmemd/fabric"
	"github.com/ctxmem/ctxmemd/fabric/pool"
	"github.com/ctxmem/ctxmemd/fusefs"
	"github.com/ctxmem/ctxmemd/metrics"
	"github.com/ctxmem/ctxmemd/mrc"
	"github.com/ctxmem/ctxmemd/nbd"
	"github.com/ctxmem/ctxmemd/service"
	"github.com/ctxmem/ctxmemd/sharing"
	"github.com/ctxmem/ctxmemd/tiering"
	"github.com/ctxmem/ctxmemd/tiering/g3"
	"github.com/ctxmem/ctxmemd/tiering/g4"
	"github.com/ctxmem/ctxmemd/tiering/g4/s3"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// daemon is one running ctxmemd: the tiers, the tiering core and the front
// ends, plus the goroutines (admin socket, metrics, G4 expiry) it owns.
type daemon struct {
	cfg   config.Config
	log   *slog.Logger
	level *slog.LevelVar
	// poolOpen opens the G3.5 pool device (nil: pool.Open; a test passes a
	// device that never answers).
	poolOpen func(path string) (*pool.Pool, error)
	// metricsLn is the metrics listener, bound before the mount (nil
	// when metrics are off); adminLn the admin socket, likewise.
	metricsLn, adminLn net.Listener
	// running is the configuration the live settings come from (updated
	// by reload; owned by the reload goroutine).
	running config.Config
	g3      *g3.Store
	g4      *g4.Tier
	store   *tiering.Store
	fuse    *fusefs.Server
	// quotas is the usage accounting of each namespace by name, shared by
	// the mount and the NBD exports counted in it (quota); made during
	// open, before the front ends.
	quotas map[string]*catalog.Quota
	// names is the catalog's name service on the mount's tree (nil until
	// mounted): what the sidecar, admin, fsck and KV events resolve
	// objects and paths with.
	names *catalog.Names
	nbd   *nbd.Server // nil without --nbd
	kv    *kvState    // nil without kv_events
	// values is what each namespace's lookup hits are worth
	// (tokens_per_block, prefill_us_per_token), by name; replaced by a
	// reload.
	values atomic.Pointer[map[string]config.Namespace]
	// lat holds the request latency histograms the front ends feed.
	lat  *metrics.Latencies
	link *fabric.LinkWatcher
	// lifecycle is the G4 bucket lifecycle rule's state for status (nil
	// unless G4 is on S3; keepLifecycle).
	lifecycle atomic.Pointer[string]
	ctl       *control
	pool      *poolState
	start     time.Time

	wg   sync.WaitGroup
	errs chan error // fatal errors of owned goroutines

	// curves are the online miss-ratio curves of the mount (curve.go).
	curves *mrc.Set
}

// runDaemon starts ctxmemd with cfg and serves until the context of c ends
// (SIGINT/SIGTERM) or the FUSE server stops; then it unmounts, writes back
// dirty blocks (up to 30 s) and closes the tiers.
func runDaemon(c *cli.Context, cfg config.Config) error {
	level := new(slog.LevelVar)
	level.Set(cfg.SlogLevel())
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(log)
	if cfg.UsesDevRoot() {
		fmt.Fprintf(c.App.ErrWriter, "ctxmemd: embedded default: mount %s, data %s (set --mount/--data-dir or a config file to change)\n",
			cfg.Mount, cfg.DataDir)
	}
	for _, line := range cfg.Summary() {
		log.Debug("config", "option", line)
	}
	// What can be checked of G4's S3 URL without the server is a
	// configuration error, found before any directory is made.
	if err := checkObjectStoreURL(cfg.G4); err != nil {
		return withCode(exitUsage, err)
	}
	for _, u := range strings.Split(cfg.NBD, ",") {
		if u = strings.TrimSpace(u); u == "" {
			continue
		}
		if _, _, err := nbd.ParseListenURL(u); err != nil {
			return withCode(exitUsage, fmt.Errorf("%w (change --nbd / nbd:)", err))
		}
	}
	if err := cfg.EnsureDirs(); err != nil {
		return withCode(exitUsage, err)
	}
	// A G3 larger than its filesystem's room only ever meets ENOSPC: clamp
	// it (with a warning) or, when not even three segments fit, refuse it
	// as a configuration error before anything is mounted.
	if cfg.G3Size > 0 {
		fit, clamped, err := g3.FitCapacity(cfg.G3Dir, cfg.G3Size, cfg.G3SegmentSize)
		if err != nil {
			return withCode(exitUsage, fmt.Errorf("g3_size: %w", err))
		}
		if clamped {
			log.Warn("g3_size is larger than the room on its filesystem: clamped", "g3_dir", cfg.G3Dir,
				"configured", config.FormatSize(cfg.G3Size), "using", config.FormatSize(fit))
			cfg.G3Size = fit
		}
	}
	// A G2 budget above the host's memory cannot be held: the kernel's
	// OOM killer, not eviction, would end it. Said, not refused (a
	// container may see more than it may use, or less).
	if total := physicalMemory(); total > 0 && cfg.DRAM > total {
		log.Warn("dram is larger than this host's memory: G2 will not fit; set dram below it", "dram", config.HumanSize(cfg.DRAM),
			"memory", config.HumanSize(total))
	}
	d := &daemon{cfg: cfg, running: cfg, level: level, log: log, start: time.Now(), errs: make(chan error, 4)}
	d.setValues(cfg)
	ctx, cancel := context.WithCancel(c.Context)
	defer cancel()
	// pprof first, so start-up (G3 open, recovery, reconciliation) can be
	// profiled too (tests/bench/meta_bench.sh does).
	if addr := os.Getenv("CTXMEM_PPROF"); addr != "" {
		d.goroutine(ctx, "pprof", func(ctx context.Context) error { return servePprof(ctx, addr) })
	}
	// Listeners are bound before anything is mounted or announced: a busy
	// port is a configuration error (exit 2), not a daemon that dies after
	// "serving" and is restarted by systemd every 2 s.
	if cfg.Metrics != "" {
		ln, err := new(net.ListenConfig).Listen(ctx, "tcp", cfg.Metrics)
		if err != nil {
			return withCode(exitUsage, fmt.Errorf("metrics: %w (set --metrics / metrics: to a free address, or \"\" to turn the endpoint off)", err))
		}
		d.metricsLn = ln
	}
	// The admin socket too: `ctxmemd status` answers as soon as the mount
	// is visible, and a second daemon on the same data dir stops here.
	ln, err := admin.Listen(ctx, cfg.Admin)
	if err != nil {
		if d.metricsLn != nil {
			d.metricsLn.Close()
		}
		if errors.Is(err, admin.ErrInUse) {
			return withCode(exitUsage, err) // the message says what to do
		}
		return withCode(exitUsage, fmt.Errorf("%w (change --admin / admin:)", err))
	}
	d.adminLn = ln
	if err := d.open(ctx); err != nil {
		cancel() // stop the goroutines open started before it failed
		d.close()
		if d.metricsLn != nil {
			d.metricsLn.Close()
		}
		d.adminLn.Close()
		os.Remove(cfg.Admin)
		code := exitFailure
		var ec *exitError
		if errors.As(err, &ec) {
			code = ec.code // a configuration or environment error open named
		}
		if errors.Is(err, s3.ErrBucketNotFound) || errors.Is(err, s3.ErrAccessDenied) || errors.Is(err, s3.ErrEndpointConfig) {
			// The object store answered and refused the configuration, or
			// the endpoint cannot be spoken to as configured (HTTPS to a
			// plain-HTTP server, an untrusted certificate): retrying
			// (systemd's Restart=) cannot help.
			code = exitUsage
		}
		return withCode(code, err)
	}
	log.Info("ctxmemd serving", "version", version, "mount", cfg.Mount, "data_dir", cfg.DataDir,
		"dram", config.FormatSize(cfg.DRAM), "g3", config.FormatSize(cfg.G3Size), "g4", cfg.G4,
		"admin", cfg.Admin, "metrics", cfg.Metrics)
	fmt.Fprintf(c.App.ErrWriter, "ctxmemd: mounted %s (namespaces: %s); stop with Ctrl-C\n", cfg.Mount, strings.Join(d.namespaceNames(), ", "))

	// systemd (Type=notify): READY=1 only now that the mount and the NBD
	// listeners are live; STATUS= every 10 s; WATCHDOG=1 only while a
	// statfs of the mount answers, so a wedged FUSE loop stops the pings.
	// All no-ops without NOTIFY_SOCKET.
	notifier := service.New(log)
	d.goroutine(ctx, "watchdog", func(ctx context.Context) error {
		return notifier.RunWatchdog(ctx, service.StatfsCheck(cfg.Mount))
	})
	if err := notifier.Ready(d.statusLine()); err != nil {
		log.Warn("systemd notify", "err", err)
	}
	d.goroutine(ctx, "sd-status", func(ctx context.Context) error {
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
				_ = notifier.Status(d.statusLine())
			}
		}
	})

	d.goroutine(ctx, "config-reload", func(ctx context.Context) error { return d.watchConfig(ctx, c) })

	unmounted := make(chan struct{})
	go func() { d.fuse.Wait(); close(unmounted) }()
	var runErr error
	select {
	case <-ctx.Done():
		log.Info("stopping", "reason", context.Cause(ctx))
	case <-unmounted:
		log.Warn("file system was unmounted from outside; stopping")
	case runErr = <-d.errs:
		log.Error("stopping on error", "err", runErr)
	}
	_ = notifier.Stopping()
	cancel()
	began := time.Now()
	closeErr := d.close()
	// The process may still take a while to exit: a thread blocked in a
	// hung device's I/O (the kernel does not interrupt it) holds the exit
	// until the device answers, after everything above has been done.
	log.Info("stopped", "took", time.Since(began).Round(time.Millisecond), "err", closeErr)
	if closeErr != nil && runErr == nil {
		runErr = closeErr
	}
	if runErr != nil {
		return withCode(exitFailure, runErr)
	}
	return nil
}

// open builds the tiers, the core and the front ends, in that order.
func (d *daemon) open(ctx context.Context) error {
	d.lat = metrics.NewLatencies()
	d.curves = mrc.NewSet(mrc.Config{})
	cfg := d.cfg
	var t3, t4, t35 tier.Tier
	if cfg.ControlPlane() {
		if err := d.openBus(); err != nil {
			return fmt.Errorf("control bus: %w", err)
		}
	}
	if cfg.Pool != "" || len(cfg.PoolTargets) > 0 {
		if err := d.openPool(ctx); err != nil {
			return err
		}
		t35 = d.pool.tier
	}
	if cfg.G3Size > 0 {
		s, err := g3.Open(g3.Options{
			Dir: cfg.G3Dir, SegmentBytes: cfg.G3SegmentSize, CapacityBytes: cfg.G3Size,
			HighWatermark: cfg.G3High, LowWatermark: cfg.G3Low, CompactLive: g3CompactLive(cfg.G3CompactLive),
			Logger: d.log.With("tier", "G3"),
			// The core attaches itself to G3's reclaim when it opens
			// (tier.Reclaimer), before anything is written to G3.
		})
		if err != nil {
			return fmt.Errorf("open G3 at %s: %w", cfg.G3Dir, err)
		}
		d.g3, t3 = s, s
		if !s.Direct() {
			d.log.Info("G3 uses buffered I/O: the filesystem refused O_DIRECT", "dir", cfg.G3Dir)
		}
	}
	if cfg.G4Enabled() {
		objects, err := openObjectStore(ctx, cfg.G4)
		if err != nil {
			return err
		}
		capacity, err := d.g4Capacity()
		if err != nil {
			return err
		}
		t, err := g4.NewTier(ctx, objects, g4.TierOptions{
			Capacity: capacity, HighWatermark: cfg.G4High, LowWatermark: cfg.G4Low,
			// Blocks of device-class objects (NBD exports) are never
			// expired or evicted by size: the core, which alone knows
			// which object generation a key belongs to, attaches itself
			// as G4's tier.Retainer when it opens.
			// An object store that does not answer at start must not
			// take the mount down: G4 starts unlisted and the core
			// recovers its blocks in the background.
			OpenUnlisted: true,
			OpenTimeout:  g4OpenTimeout,
			PackSize:     g4PackSize(cfg.G4PackSize),
			// A sink that G4 makes room for evicts on its own goroutine.
			OnMakeRoom: d.logG4Evict,
		})
		if err != nil {
			return fmt.Errorf("open G4 %s: %w", cfg.G4, err)
		}
		if !t.Listed() {
			d.log.Warn("G4 object store does not answer: starting degraded (G2/G3 serve; G4-only blocks read as EIO until it answers)",
				"g4", cfg.G4, "err", storeErr(objects))
		}
		d.g4, t4 = t, t
	}
	st, err := tiering.Open(ctx, tiering.Config{
		DataDir: cfg.DataDir, G2Bytes: cfg.DRAM, G2High: cfg.DRAMHigh, G2Low: cfg.DRAMLow,
		DirtyBytes: cfg.DirtyBytes, WriteTimeout: cfg.WriteTimeout, LocalReadTimeout: cfg.LocalReadTimeout, LocalWriteTimeout: cfg.LocalWriteTimeout, WriteBackDelay: writeBackDelay(cfg.WriteBackDelay), PassthroughMaxBytes: max(cfg.PassthroughMaxBytes, 1), PassthroughMaxFiles: cfg.PassthroughMaxFiles,
		MemFiles: cfg.Passthrough && cfg.PassthroughMaxBytes > 0 && os.Geteuid() == 0, G3: t3, G3High: cfg.G3High, G4: t4, G35: t35,
		HeatHalfLife: cfg.HeatHalfLife, ColdThreshold: cfg.ColdThreshold, Policy: cfg.G2Policy,
		RankObjects: cfg.ControlPlane(), // the sidecar reports hot and cold objects
		Logger:      d.log.With("component", "tiering"),
	})
	if err != nil {
		return fmt.Errorf("open tiering core in %s: %w", cfg.DataDir, err)
	}
	d.store = st
	if d.pool != nil {
		if d.pool.sharer, err = sharing.New(sharing.Config{Host: cfg.Host, Store: st, Tier: d.pool.tier,
			Index: d.pool.index, Eager: cfg.PoolShare == "eager", Log: d.log}); err != nil {
			return err
		}
	}

	// NBD listeners are bound before the mount, like the metrics and
	// admin listeners: a busy or bad address fails the start with
	// nothing mounted.
	if cfg.NBD != "" {
		if err := d.startNBD(ctx, st); err != nil {
			return err
		}
	}
	if err := d.openKVEvents(ctx); err != nil { // bound before the mount too
		return err
	}
	fs, err := fusefs.Mount(ctx, cfg.Mount, st, fusefs.Options{
		ObserveLatency:    d.lat.ObserveFUSE,
		Curves:            d.curves,
		RestoreBudget:     d.restoreBudget,
		Namespaces:        d.fuseNamespaces(),
		TreePath:          filepath.Join(cfg.DataDir, "tree.db"),
		Remote:            d.remote(),
		Logger:            d.log.With("component", "fuse"),
		StatfsCapacity:    cfg.StatfsCapacity,
		NoPassthrough:     !cfg.Passthrough || cfg.PassthroughMaxBytes == 0,
		PassthroughWrites: cfg.PassthroughWrites,
		KernelFiles:       cfg.KernelFiles,
		OnChange:          d.kvChanged(),
	})
	if err != nil {
		return fmt.Errorf("mount %s: %w", cfg.Mount, err)
	}
	d.fuse = fs
	d.names = catalog.NewNames(fs.Tree(), st, d.log.With("component", "catalog"))
	d.startKVEvents(ctx)

	if link := d.poolLink(ctx); link != "" {
		w, err := fabric.WatchLink(link, fabric.OnChange(func(s fabric.LinkState) {
			d.log.Warn("link state changed", "link", s.Name, "up", s.Up, "oper_state", s.OperState)
			d.linkChanged(s)
		}))
		if err != nil {
			return fmt.Errorf("link %s: %w", link, err)
		}
		if st := w.State(); !st.Up {
			d.linkChanged(st)
		}
		d.link = w
		d.goroutine(ctx, "link-watch", w.Run)
	}

	if d.ctl != nil {
		if err := d.startControl(ctx); err != nil {
			return fmt.Errorf("control plane: %w", err)
		}
	}
	d.goroutine(ctx, "admin", func(ctx context.Context) error {
		return admin.Serve(ctx, admin.Options{Socket: cfg.Admin, Listener: d.adminLn, Provider: d, Version: version, Started: d.start, Logger: d.log})
	})
	if cfg.Metrics != "" {
		d.goroutine(ctx, "metrics", func(ctx context.Context) error {
			return metrics.ServeListener(ctx, d.metricsLn, func() metrics.Snapshot { return d.metricsSnapshot(ctx) }, version, d.lat)
		})
	}
	if d.g4 != nil {
		sw := g4.NewSweeper(d.g4, g4.SweeperOptions{TTL: cfg.G4TTL, OnSweep: func(n int, err error) {
			if err != nil {
				d.log.Warn("G4 expiry sweep", "err", err)
			} else if n > 0 {
				d.log.Info("G4 expiry", "blocks", n)
			}
		}, OnEvict: d.logG4Evict})
		d.goroutine(ctx, "g4-expiry", sw.Run)
		if st, ok := d.g4.Store().(*s3.Store); ok {
			d.goroutine(ctx, "g4-lifecycle", func(ctx context.Context) error { return d.keepLifecycle(ctx, st) })
		}
	}
	return nil
}

// startNBD serves the configured exports (or one export "default" of
// cfg.NBDSize bytes) on every listener of cfg.NBD. Listeners are opened before the daemon reports
// itself serving, so a bad address fails the start.
func (d *daemon) startNBD(ctx context.Context, st *tiering.Store) error {
	exports := []nbd.Export{{Name: "default", Size: d.cfg.NBDSize}}
	if len(d.cfg.Exports) > 0 {
		exports = exports[:0]
		for _, e := range d.cfg.Exports {
			x := nbd.Export{Name: e.Name, Size: e.Size, BlockSize: e.BlockSize, ReadOnly: e.ReadOnly}
			if e.Namespace != "" {
				x.Quota, x.QuotaName = d.quota(e.Namespace), e.Namespace
			}
			exports = append(exports, x)
		}
	}
	// Every listener first, so that a busy second address leaves no
	// half-served NBD behind.
	var lns []net.Listener
	var urls []string
	for _, u := range strings.Split(d.cfg.NBD, ",") {
		u = strings.TrimSpace(u)
		if u == "" {
			continue
		}
		ln, err := nbd.Listen(u)
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return withCode(exitUsage, fmt.Errorf("nbd: listen %s: %w (change --nbd / nbd:)", u, err))
		}
		lns, urls = append(lns, ln), append(urls, u)
	}
	srv, err := nbd.NewServer(ctx, st, exports,
		nbd.Options{StateDir: d.cfg.DataDir, Logger: d.log.With("component", "nbd"), ObserveLatency: d.lat.ObserveNBD})
	if err != nil {
		for _, l := range lns {
			l.Close()
		}
		return fmt.Errorf("nbd: %w", err)
	}
	d.nbd = srv
	for i, ln := range lns {
		d.log.Info("nbd serving", "listen", urls[i], "exports", len(exports))
		d.goroutine(ctx, "nbd "+urls[i], func(ctx context.Context) error { return srv.Serve(ctx, ln) })
	}
	return nil
}

// physicalMemory returns the host's memory in bytes (sysinfo(2)), 0 if
// unknown.
func physicalMemory() int64 {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return 0
	}
	return int64(si.Totalram) * int64(si.Unit)
}

// checkObjectStoreURL checks an s3:// G4 URL and its options as far as
// that needs no server (s3.Options.Check); other URLs pass.
func checkObjectStoreURL(url string) error {
	if !strings.HasPrefix(url, "s3://") {
		return nil
	}
	opts, err := s3.ParseURL(url)
	if err == nil {
		err = opts.Check()
	}
	if err != nil {
		return fmt.Errorf("g4 %s: %w (change --g4 / g4:)", url, err)
	}
	return nil
}

// openObjectStore opens the G4 object store named by a file:// or s3://
// URL. For S3 it checks the bucket and credentials and fails with an error
// naming the problem.
func openObjectStore(ctx context.Context, url string) (g4.ObjectStore, error) {
	if dir, ok := strings.CutPrefix(url, "file://"); ok {
		local, err := g4.NewLocal(dir)
		if err != nil {
			return nil, fmt.Errorf("open G4 at %s: %w", dir, err)
		}
		return local, nil
	}
	if strings.HasPrefix(url, "s3://") {
		opts, err := s3.ParseURL(url)
		if err != nil {
			return nil, fmt.Errorf("g4 %s: %w", url, err)
		}
		opts.AllowUnreachable = true // silence is an outage, not a configuration error
		st, err := s3.New(ctx, opts)
		if errors.Is(err, g4.ErrInvalid) {
			// The server refused the request as malformed (a bucket name it
			// does not take): a restart cannot help.
			return nil, withCode(exitUsage, fmt.Errorf("open G4 %s: %w (change --g4 / g4:)", url, err))
		}
		if err != nil {
			return nil, fmt.Errorf("open G4 %s: %w", url, err)
		}
		return st, nil
	}
	return nil, fmt.Errorf("g4 %q: want file:///dir, s3://bucket/prefix or none", url)
}

// g4Capacity resolves g4_size for G4's TierOptions.Capacity: auto is
// g4.AutoCapacityFraction of the size of a local G4's filesystem, less
// g3_size when G3 is on the same filesystem (logged), and unbounded (0)
// for S3 (never less than a tenth of the filesystem: a G3 clamped to
// the room left takes nearly all of it); a size or 0 is taken as it is.
// Errors (exit 2): the filesystem cannot be measured.
func (d *daemon) g4Capacity() (int64, error) {
	if d.cfg.G4Size != config.G4SizeAuto {
		return d.cfg.G4Size, nil
	}
	dir, ok := d.cfg.G4Path()
	if !ok {
		return 0, nil
	}
	n, fsSize, err := g4.AutoCapacity(dir)
	if err != nil {
		return 0, withCode(exitUsage, fmt.Errorf("g4_size auto: %w (set g4_size to a size, or 0 for unbounded)", err))
	}
	if d.cfg.G3Size > 0 && sameFilesystem(dir, d.cfg.G3Dir) {
		// G3 fills its g3_size on the same disk: without this, G4's bound
		// was never reached while the disk filled, and G3's reclaim then
		// dropped the newest files G4 had no room for.
		if n -= d.cfg.G3Size; n < fsSize/10 {
			n = fsSize / 10
			d.log.Warn("g4_size auto: G3 takes most of the filesystem G4 shares; G4 bound to a tenth of it (set g4_size, lower g3_size, or put G4 elsewhere)",
				"g4", dir, "g3_size", config.HumanSize(d.cfg.G3Size), "filesystem", config.HumanSize(fsSize))
		}
		d.log.Info("G4 size bound: g4_size auto, 80% of its filesystem less g3_size (G3 is on the same filesystem)", "g4", dir,
			"g4_size", config.HumanSize(n), "filesystem", config.HumanSize(fsSize), "g3_size", config.HumanSize(d.cfg.G3Size))
		return n, nil
	}
	d.log.Info("G4 size bound: g4_size auto, 80% of its filesystem", "g4", dir,
		"g4_size", config.HumanSize(n), "filesystem", config.HumanSize(fsSize))
	return n, nil
}

// sameFilesystem reports whether directories a and b are on one
// filesystem (the same st_dev); false when either cannot be stat'ed.
func sameFilesystem(a, b string) bool {
	var sa, sb unix.Stat_t
	if unix.Stat(a, &sa) != nil || unix.Stat(b, &sb) != nil {
		return false
	}
	return sa.Dev == sb.Dev
}

// g4OpenTimeout bounds G4's first listing at start; past it the daemon
// starts with G4 unlisted and lists it in the background.
const g4OpenTimeout = 20 * time.Second

// storeErr returns the latest error an object store reported, if it keeps
// one (S3), for the start-up log.
func storeErr(st g4.ObjectStore) error {
	if s, ok := st.(*s3.Store); ok {
		return s.LastError()
	}
	return nil
}

// servePprof serves net/http/pprof on addr (debugging aid, enabled by the
// CTXMEM_PPROF environment variable; loopback addresses only make sense).
func servePprof(ctx context.Context, addr string) error {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { <-ctx.Done(); srv.Close() }()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// goroutine runs fn until ctx ends; an error other than ctx's ends the
// daemon.
func (d *daemon) goroutine(ctx context.Context, name string, fn func(context.Context) error) {
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		if err := fn(ctx); err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled) {
			select {
			case d.errs <- fmt.Errorf("%s: %w", name, err):
			default:
			}
		}
	}()
}

// close stops everything open, in reverse order: front ends, owned
// goroutines, the core (final write-back), the tiers.
func (d *daemon) close() error {
	var errs []error
	if d.fuse != nil {
		if err := d.fuse.Unmount(); err != nil {
			errs = append(errs, fmt.Errorf("unmount %s: %w", d.cfg.Mount, err))
		}
	}
	d.wg.Wait()
	d.closeKVEvents()
	if d.ctl != nil {
		d.ctl.close()
	}
	stuck, stuck3, stuck35 := false, false, false
	if d.store != nil {
		if err := d.store.Close(); err != nil {
			errs = append(errs, err)
			// Work blocked in a local tier's I/O (a hung device): the
			// core stopped as after a crash, and closing that tier would
			// wait for the same I/O.
			stuck = errors.Is(err, tiering.ErrBlockedIO)
		}
	}
	// A call into a hung local device that the core gave up on is still
	// in it: closing that tier would wait for the same I/O, so it is left
	// to the process exit, as after a crash (its next open recovers).
	if d.store != nil && d.store.BlockedIn(tiering.TierG3) {
		stuck3 = true
		d.log.Error("G3 left open at the stop: a call into its device has not returned (a hung device?)", "dir", d.cfg.G3Dir)
	}
	if d.g3 != nil && !stuck && !stuck3 {
		if err := d.g3.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if d.g4 != nil {
		if err := d.g4.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if d.store != nil && d.store.BlockedIn(tiering.TierG35) {
		stuck35 = true
		d.log.Error("G3.5 left open at the stop: a call into the pool device has not returned (a hung device?)")
	}
	if d.pool != nil && !stuck && !stuck35 {
		if d.pool.tier != nil {
			if err := d.pool.tier.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		d.closePool(ctx)
		cancel()
	}
	return errors.Join(errs...)
}

// fuseNamespaces are the configured namespaces (or the default one) for
// the mount, each with the usage accounting NBD exports counted in it
// share (quota).
func (d *daemon) fuseNamespaces() []fusefs.Namespace {
	nss := fuseNamespaces(d.cfg)
	for i := range nss {
		nss[i].Quota = d.quota(nss[i].Name)
	}
	return nss
}

// quota returns the usage accounting of configured namespace name, made
// on first use with the namespace's quota as its limit: one per
// namespace, shared by the mount's files and the NBD exports counted in
// it (config.Export.Namespace).
func (d *daemon) quota(name string) *catalog.Quota {
	if q, ok := d.quotas[name]; ok {
		return q
	}
	q := &catalog.Quota{}
	for _, ns := range d.cfg.Namespaces {
		if ns.Name == name {
			q.Limit = ns.Quota
		}
	}
	if d.quotas == nil {
		d.quotas = map[string]*catalog.Quota{}
	}
	d.quotas[name] = q
	return q
}

func fuseNamespaces(cfg config.Config) []fusefs.Namespace {
	var out []fusefs.Namespace
	for _, ns := range cfg.Namespaces {
		out = append(out, fusefs.Namespace{
			Name: ns.Name, UID: uint32(ns.UID), GID: uint32(ns.GID), Mode: ns.UnixMode(),
			QuotaBytes: ns.Quota, BlockSize: ns.BlockSize,
			ModelID: ns.ModelID, ModelRevision: ns.ModelRevision, TokenizerRevision: ns.TokenizerRevision,
			KVDType: ns.KVDtype, LayoutVersion: ns.LayoutVersion, Tenant: ns.Tenant,
		})
	}
	if len(out) == 0 {
		out = append(out, fusefs.Namespace{Name: fusefs.DefaultNamespace, Mode: fusefs.DefaultNamespaceMode, BlockSize: cfg.BlockSize})
	}
	return out
}

func (d *daemon) namespaceNames() []string {
	nss := fuseNamespaces(d.cfg)
	if d.fuse != nil {
		nss = d.fuse.Namespaces()
	}
	var names []string
	for _, ns := range nss {
		names = append(names, ns.Name)
	}
	return names
}

// statusLine is the one-line tier summary sent to systemd as STATUS=.
func (d *daemon) statusLine() string {
	var parts []string
	for _, t := range d.store.Occupancy() {
		s := t.Name + " " + config.HumanSize(t.UsedBytes)
		if t.CapacityBytes > 0 {
			s += "/" + config.HumanSize(t.CapacityBytes)
		}
		if t.Degraded {
			s += " DEGRADED"
		}
		parts = append(parts, s)
	}
	return "serving " + d.cfg.Mount + ": " + strings.Join(parts, ", ")
}

// restoreBudget is fusefs.Options.RestoreBudget: the namespace's
// restore_budget (live: a reload replaces the table).
func (d *daemon) restoreBudget(ns string) time.Duration {
	if p := d.values.Load(); p != nil {
		return (*p)[ns].RestoreBudget
	}
	return 0
}

// setValues records cfg's per-namespace value settings for Status.
func (d *daemon) setValues(cfg config.Config) {
	m := make(map[string]config.Namespace, len(cfg.Namespaces))
	for _, ns := range cfg.Namespaces {
		m[ns.Name] = ns
	}
	d.values.Store(&m)
}

// metricsSnapshot is one scrape's figures: the admin status, so that
// status and metrics report the same numbers.
func (d *daemon) metricsSnapshot(ctx context.Context) metrics.Snapshot {
	st, _ := d.Status(ctx)
	snap := metrics.Snapshot{Tiers: st.Tiers, Stats: st.Stats, Lookups: st.Lookups}
	snap.Curves = metricsCurves(st.Curves)
	if d.fuse != nil {
		p := st.Passthrough
		snap.Passthrough = &metrics.Passthrough{On: p.On, DaemonReads: p.DaemonReads, DaemonWrites: p.DaemonWrites}
	}
	for _, n := range st.Namespaces {
		snap.Namespaces = append(snap.Namespaces, metrics.Namespace{Name: n.Name, Objects: n.Objects, Bytes: n.Bytes,
			QuotaBytes: n.QuotaBytes, Lookups: n.Lookups, TokensFound: n.TokensFound, PrefillAvoidedS: n.PrefillAvoidedS,
			RestoreSkipped: n.RestoreSkipped})
	}
	for name, c := range st.RestoreCost {
		snap.ReadCost = append(snap.ReadCost, metrics.TierReadCost{Tier: name, Seconds: c.BlockRead.Seconds()})
	}
	if d.g4 != nil {
		g := d.g4.Stats()
		snap.G4Evicted, snap.G4Expired = int64(g.Evicted), int64(g.Expired)
	}
	if d.nbd != nil {
		n := d.nbd.Stats()
		snap.NBD = &metrics.NBD{Connections: n.Connections, ActiveConnections: n.ActiveConnections, Requests: n.Requests,
			Errors: n.Errors, BytesRead: n.BytesRead, BytesWritten: n.BytesWritten}
	}
	if c := d.ctl; c != nil && c.agent != nil {
		a := c.agent.Stats()
		cs := &metrics.Control{Connected: c.nc.IsConnected(), Published: a.Published, Applied: a.Applied,
			Duplicates: a.Duplicates, Failed: a.Failed, Malformed: a.Malformed, DroppedMessages: a.DroppedMessages,
			DroppedEvents: a.DroppedEvents, DroppedPoolEvents: a.DroppedPoolEvents, Queued: int64(a.Queued), QueuedByte: int64(a.QueuedBytes), SchedulerLeader: -1}
		if c.sched != nil {
			cs.SchedulerLeader = 0
			if c.sched.IsLeader() {
				cs.SchedulerLeader = 1
			}
		}
		snap.Control = cs
	}
	return snap
}

// Status implements admin.Provider.
func (d *daemon) Status(ctx context.Context) (admin.Status, error) {
	st := admin.Status{Mount: d.cfg.Mount, DataDir: d.cfg.DataDir, Tiers: d.store.Occupancy(), Stats: d.store.Stats(),
		Control: d.controlStatus()}
	var nsLookups []fusefs.NamespaceLookups
	if d.fuse != nil {
		p := d.fuse.Passthrough()
		st.Passthrough = admin.PassthroughStatus{On: p.On, Reason: p.Reason, DaemonReads: p.Reads, DaemonWrites: p.Writes}
		k := d.fuse.KernelEntries()
		st.KernelEntries = admin.KernelEntriesStatus{Files: k.Files, Limit: k.Limit, Invalidated: k.Invalidated, Forgotten: k.Forgotten}
		st.Lookups, nsLookups = d.fuse.Lookups()
		st.LookupMisses = st.Lookups.Misses
	}
	if d.link != nil {
		l := d.link.State()
		st.Links = append(st.Links, admin.LinkStatus{Name: l.Name, Up: l.Up, OperState: l.OperState, Changed: l.Changed})
	}
	per := map[string]*admin.NamespaceStatus{}
	for _, ns := range d.fuse.Namespaces() { // includes namespaces added by a reload
		st.Namespaces = append(st.Namespaces, admin.NamespaceStatus{Name: ns.Name, BlockSize: ns.BlockSize, QuotaBytes: ns.QuotaBytes,
			ModelID: ns.ModelID, Tenant: ns.Tenant})
	}
	for i := range st.Namespaces {
		per[st.Namespaces[i].Name] = &st.Namespaces[i]
	}
	values := map[string]config.Namespace{}
	if p := d.values.Load(); p != nil {
		values = *p
	}
	var skips map[string]fusefs.RestoreSkips
	if d.fuse != nil {
		_, skips = d.fuse.RestoreSkips()
	}
	st.RestoreCost = d.store.ReadCost()
	if p := d.lifecycle.Load(); p != nil {
		st.G4Lifecycle = *p
	}
	for _, l := range nsLookups {
		if n := per[l.Namespace]; n != nil {
			n.Lookups = l.Counts
			n.RestoreBudget = values[l.Namespace].RestoreBudget
			n.RestoreSkipped, n.RestoreSkippedPredicted = skips[l.Namespace].Skipped, skips[l.Namespace].Predicted
			v := values[l.Namespace]
			n.TokensPerBlock, n.PrefillUsPerToken = v.TokensPerBlock, v.PrefillUsPerToken
			n.TokensFound = l.HitTotal() * int64(v.TokensPerBlock)
			n.PrefillAvoidedS = float64(n.TokensFound) * v.PrefillUsPerToken / 1e6
		}
	}
	for _, u := range d.store.Usage() { // counters: a scrape does not walk every object
		if n := per[u.Namespace]; n != nil && u.Kind == fusefs.ObjectKind {
			n.Objects += u.Objects
			n.Bytes += u.Bytes
		}
	}
	st.Curves = curveStatus(d.curves, st.Namespaces)
	return st, nil
}

// Prestage implements admin.Prestager: the file's blocks start coming up
// to G2 (what the user.ctxmem.prestage xattr does).
func (d *daemon) Prestage(ctx context.Context, path string) error {
	return d.onObject(path, func(id tiering.ObjectID) error { return d.store.Prestage(ctx, id) })
}

// SetPinned implements admin.Pinner (what the user.ctxmem.pin xattr does).
func (d *daemon) SetPinned(ctx context.Context, path string, pinned bool) error {
	return d.onObject(path, func(id tiering.ObjectID) error { return d.store.SetPinned(id, pinned) })
}

// object resolves a mount-relative path ("ns/dir/file") to its object.
// Errors wrap admin.ErrNotFound (no such file) or fs.ErrInvalid.
func (d *daemon) object(path string) (tiering.ObjectID, error) {
	ns, rel, _ := strings.Cut(strings.TrimPrefix(filepath.Clean("/"+path), "/"), "/")
	if d.names == nil {
		return 0, fmt.Errorf("%s: no mount: %w", path, admin.ErrNotFound)
	}
	id, err := d.names.Lookup(ns, rel)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("%s: %w", path, admin.ErrNotFound)
	}
	return id, err
}

// Evict implements admin.Evicter: the file's blocks leave G2 (dirty ones
// written back first), as the scheduler's demote does.
func (d *daemon) Evict(ctx context.Context, path string) error {
	return d.onObject(path, func(id tiering.ObjectID) error { _, err := d.store.Demote(ctx, id); return err })
}

// Sink implements admin.Sinker: every block of the file goes to G4.
func (d *daemon) Sink(ctx context.Context, path string) error {
	return d.onObject(path, func(id tiering.ObjectID) error { _, err := d.store.Sink(ctx, id); return err })
}

// Warmup implements admin.Warmer: every block of the file is brought to
// G2 before it returns.
func (d *daemon) Warmup(ctx context.Context, path string) error {
	return d.onObject(path, func(id tiering.ObjectID) error { return d.store.PrestageWait(ctx, id) })
}

// onObject calls do with the object path names (see object).
func (d *daemon) onObject(path string, do func(tiering.ObjectID) error) error {
	id, err := d.object(path)
	if err != nil {
		return err
	}
	return do(id)
}

// writeBackDelay maps the config's writeback_delay (0 = store at once) to
// tiering.Config.WriteBackDelay (0 = default, negative = at once).
func writeBackDelay(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// g3CompactLive maps the g3_compact_live setting to g3.Options.CompactLive,
// where 0 means the default and a negative value turns compaction off.
func g3CompactLive(v float64) float64 {
	if v == 0 {
		return -1
	}
	return v
}

// logG4Evict logs a G4 size eviction (by the sweeper, or for a sink:
// g4.TierOptions.OnMakeRoom) of n blocks, or its error.
func (d *daemon) logG4Evict(n int, err error) {
	u := d.g4.Usage()
	if err != nil {
		d.log.Warn("G4 size eviction", "blocks", n, "err", err)
	} else {
		d.log.Info("G4 size eviction: oldest blocks deleted", "blocks", n,
			"used", config.HumanSize(u.UsedBytes), "g4_size", config.HumanSize(u.CapacityBytes))
	}
}

// g4PackSize maps g4_pack_size to g4.TierOptions.PackSize: 0 (one object
// per block) is negative there.
func g4PackSize(n int64) int {
	if n == 0 {
		return -1
	}
	return int(n)
}
