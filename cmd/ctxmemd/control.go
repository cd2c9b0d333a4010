package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ctxmem/ctxmemd/admin"
	"github.com/ctxmem/ctxmemd/config"
	"github.com/ctxmem/ctxmemd/fusefs"
	"github.com/ctxmem/ctxmemd/sharing"
	"github.com/ctxmem/ctxmemd/sidecar"
	"github.com/ctxmem/ctxmemd/sidecar/bus"
	"github.com/ctxmem/ctxmemd/sidecar/client"
	"github.com/ctxmem/ctxmemd/sidecar/msg"
	"github.com/ctxmem/ctxmemd/sidecar/scheduler"
)

// control is the daemon's control plane: the embedded NATS server (when no
// URL is configured), the bus connection, the sidecar and, when configured,
// a scheduler replica.
type control struct {
	emb   *bus.Embedded
	nc    *nats.Conn
	agent *sidecar.Agent
	sched *scheduler.Scheduler
	names msg.Names
}

// busOptions are the NATS connection options of cfg.
func busOptions(cfg config.Config, name string) bus.Options {
	return bus.Options{URL: cfg.NATS, Name: name, User: cfg.NATSUser, Password: cfg.NATSPassword,
		Token: cfg.NATSToken, NKeySeedFile: cfg.NATSNKey, CredsFile: cfg.NATSCreds,
		TLSCert: cfg.NATSTLSCert, TLSKey: cfg.NATSTLSKey, TLSCA: cfg.NATSTLSCA}
}

// busLimits are the JetStream limits the daemon and schedulers use; the
// host TTL follows the report interval.
func busLimits(cfg config.Config) bus.Limits {
	return bus.Limits{HostTTL: max(10*time.Second, 5*cfg.ReportInterval).Round(time.Second)}
}

// openBus starts the embedded NATS server (when no URL is configured) and
// connects. An unreachable external NATS is not an error: the connection
// keeps retrying and the host serves meanwhile. An embedded server that
// cannot start (port in use) is.
func (d *daemon) openBus() error {
	cfg := d.cfg
	c := &control{names: msg.For(cfg.Cluster)}
	d.ctl = c
	opts := busOptions(cfg, "ctxmemd "+cfg.Host)
	opts.Log = d.log.With("component", "bus")
	if cfg.EmbeddedNATS() {
		emb, err := bus.StartEmbedded(bus.EmbeddedOptions{StoreDir: filepath.Join(cfg.DataDir, "nats"),
			Listen: cfg.NATSListen, ServerName: "ctxmemd-" + cfg.Host, Log: d.log})
		if err != nil {
			return err
		}
		c.emb = emb
		opts.Embedded = emb
	}
	nc, err := bus.Connect(opts, true)
	if err != nil {
		return err
	}
	c.nc = nc
	return nil
}

// startControl starts the sidecar and, when configured, a scheduler
// replica, on the bus openBus connected.
func (d *daemon) startControl(ctx context.Context) error {
	cfg := d.cfg
	c := d.ctl
	nc := c.nc
	var sharer *sharing.Sharer
	if d.pool != nil {
		sharer = d.pool.sharer
		d.goroutine(ctx, "sharing", func(ctx context.Context) error { return sharer.Run(ctx, d.names) })
	}
	agent, err := sidecar.New(sidecar.Config{
		Host: cfg.Host, Names: c.names, Interval: cfg.ReportInterval, Version: version, Mount: cfg.Mount,
		Namespaces: d.namespaceNames(), Log: d.log, Sharing: sharer,
	}, d.store, d.names)
	if err != nil {
		return err
	}
	c.agent = agent
	lim := busLimits(cfg)
	d.goroutine(ctx, "sidecar", func(ctx context.Context) error { return agent.Run(ctx, nc, lim) })
	if cfg.RunsScheduler() {
		s, err := scheduler.New(scheduler.Config{Names: c.names, ColdThreshold: cfg.ColdThreshold,
			Grace: cfg.SinkGrace, Limits: lim, Log: d.log})
		if err != nil {
			return err
		}
		c.sched = s
		d.goroutine(ctx, "scheduler", func(ctx context.Context) error { return s.Run(ctx, nc) })
	}
	d.log.Info("control plane started", "cluster", cfg.Cluster, "host", cfg.Host, "bus", busName(cfg, c.emb),
		"scheduler", c.sched != nil)
	return nil
}

// close stops the bus connection and the embedded server (after the
// goroutines using them have ended).
func (c *control) close() {
	if c.nc != nil {
		c.nc.Close()
	}
	if c.emb != nil {
		c.emb.Shutdown()
	}
}

func busName(cfg config.Config, emb *bus.Embedded) string {
	if emb == nil {
		return cfg.NATS
	}
	if u := emb.ClientURL(); u != "" {
		return "embedded " + u
	}
	return "embedded"
}

// controlStatus is the control-plane part of the admin status.
func (d *daemon) controlStatus() *admin.ControlStatus {
	c := d.ctl
	if c == nil || c.agent == nil {
		return nil
	}
	cs := &admin.ControlStatus{Cluster: d.cfg.Cluster, Host: d.cfg.Host, Bus: busName(d.cfg, c.emb), Connected: c.nc.IsConnected()}
	cs.Sidecar, _ = json.Marshal(c.agent.Stats())
	if c.sched != nil {
		cs.Scheduler, _ = json.Marshal(c.sched.Stats())
	}
	return cs
}

// errNoControl: the daemon runs without a control plane (nats: none).
var errNoControl = fmt.Errorf("%w: the control plane is off (nats: none)", admin.ErrUnsupported)

// Cluster implements admin.ClusterProvider.
func (d *daemon) Cluster(ctx context.Context) (json.RawMessage, error) {
	if d.ctl == nil || d.ctl.nc == nil {
		return nil, errNoControl
	}
	if !d.ctl.nc.IsConnected() {
		return nil, fmt.Errorf("control bus not connected (NATS %s unreachable): this host serves locally; no cluster view", busName(d.cfg, d.ctl.emb))
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	v, err := client.View(ctx, d.ctl.nc, d.ctl.names)
	if err != nil {
		return nil, fmt.Errorf("cluster view: %w", err)
	}
	return json.Marshal(v)
}

// ClusterPrestage implements admin.ClusterProvider.
func (d *daemon) ClusterPrestage(ctx context.Context, req admin.ClusterPrestageRequest) (json.RawMessage, error) {
	if d.ctl == nil || d.ctl.nc == nil {
		return nil, errNoControl
	}
	if !d.ctl.nc.IsConnected() {
		return nil, fmt.Errorf("control bus not connected (NATS %s unreachable): prestage through the scheduler is unavailable", busName(d.cfg, d.ctl.emb))
	}
	budget := time.Duration(req.DeadlineMs) * time.Millisecond
	if budget <= 0 {
		budget = 5 * time.Second
	}
	paths := make([]string, len(req.Paths))
	for i, p := range req.Paths {
		paths[i] = strings.TrimPrefix(p, "/")
	}
	rep, err := client.Prestage(ctx, d.ctl.nc, d.ctl.names, msg.PrestageRequest{Namespace: req.Namespace,
		Paths: paths, Host: req.Host, Deadline: time.Now().Add(budget).UnixNano()})
	if err != nil && rep == nil {
		if errors.Is(err, client.ErrNoScheduler) {
			return nil, fmt.Errorf("%w: is a scheduler running for cluster %s?", err, d.cfg.Cluster)
		}
		return nil, err
	}
	return json.Marshal(rep)
}

var _ fusefs.Remote = (*sharing.Sharer)(nil)
