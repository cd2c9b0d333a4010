package bus

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ctxmem/ctxmemd/sidecar/msg"
)

// Limits size the cluster's JetStream resources.
type Limits struct {
	// TelemetryBytes caps the telemetry stream (default 64 MiB); when full
	// the oldest reports, events and acks are dropped first.
	TelemetryBytes int64
	// TelemetryAge drops telemetry older than this (default 10 min).
	TelemetryAge time.Duration
	// CommandAge drops commands no host took within this (default 10 min).
	CommandAge time.Duration
	// HostTTL is how long a host stays listed after its last liveness
	// update (default 10 s; whole seconds).
	HostTTL time.Duration
	// LeaderTTL is how long scheduler leadership lasts without renewal
	// (default 5 s; whole seconds).
	LeaderTTL time.Duration
	// AppliedTTL is how long applied command ids are remembered (default
	// 1 h): longer than any redelivery.
	AppliedTTL time.Duration
	// Replicas is the JetStream replication factor (default 1; 3 on a
	// clustered NATS).
	Replicas int
}

func (l *Limits) fill() {
	if l.TelemetryBytes == 0 {
		l.TelemetryBytes = 64 << 20
	}
	if l.TelemetryAge == 0 {
		l.TelemetryAge = 10 * time.Minute
	}
	if l.CommandAge == 0 {
		l.CommandAge = 10 * time.Minute
	}
	if l.HostTTL == 0 {
		l.HostTTL = 10 * time.Second
	}
	if l.LeaderTTL == 0 {
		l.LeaderTTL = 5 * time.Second
	}
	if l.AppliedTTL == 0 {
		l.AppliedTTL = time.Hour
	}
	if l.Replicas == 0 {
		l.Replicas = 1
	}
}

// Resources are a cluster's JetStream handles.
type Resources struct {
	Names     msg.Names
	JS        jetstream.JetStream
	Hosts     jetstream.KeyValue
	Scheduler jetstream.KeyValue
	Applied   jetstream.KeyValue
	Limits    Limits
}

// Ensure creates (or updates to the given limits) the streams and buckets
// of cluster names.Cluster. It is idempotent and safe to run from every
// host and replica at once. Errors: JetStream not enabled on the server,
// no permission, ctx.
func Ensure(ctx context.Context, nc *nats.Conn, names msg.Names, lim Limits) (*Resources, error) {
	lim.fill()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: names.Telemetry(), Subjects: names.TelemetrySubjects(),
		Retention: jetstream.LimitsPolicy, Discard: jetstream.DiscardOld,
		MaxBytes: lim.TelemetryBytes, MaxAge: lim.TelemetryAge,
		Storage: jetstream.FileStorage, Replicas: lim.Replicas, Duplicates: min(2*time.Minute, lim.TelemetryAge),
		Description: "ctxmemd heat reports, events and command acks",
	}); err != nil {
		return nil, fmt.Errorf("stream %s: %w", names.Telemetry(), err)
	}
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: names.Commands(), Subjects: names.CommandSubjects(),
		Retention: jetstream.WorkQueuePolicy, Discard: jetstream.DiscardOld,
		MaxAge: lim.CommandAge, MaxBytes: 64 << 20,
		Storage: jetstream.FileStorage, Replicas: lim.Replicas, Duplicates: min(2*time.Minute, lim.CommandAge),
		Description: "ctxmemd scheduler commands to hosts",
	}); err != nil {
		return nil, fmt.Errorf("stream %s: %w", names.Commands(), err)
	}
	r := &Resources{Names: names, JS: js, Limits: lim}
	for _, b := range []struct {
		kv   *jetstream.KeyValue
		name string
		ttl  time.Duration
		desc string
	}{
		{&r.Hosts, names.HostsBucket(), lim.HostTTL, "ctxmemd host liveness"},
		{&r.Scheduler, names.SchedulerBucket(), lim.LeaderTTL, "ctxmemd scheduler leadership"},
		{&r.Applied, names.AppliedBucket(), lim.AppliedTTL, "ctxmemd applied command ids"},
	} {
		kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: b.name, Description: b.desc, History: 1, TTL: b.ttl,
			Storage: jetstream.FileStorage, Replicas: lim.Replicas,
			LimitMarkerTTL: max(b.ttl, time.Second),
		})
		if err != nil {
			return nil, fmt.Errorf("bucket %s: %w", b.name, err)
		}
		*b.kv = kv
	}
	return r, nil
}
