package sidecar

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ctxmem/ctxmemd/sidecar/msg"
	"github.com/ctxmem/ctxmemd/tiering"
)

// seenCap bounds the in-process set of applied command ids (the applied
// bucket remembers them across restarts).
const seenCap = 1 << 16

// commandTimeout bounds a command without a deadline.
const commandTimeout = time.Minute

func (a *Agent) worker(ctx context.Context, nc *nats.Conn, cmds <-chan jetstream.Msg) {
	for {
		select {
		case <-ctx.Done():
			return
		case m := <-cmds:
			a.handle(ctx, nc, m)
		}
	}
}

// handle applies one command message and acknowledges it, both to
// JetStream (so it is not redelivered) and to the scheduler (an Ack on
// the telemetry stream). A malformed message or one for another host is
// logged and terminated (never redelivered).
func (a *Agent) handle(ctx context.Context, nc *nats.Conn, m jetstream.Msg) {
	var cmd msg.Command
	if err := msg.Decode(m.Data(), &cmd); err != nil {
		a.c.malformed.Add(1)
		a.log.Warn("control bus: dropping malformed command", "subject", m.Subject(), "bytes", len(m.Data()), "err", err)
		_ = m.Term()
		return
	}
	if cmd.Host != a.cfg.Host || cmd.ID == "" {
		a.c.malformed.Add(1)
		a.log.Warn("control bus: dropping command not for this host", "id", cmd.ID, "host", cmd.Host)
		_ = m.Term()
		return
	}
	start := time.Now()
	ack := msg.Ack{V: msg.Version, Host: a.cfg.Host, ID: cmd.ID, Op: cmd.Op}
	first, err := a.claim(ctx, nc, cmd.ID)
	switch {
	case err != nil:
		// The applied bucket cannot be reached: try again later rather
		// than risk applying twice.
		a.log.Debug("control bus: cannot record command; redelivery later", "id", cmd.ID, "err", err)
		_ = m.NakWithDelay(time.Second)
		return
	case !first:
		a.c.duplicates.Add(1)
		ack.Status = msg.AckDuplicate
	default:
		ack.Status, ack.Blocks, ack.Where, ack.Error = a.apply(ctx, &cmd)
		switch ack.Status {
		case msg.AckOK:
			a.c.applied.Add(1)
		case msg.AckError:
			a.c.failed.Add(1)
		}
		a.log.Debug("command", "id", cmd.ID, "op", cmd.Op, "ns", cmd.Namespace, "path", cmd.Path,
			"status", ack.Status, "err", ack.Error)
	}
	ack.TookUs = time.Since(start).Microseconds()
	ack.Time = time.Now().UnixNano()
	if data, err := msg.Encode(&ack); err == nil {
		a.out.add(outMsg{subject: a.cfg.Names.Ack(a.cfg.Host), id: "ack." + a.cfg.Host + "." + cmd.ID + "." + ack.Status, data: data})
	}
	_ = m.Ack()
	a.kick()
}

// kick flushes the outbox soon (acks should not wait for the next report).
func (a *Agent) kick() {
	select {
	case a.flushNow <- struct{}{}:
	default:
	}
}

// claim records that this host applies id, once: it reports first=false
// when the id was applied before (by this process or, through the applied
// bucket, by an earlier run of this host).
func (a *Agent) claim(ctx context.Context, nc *nats.Conn, id string) (first bool, err error) {
	a.seenMu.Lock()
	if _, ok := a.seen[id]; ok {
		a.seenMu.Unlock()
		return false, nil
	}
	a.seenMu.Unlock()
	kv := a.applied.Load()
	if kv == nil {
		return false, errors.New("applied bucket not ready")
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = (*kv).Create(cctx, msg.AppliedKey(a.cfg.Host, id), []byte{1})
	if errors.Is(err, jetstream.ErrKeyExists) {
		a.remember(id)
		return false, nil
	}
	if err != nil {
		return false, err
	}
	a.remember(id)
	return true, nil
}

func (a *Agent) remember(id string) {
	a.seenMu.Lock()
	defer a.seenMu.Unlock()
	if _, ok := a.seen[id]; ok {
		return
	}
	a.seen[id] = struct{}{}
	a.seenQ = append(a.seenQ, id)
	if len(a.seenQ) > seenCap {
		delete(a.seen, a.seenQ[0])
		a.seenQ = a.seenQ[1:]
	}
}

// resolve finds the command's object: by id when it was issued for this
// boot, else by namespace and path.
func (a *Agent) resolve(cmd *msg.Command) (tiering.ObjectID, bool) {
	if cmd.Object != 0 && cmd.Boot == a.boot {
		if _, err := a.store.Residency(tiering.ObjectID(cmd.Object)); err == nil {
			return tiering.ObjectID(cmd.Object), true
		}
		return 0, false
	}
	if cmd.Path == "" {
		return 0, false
	}
	id, err := a.files.Lookup(cmd.Namespace, cmd.Path)
	return id, err == nil
}

// apply carries out cmd and returns the Ack status, the blocks it moved,
// where the object is afterwards and an error text.
func (a *Agent) apply(ctx context.Context, cmd *msg.Command) (status string, blocks int, w msg.Where, errText string) {
	deadline := time.Now().Add(commandTimeout)
	if cmd.Deadline != 0 {
		deadline = time.Unix(0, cmd.Deadline)
		if time.Now().After(deadline) {
			return msg.AckExpired, 0, 0, "deadline passed before the command was taken"
		}
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	switch cmd.Op {
	case msg.OpDropNamespace:
		n, err := a.files.DropNamespace(ctx, cmd.Namespace)
		if errors.Is(err, fs.ErrNotExist) {
			return msg.AckNotFound, 0, 0, err.Error()
		}
		return statusOf(err), n, 0, errString(err)
	case msg.OpSetKnobs:
		if cmd.Knobs == nil {
			return msg.AckRefused, 0, 0, "no knobs given"
		}
		if err := a.applyKnobs(*cmd.Knobs); err != nil {
			return msg.AckRefused, 0, 0, err.Error()
		}
		return msg.AckOK, 0, 0, ""
	case msg.OpResync:
		a.needResync.Store(true) // Run publishes the inventory
		a.kick()
		return msg.AckOK, 0, 0, ""
	case msg.OpReclaim:
		if a.cfg.Sharing == nil {
			return msg.AckRefused, 0, 0, "no shared pool on this host"
		}
		n, err := a.cfg.Sharing.Reclaim(ctx, cmd.Extent)
		switch {
		case errors.Is(err, tiering.ErrNotExist):
			return msg.AckNotFound, 0, 0, err.Error()
		case errors.Is(err, tiering.ErrInvalid):
			return msg.AckRefused, 0, 0, err.Error()
		}
		return statusOf(err), n, 0, errString(err)
	case msg.OpSink, msg.OpDemote, msg.OpPromote, msg.OpPrestage, msg.OpPin, msg.OpUnpin, msg.OpShare:
	default:
		return msg.AckRefused, 0, 0, fmt.Sprintf("unknown op %q", cmd.Op)
	}
	id, ok := a.resolve(cmd)
	if !ok {
		return msg.AckNotFound, 0, 0, ""
	}
	if cmd.Op == msg.OpPrestage || cmd.Op == msg.OpPromote || cmd.Op == msg.OpPin {
		// Wanted soon: count it as a use, so the object is not reported
		// cold (and sunk) again right after it was brought up.
		a.rank.Touch(id, time.Now())
	}
	var err error
	switch cmd.Op {
	case msg.OpSink:
		var r tiering.MoveResult
		r, err = a.store.Sink(ctx, id)
		blocks = r.Moved + r.Released
	case msg.OpDemote:
		var r tiering.MoveResult
		r, err = a.store.Demote(ctx, id)
		blocks = r.Released
	case msg.OpPromote:
		err = a.store.Prestage(ctx, id)
	case msg.OpPrestage:
		before, _ := a.store.Residency(id)
		err = a.store.PrestageWait(ctx, id)
		after, _ := a.store.Residency(id)
		blocks = after.G2 - before.G2
		if err != nil && ctx.Err() != nil {
			return msg.AckExpired, blocks, where(after), "deadline passed: prestage abandoned"
		}
	case msg.OpShare:
		blocks, err = a.share(ctx, id, cmd.Force)
	case msg.OpPin:
		err = a.store.SetPinned(id, true)
	case msg.OpUnpin:
		err = a.store.SetPinned(id, false)
	}
	res, rerr := a.store.Residency(id)
	if rerr == nil {
		w = where(res)
	}
	switch {
	case errors.Is(err, tiering.ErrNotExist):
		return msg.AckNotFound, blocks, w, ""
	case errors.Is(err, tiering.ErrPinned), errors.Is(err, tiering.ErrInvalid):
		return msg.AckRefused, blocks, w, err.Error()
	}
	return statusOf(err), blocks, w, errString(err)
}

func statusOf(err error) string {
	if err != nil {
		return msg.AckError
	}
	return msg.AckOK
}

func errString(err error) string {
	if err != nil {
		return err.Error()
	}
	return ""
}

// resync publishes the host's whole inventory (every named object) as
// Events batches marked Resync, the last one marked Last, so a new
// scheduler leader can rebuild its view.
func (a *Agent) resync(ctx context.Context) {
	a.resyncMu.Lock()
	defer a.resyncMu.Unlock()
	now := time.Now()
	objs := a.store.Objects()
	var batch []msg.Event
	send := func(last bool) {
		ev := &msg.Events{V: msg.Version, Host: a.cfg.Host, Boot: a.boot, Seq: a.seq.Add(1), Time: now.UnixNano(),
			Resync: true, Last: last, Events: batch}
		if data, err := msg.Encode(ev); err == nil {
			a.out.add(outMsg{subject: a.cfg.Names.Event(a.cfg.Host), id: msgID(a.boot, ev.Seq), data: data})
		}
		batch = nil
	}
	for _, o := range objs {
		if ctx.Err() != nil {
			return
		}
		if o.Durability != tiering.DurabilityCache {
			continue // a device (NBD export) is not KV cache the cluster may share
		}
		ns, path, ok := a.files.Path(o.ID)
		if !ok {
			continue
		}
		ev := msg.Event{Kind: msg.EvStored, Namespace: ns, Path: path, ID: uint64(o.ID), Size: o.Size}
		if res, err := a.store.Residency(o.ID); err == nil {
			ev.Where = where(res)
		}
		batch = append(batch, ev)
		if len(batch) == eventBatch {
			send(false)
		}
	}
	send(true)
}

// share carries out a share command on the sharing component.
func (a *Agent) share(ctx context.Context, id tiering.ObjectID, force bool) (int, error) {
	if a.cfg.Sharing == nil {
		return 0, fmt.Errorf("%w: no shared pool on this host", tiering.ErrInvalid)
	}
	ns, path, ok := a.files.Path(id)
	if !ok {
		return 0, tiering.ErrNotExist
	}
	return a.cfg.Sharing.Share(ctx, id, ns, path, force)
}
