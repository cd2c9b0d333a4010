package msg

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// Names are the subjects, streams, consumers and buckets of one cluster.
// Build them with For.
type Names struct {
	Cluster string
}

// For returns the names of cluster c (c must pass ValidToken).
func For(c string) Names { return Names{Cluster: c} }

func (n Names) prefix() string { return "ctxmem." + n.Cluster + ".v1." }

// Report is the subject of host's heat reports (Report), sidecar → scheduler.
func (n Names) Report(host string) string { return n.prefix() + "report." + host }

// Event is the subject of host's event batches (Events).
func (n Names) Event(host string) string { return n.prefix() + "event." + host }

// Ack is the subject of host's command acknowledgements (Ack).
func (n Names) Ack(host string) string { return n.prefix() + "ack." + host }

// Command is the subject of commands (Command) for host, scheduler → sidecar.
func (n Names) Command(host string) string { return n.prefix() + "cmd." + host }

// Prestage is the request subject (core NATS request/reply) on which the
// acting scheduler answers PrestageRequest with PrestageReply.
func (n Names) Prestage() string { return n.prefix() + "prestage" }

// Control is the request subject (core NATS request/reply) on which the
// acting scheduler takes a Command from an operator or router, forwards it
// to its host and replies with the host's Ack (or an Ack with status
// "error" when the host did not answer before the deadline).
func (n Names) Control() string { return n.prefix() + "control" }

// Telemetry is the JetStream stream holding reports, events and acks
// (subjects report.*, event.*, ack.*): limits retention, oldest dropped
// first when full, so a scheduler outage loses the oldest telemetry only.
func (n Names) Telemetry() string { return "CTXMEM_" + strings.ToUpper(n.Cluster) + "_TELEMETRY" }

// TelemetrySubjects are the subjects the Telemetry stream captures.
func (n Names) TelemetrySubjects() []string {
	p := n.prefix()
	return []string{p + "report.*", p + "event.*", p + "ack.*"}
}

// Commands is the JetStream stream holding commands (subjects cmd.*),
// work-queue retention: a command is removed once its host acknowledged it.
func (n Names) Commands() string { return "CTXMEM_" + strings.ToUpper(n.Cluster) + "_COMMANDS" }

// CommandSubjects are the subjects the Commands stream captures.
func (n Names) CommandSubjects() []string { return []string{n.prefix() + "cmd.*"} }

// HostConsumer is the durable consumer through which host receives its
// commands.
func (n Names) HostConsumer(host string) string { return "host-" + host }

// SchedulerConsumer is the durable consumer the acting scheduler reads
// telemetry through (shared by every replica: a new leader continues where
// the old one stopped).
func (n Names) SchedulerConsumer() string { return "scheduler" }

// HostsBucket is the key-value bucket of host liveness: key = host name,
// value = HostState, refreshed every report interval; a key older than the
// bucket's max age (the host TTL) disappears.
func (n Names) HostsBucket() string { return "ctxmem_" + n.Cluster + "_hosts" }

// SchedulerBucket is the key-value bucket of scheduler leadership: key
// LeaderKey = Leader, created by the replica that wins and renewed by
// compare-and-set; "replica.<id>" keys list the running replicas.
func (n Names) SchedulerBucket() string { return "ctxmem_" + n.Cluster + "_scheduler" }

// AppliedBucket is the key-value bucket of applied command ids: key
// "<host>.<command id>", created (compare-and-set) by a sidecar before it
// applies a command, so a redelivered command is never applied twice.
func (n Names) AppliedBucket() string { return "ctxmem_" + n.Cluster + "_applied" }

// LeaderKey is the key of the Leader record in SchedulerBucket.
const LeaderKey = "leader"

// ReplicaKey is the key under which replica id announces itself.
func ReplicaKey(id string) string { return "replica." + id }

// AppliedKey is the key recording that host applied command id (ids are
// hex or token-safe; see CommandID).
func AppliedKey(host, id string) string { return host + "." + id }

// HostOf returns the last token of a report/event/ack subject (the host).
func HostOf(subject string) string {
	if i := strings.LastIndexByte(subject, '.'); i >= 0 {
		return subject[i+1:]
	}
	return subject
}

// KindOf returns "report", "event" or "ack" for a telemetry subject of
// this cluster, or "" for anything else.
func (n Names) KindOf(subject string) string {
	rest, ok := strings.CutPrefix(subject, n.prefix())
	if !ok {
		return ""
	}
	kind, _, _ := strings.Cut(rest, ".")
	switch kind {
	case "report", "event", "ack":
		return kind
	}
	return ""
}

// CommandID builds a deterministic, token-safe command id "<op>-<host>-<16
// hex digits>" where the digits are the first 8 bytes of the SHA-256 of
// parts, so two scheduler replicas that take the same decision produce the
// same id (and JetStream's duplicate window drops the second publish),
// while different decisions never share one in practice.
func CommandID(op, host string, parts ...any) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprint(h, p)
		h.Write([]byte{0})
	}
	return op + "-" + host + "-" + hex.EncodeToString(h.Sum(nil)[:8])
}
