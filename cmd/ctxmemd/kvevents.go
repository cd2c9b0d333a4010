package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ctxmem/ctxmemd/fusefs"
	"github.com/ctxmem/ctxmemd/kvevents"
	"github.com/ctxmem/ctxmemd/tiering"
)

// kvState is the KV event publisher (kv_events) and its tracker.
type kvState struct {
	pub     *kvevents.Publisher
	tracker *kvevents.Tracker
}

// KVEventsSeqHeader is the NATS header carrying a KV event batch's
// sequence number (the ZMQ message's second frame).
const KVEventsSeqHeader = "Ctxmem-Kv-Seq"

// kvEventsSubject is the control-bus subject of this host's KV events:
// ctxmem.<cluster>.v1.kvevents.<host>, payload = the ZMQ payload.
func (d *daemon) kvEventsSubject() string {
	return "ctxmem." + d.cfg.Cluster + ".v1.kvevents." + d.cfg.Host
}

// openKVEvents binds the KV event sockets (before the mount: a busy port
// is a configuration error) and makes the tracker. No-op without
// kv_events.
func (d *daemon) openKVEvents(ctx context.Context) error {
	cfg := d.cfg
	if cfg.KVEvents == "" {
		return nil
	}
	layouts := map[string]kvevents.HashFunc{}
	for _, ns := range cfg.Namespaces {
		f, err := kvevents.ParseLayout(cfg.NamespaceKVLayout(ns))
		if err != nil {
			return withCode(exitUsage, fmt.Errorf("namespace %q: %w", ns.Name, err))
		}
		if f != nil {
			layouts[ns.Name] = f
		}
	}
	if len(cfg.Namespaces) == 0 {
		f, err := kvevents.ParseLayout(cfg.KVLayout)
		if err != nil {
			return withCode(exitUsage, err)
		}
		if f != nil {
			layouts[fusefs.DefaultNamespace] = f
		}
	}
	if len(layouts) == 0 {
		d.log.Warn("kv_events is set but no namespace has a kv_layout: no block events will be published")
	}
	opts := kvevents.Options{Endpoint: cfg.KVEvents, ReplayEndpoint: cfg.KVEventsReplay, Topic: cfg.KVEventsTopic,
		Buffer: cfg.KVEventsBuffer, Logger: d.log.With("component", "kvevents")}
	if d.ctl != nil && d.ctl.nc != nil {
		nc, subj := d.ctl.nc, d.kvEventsSubject()
		opts.Bus = func(seq uint64, payload []byte) {
			m := nats.NewMsg(subj)
			m.Header.Set(KVEventsSeqHeader, strconv.FormatUint(seq, 10))
			m.Data = payload
			_ = nc.PublishMsg(m) // buffered by the client; a disconnected bus drops
		}
	}
	pub, err := kvevents.Listen(ctx, opts)
	if err != nil {
		key := "kv_events"
		if strings.Contains(err.Error(), "replay ROUTER") {
			key = "kv_events_replay"
		}
		return withCode(exitUsage, fmt.Errorf("%s: %w (set --%s / %s: to a free address, or \"\" to turn KV events off)",
			key, err, strings.ReplaceAll(key, "_", "-"), key))
	}
	tr := kvevents.NewTracker(kvevents.TrackerOptions{Sink: pub, Names: fuseNames{d}, Tiers: d.store, Layouts: layouts,
		Kind: fusefs.ObjectKind, Logger: d.log.With("component", "kvevents")})
	d.kv = &kvState{pub: pub, tracker: tr}
	return nil
}

// kvChanged is fusefs Options.OnChange (nil without kv_events).
func (d *daemon) kvChanged() func(tiering.ObjectID) {
	if d.kv == nil {
		return nil
	}
	return d.kv.tracker.Changed
}

// startKVEvents runs the tracker once the mount serves.
func (d *daemon) startKVEvents(ctx context.Context) {
	if d.kv == nil {
		return
	}
	d.log.Info("KV events", "endpoint", d.cfg.KVEvents, "replay", d.cfg.KVEventsReplay, "topic", d.cfg.KVEventsTopic)
	d.goroutine(ctx, "kv-events", d.kv.tracker.Run)
}

// closeKVEvents closes the sockets (after the tracker has stopped).
func (d *daemon) closeKVEvents() {
	if d.kv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d.kv.pub.Close(ctx); err != nil {
		d.log.Warn("KV events: close", "err", err)
	}
}

// fuseNames is the tracker's view of names (the catalog) and of open files
// (the mount), both set once it is mounted.
type fuseNames struct{ d *daemon }

func (n fuseNames) Path(id tiering.ObjectID) (string, string, bool) {
	if n.d.names == nil {
		return "", "", false
	}
	return n.d.names.Path(id)
}

func (n fuseNames) Writing(id tiering.ObjectID) bool {
	return n.d.fuse != nil && n.d.fuse.Writing(id)
}
