// Package client talks to a ctxmemd cluster's control bus on behalf of
// operators and routers: prestage requests, operator commands, and the
// cluster view (hosts, their tiers, the scheduler leader and replicas).
package client

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ctxmem/ctxmemd/sidecar/msg"
)

// ErrNoScheduler is returned (wrapped) when no scheduler answered a
// request: none runs, or leadership is changing (retry).
var ErrNoScheduler = errors.New("no scheduler answered")

// Prestage sends req to the acting scheduler and waits for its reply
// (until the request deadline plus 3 s). Errors: ErrNoScheduler, a
// malformed reply, ctx.
func Prestage(ctx context.Context, nc *nats.Conn, names msg.Names, req msg.PrestageRequest) (*msg.PrestageReply, error) {
	req.V = msg.Version
	if req.Deadline == 0 {
		req.Deadline = time.Now().Add(5 * time.Second).UnixNano()
	}
	data, err := msg.Encode(&req)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithDeadline(ctx, time.Unix(0, req.Deadline).Add(3*time.Second))
	defer cancel()
	m, err := nc.RequestWithContext(rctx, names.Prestage(), data)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return nil, fmt.Errorf("%w (prestage)", ErrNoScheduler)
		}
		return nil, fmt.Errorf("prestage request: %w", err)
	}
	var rep msg.PrestageReply
	if err := msg.Decode(m.Data, &rep); err != nil {
		return nil, err
	}
	if rep.Error != "" {
		return &rep, fmt.Errorf("scheduler refused the request: %s", rep.Error)
	}
	return &rep, nil
}

// Control sends an operator command through the acting scheduler and
// returns the host's Ack. Errors: ErrNoScheduler, ctx.
func Control(ctx context.Context, nc *nats.Conn, names msg.Names, cmd msg.Command) (*msg.Ack, error) {
	cmd.V = msg.Version
	if cmd.Deadline == 0 {
		cmd.Deadline = time.Now().Add(30 * time.Second).UnixNano()
	}
	data, err := msg.Encode(&cmd)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithDeadline(ctx, time.Unix(0, cmd.Deadline).Add(3*time.Second))
	defer cancel()
	m, err := nc.RequestWithContext(rctx, names.Control(), data)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return nil, fmt.Errorf("%w (control)", ErrNoScheduler)
		}
		return nil, fmt.Errorf("control request: %w", err)
	}
	var ack msg.Ack
	if err := msg.Decode(m.Data, &ack); err != nil {
		return nil, err
	}
	return &ack, nil
}

// Cluster is the cluster view `ctxmemd status --cluster` prints.
type Cluster struct {
	Name     string          `json:"cluster"`
	Leader   *msg.Leader     `json:"leader,omitempty"`
	Replicas []msg.Leader    `json:"replicas"`
	Hosts    []msg.HostState `json:"hosts"`
}

// View reads the hosts and scheduler buckets of cluster names. Errors:
// JetStream unreachable, ctx. Missing buckets give an empty view.
func View(ctx context.Context, nc *nats.Conn, names msg.Names) (*Cluster, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	c := &Cluster{Name: names.Cluster}
	if kv, err := js.KeyValue(ctx, names.HostsBucket()); err == nil {
		if err := eachValue(ctx, kv, func(k string, v []byte) {
			var hs msg.HostState
			if msg.Decode(v, &hs) == nil {
				c.Hosts = append(c.Hosts, hs)
			}
		}); err != nil {
			return nil, err
		}
	} else if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("hosts bucket: %w", err)
	}
	if kv, err := js.KeyValue(ctx, names.SchedulerBucket()); err == nil {
		if err := eachValue(ctx, kv, func(k string, v []byte) {
			var l msg.Leader
			if msg.Decode(v, &l) != nil {
				return
			}
			if k == msg.LeaderKey {
				c.Leader = &l
			} else if strings.HasPrefix(k, "replica.") {
				c.Replicas = append(c.Replicas, l)
			}
		}); err != nil {
			return nil, err
		}
	} else if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("scheduler bucket: %w", err)
	}
	sort.Slice(c.Hosts, func(i, j int) bool { return c.Hosts[i].Host < c.Hosts[j].Host })
	sort.Slice(c.Replicas, func(i, j int) bool { return c.Replicas[i].ID < c.Replicas[j].ID })
	return c, nil
}

func eachValue(ctx context.Context, kv jetstream.KeyValue, fn func(string, []byte)) error {
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return err
	}
	for k := range keys.Keys() {
		e, err := kv.Get(ctx, k)
		if err != nil {
			continue // expired between list and get
		}
		fn(k, e.Value())
	}
	return nil
}
