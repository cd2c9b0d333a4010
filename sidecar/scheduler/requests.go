package scheduler

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ctxmem/ctxmemd/sidecar/bus"
	"github.com/ctxmem/ctxmemd/sidecar/msg"
)

// defaultRequestDeadline applies to requests without a deadline.
const defaultRequestDeadline = 5 * time.Second

// defaultControlDeadline applies to operator commands without a deadline
// (a sink of a large object takes a while).
const defaultControlDeadline = 30 * time.Second

// liveHosts returns the hosts that reported within the host TTL.
func (s *Scheduler) liveHostsLocked() []string {
	ttl := s.cfg.Limits.HostTTL
	if ttl == 0 {
		ttl = 10 * time.Second
	}
	var out []string
	for h, hv := range s.hosts {
		if time.Since(hv.seen) <= ttl {
			out = append(out, h)
		}
	}
	sort.Strings(out)
	return out
}

// dispatch sends cmds and waits for their acks until deadline; the result
// has one Ack per command (status "error" for no answer).
func (s *Scheduler) dispatch(ctx context.Context, res *bus.Resources, cmds []*msg.Command, deadline time.Time) []msg.Ack {
	chans := make([]chan msg.Ack, len(cmds))
	s.mu.Lock()
	for i, c := range cmds {
		chans[i] = make(chan msg.Ack, 1)
		s.waits[c.ID] = chans[i]
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		for _, c := range cmds {
			delete(s.waits, c.ID)
		}
		s.mu.Unlock()
	}()
	for _, c := range cmds {
		s.send(ctx, res, c)
	}
	// Acks travel back through the telemetry stream: allow a little past
	// the deadline for the host's "expired" answer to arrive.
	wctx, cancel := context.WithDeadline(ctx, deadline.Add(time.Second))
	defer cancel()
	out := make([]msg.Ack, len(cmds))
	for i, c := range cmds {
		select {
		case a := <-chans[i]:
			out[i] = a
		case <-wctx.Done():
			out[i] = msg.Ack{V: msg.Version, Host: c.Host, ID: c.ID, Op: c.Op, Status: msg.AckError,
				Error: "no answer from the host before the deadline"}
		}
	}
	return out
}

// prestage answers a PrestageRequest: each path goes to the hosts the view
// says hold it (every live host when none is known), as a prestage command
// with the request's deadline; the reply lists every host's outcome.
func (s *Scheduler) prestage(ctx context.Context, res *bus.Resources, m *nats.Msg) {
	var req msg.PrestageRequest
	reply := msg.PrestageReply{V: msg.Version, Leader: s.cfg.ID}
	if err := msg.Decode(m.Data, &req); err != nil {
		reply.Error = err.Error()
		s.respond(m, &reply)
		return
	}
	reply.ID = req.ID
	if req.ID == "" {
		req.ID = fmt.Sprint(time.Now().UnixNano())
	}
	deadline := time.Unix(0, req.Deadline)
	if req.Deadline == 0 {
		deadline = time.Now().Add(defaultRequestDeadline)
	}
	s.mu.Lock()
	s.stats.PrestageReqs++
	live := s.liveHostsLocked()
	var cmds []*msg.Command
	for _, p := range req.Paths {
		var hosts []string
		slot, known := s.names.lookup(req.Namespace, p)
		switch {
		case req.Host != "":
			hosts = []string{req.Host}
		case known:
			for h := range s.names.holders(slot) {
				hosts = append(hosts, h)
			}
			sort.Strings(hosts)
		default:
			hosts = live
		}
		for _, h := range hosts {
			cmd := &msg.Command{ID: msg.CommandID(msg.OpPrestage, h, req.ID, req.Namespace, p), Host: h,
				Op: msg.OpPrestage, Namespace: req.Namespace, Path: p, Deadline: deadline.UnixNano(),
				Reason: "prestage request"}
			if id, ok := s.idOfLocked(known, slot, h); ok {
				if hv := s.hosts[h]; hv != nil {
					cmd.Object, cmd.Boot = id, hv.boot
				}
			}
			cmds = append(cmds, cmd)
		}
		if len(hosts) == 0 {
			reply.Results = append(reply.Results, msg.PrestageResult{Path: p, Status: "no_host",
				Error: "no live host is known to the scheduler"})
		}
	}
	s.mu.Unlock()
	for i, a := range s.dispatch(ctx, res, cmds, deadline) {
		reply.Results = append(reply.Results, msg.PrestageResult{Path: cmds[i].Path, Host: a.Host, Status: a.Status,
			Error: a.Error, Blocks: a.Blocks, TookUs: a.TookUs})
	}
	s.respond(m, &reply)
}

// idOfLocked returns host's object id of the name in slot, when the name
// is known to the view at all. s.mu held.
func (s *Scheduler) idOfLocked(known bool, slot uint32, host string) (uint64, bool) {
	if !known {
		return 0, false
	}
	return s.names.idOf(slot, host)
}

// control forwards an operator's Command to its host and replies with the
// host's Ack.
func (s *Scheduler) control(ctx context.Context, res *bus.Resources, m *nats.Msg) {
	var cmd msg.Command
	if err := msg.Decode(m.Data, &cmd); err != nil || cmd.Host == "" || cmd.Op == "" {
		why := "a command needs host and op"
		if err != nil {
			why = err.Error()
		}
		s.respond(m, &msg.Ack{V: msg.Version, Status: msg.AckRefused, Error: why})
		return
	}
	if cmd.ID == "" {
		cmd.ID = msg.CommandID(cmd.Op, cmd.Host, "control", time.Now().UnixNano(), cmd.Namespace, cmd.Path)
	}
	if cmd.Deadline == 0 {
		cmd.Deadline = time.Now().Add(defaultControlDeadline).UnixNano()
	}
	deadline := time.Unix(0, cmd.Deadline)
	if cmd.Reason == "" {
		cmd.Reason = "operator request"
	}
	acks := s.dispatch(ctx, res, []*msg.Command{&cmd}, deadline)
	s.respond(m, &acks[0])
}

func (s *Scheduler) respond(m *nats.Msg, v any) {
	if m.Reply == "" {
		return
	}
	data, err := msg.Encode(v)
	if err != nil {
		return
	}
	if err := m.Respond(data); err != nil {
		s.log.Debug("scheduler: reply not sent", "err", err)
	}
}
