package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ctxmem/ctxmemd/fabric"
	"github.com/ctxmem/ctxmemd/fabric/g35"
	"github.com/ctxmem/ctxmemd/fabric/pool"
	"github.com/ctxmem/ctxmemd/fabric/poolkv"
	"github.com/ctxmem/ctxmemd/fusefs"
	"github.com/ctxmem/ctxmemd/sharing"
	"github.com/ctxmem/ctxmemd/tiering"
)

// poolState is the daemon's G3.5 pool: the tier, the shared index, and
// the NVMe-oF controllers it attached (detached at shutdown).
type poolState struct {
	tier  *g35.Tier
	index *poolkv.Index
	// sharer is the host's sharing on tier and index (made with the core,
	// before the mount, whose Remote it is; run once the catalog is up).
	sharer   *sharing.Sharer
	path     string
	attached []fabric.Controller
	attacher fabric.Attacher
}

// openPool attaches the configured NVMe-oF targets, opens the pool device
// or file, sets up extent leases and the shared index on the control bus
// and returns the G3.5 tier. The bus must answer within 15 s.
func (d *daemon) openPool(ctx context.Context) error {
	cfg := d.cfg
	ps := &poolState{path: cfg.Pool}
	d.pool = ps
	for _, t := range cfg.PoolTargets {
		port, _ := strconv.Atoi(t.ServiceID)
		c, err := ps.attacher.Attach(ctx, fabric.Target{Transport: t.Transport, Addr: t.Address, SvcID: port, NQN: t.NQN, HostNQN: t.HostNQN})
		if err != nil {
			return fmt.Errorf("pool target %s %s: %w", t.Address, t.NQN, err)
		}
		ps.attached = append(ps.attached, c)
		if ps.path == "" && len(c.Namespaces) > 0 {
			ps.path = c.Namespaces[0].Dev
		}
		d.log.Info("pool target attached", "nqn", t.NQN, "controller", c.Name, "namespaces", len(c.Namespaces))
	}
	if ps.path == "" {
		return withCode(exitUsage, errors.New("pool: no device: set pool, or pool_targets that expose a namespace"))
	}
	d.log.Info("opening G3.5 pool", "path", ps.path, "timeout", cfg.LocalReadTimeout)
	open := d.poolOpen
	if open == nil {
		open = func(path string) (*pool.Pool, error) { return pool.Open(path, pool.OpenOptions{}) }
	}
	p, err := openPoolBounded(ctx, ps.path, cfg.LocalReadTimeout, open)
	if errors.Is(err, errPoolNoAnswer) {
		d.log.Error("G3.5 pool does not answer: not starting", "path", ps.path, "timeout", cfg.LocalReadTimeout, "err", err)
		return withCode(exitFailure, err) // systemd's Restart= tries again
	}
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		return withCode(exitUsage, fmt.Errorf("open pool %s (format it with `ctxmemd pool format`, or change --pool): %w", ps.path, err))
	}
	sb := p.Superblock()
	js, err := jetstream.New(d.ctl.nc)
	if err != nil {
		p.Close()
		return err
	}
	bctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	kvLeases, kvIndex, err := poolkv.EnsureBuckets(bctx, js, cfg.Cluster, 1)
	cancel()
	if err != nil {
		p.Close()
		return fmt.Errorf("pool: control bus buckets: %w", err)
	}
	leases := poolkv.NewLeases(kvLeases, sb.ExtentCount, cfg.Host, poolkv.LeaseOptions{TTL: cfg.PoolLeaseTTL})
	w, err := pool.NewWriter(ctx, p, leases, pool.WriterOptions{Host: cfg.Host, OnLost: func(l pool.Lease) {
		d.log.Warn("pool extent lease lost", "lease", l.String())
	}})
	if err != nil {
		p.Close()
		return fmt.Errorf("pool writer: %w", err)
	}
	ps.index = poolkv.NewIndex(kvIndex, d.log.With("component", "pool-index"))
	d.goroutine(ctx, "pool-index", ps.index.Run)
	// The sidecar reads the tier's events (deleted own blocks, stale
	// records) once it runs: g35.Tier.Events.
	ps.tier = g35.New(p, w, g35.Options{})
	d.log.Info("G3.5 pool open", "path", ps.path, "pool", sb.UUID(), "extents", sb.ExtentCount,
		"extent_size", sb.ExtentSize, "io", p.Mode())
	return nil
}

// errPoolNoAnswer marks openPoolBounded's error for a pool device that
// did not answer in time.
var errPoolNoAnswer = errors.New("the pool device does not answer (a hung device?)")

// openPoolBounded opens the pool at path with open, giving up after d (the
// configured local_read_timeout): opening it is an open(2) and a pread of
// its superblock, which no context interrupts, and a daemon whose pool
// device hangs (a dead NVMe-oF path, a frozen filesystem) waited for it
// forever before it mounted, logging nothing. The open runs on its own
// goroutine; past d (or when ctx ends) it is left to finish there, and a
// pool it opens late is closed. The error past d wraps errPoolNoAnswer
// and names the path and the bound.
func openPoolBounded(ctx context.Context, path string, d time.Duration, open func(string) (*pool.Pool, error)) (*pool.Pool, error) {
	type result struct {
		p   *pool.Pool
		err error
	}
	ch := make(chan result, 1)
	go func() { // owned by this call, or by the closer below once given up
		p, err := open(path)
		ch <- result{p, err}
	}()
	timer := time.NewTimer(d)
	defer timer.Stop()
	giveUp := func() {
		go func() {
			if r := <-ch; r.p != nil {
				r.p.Close()
			}
		}()
	}
	select {
	case r := <-ch:
		return r.p, r.err
	case <-ctx.Done():
		giveUp()
		return nil, ctx.Err()
	case <-timer.C:
		giveUp()
		return nil, fmt.Errorf("open pool %s: no answer within %v (local_read_timeout): %w; not starting without the G3.5 pool this host is configured with (fix or detach the device, or run without --pool)",
			path, d, errPoolNoAnswer)
	}
}

// poolLink returns the interface to watch for the pool: the configured
// link, else the one the kernel routes the first target's address through.
func (d *daemon) poolLink(ctx context.Context) string {
	if d.cfg.Link != "" || len(d.cfg.PoolTargets) == 0 {
		return d.cfg.Link
	}
	ip := net.ParseIP(d.cfg.PoolTargets[0].Address)
	if ip == nil {
		return ""
	}
	name, _, err := fabric.RouteTo(ctx, ip)
	if err != nil {
		d.log.Warn("pool: no route to the first target; link not watched", "addr", ip, "err", err)
		return ""
	}
	return name
}

// linkChanged puts the pool into bypass when its link goes down, and lifts
// the bypass once it is up: the core then probes the pool (a read of its
// superblock page) and uses it again only if the probe succeeds (package
// tiering/health; until then the tier is down and probed once a second).
func (d *daemon) linkChanged(s fabric.LinkState) {
	if d.pool == nil || d.pool.tier == nil || d.store == nil {
		return
	}
	if !s.Up {
		_ = d.store.SetBypass(tiering.TierG35, true, "link "+s.Name+" down")
		return
	}
	_ = d.store.SetBypass(tiering.TierG35, false, "link "+s.Name+" up")
}

// closePool detaches the controllers the daemon attached (the tier is
// closed with the other tiers).
func (d *daemon) closePool(ctx context.Context) {
	if d.pool == nil {
		return
	}
	for _, c := range d.pool.attached {
		if err := d.pool.attacher.Detach(ctx, c); err != nil {
			d.log.Warn("pool: detach", "controller", c.Name, "err", err)
		}
	}
}

// remote is the mount's Remote: the sharing component when the daemon
// has a pool, nil otherwise.
func (d *daemon) remote() fusefs.Remote {
	if d.pool == nil || d.pool.sharer == nil {
		return nil
	}
	return d.pool.sharer
}
