// Package metrics exports ctxmemd's status as Prometheus metrics: a custom
// prometheus.Collector that reads a snapshot function on every scrape (no
// global registry, no state of its own), an HTTP handler and Serve, which
// listens on a (by default loopback) address until its context ends.
//
// Series (all prefixed ctxmem_):
//
//	tier_used_bytes{tier}, tier_capacity_bytes{tier}, tier_blocks{tier}   gauges
//	tier_high_watermark_ratio{tier}, tier_low_watermark_ratio{tier}       gauges (when set)
//	tier_requests_total{tier,type}                                       counters (G4: object-store requests)
//	read_requests_total, read_request_hits_total                         counters
//	block_reads_total, block_misses_total, block_hits_total{tier}        counters
//	read_bytes_total, byte_hits_total{tier}                              counters
//	hit_ratio{kind="served_from_g2"|"found_in_any_tier"}                 gauges (0–1, since start; package hitratio)
//	lookup_hits_total{namespace,tier}, lookup_misses_total{namespace}    counters
//	namespace_objects{namespace}, namespace_bytes{namespace}, namespace_quota_bytes{namespace} gauges
//	restore_skipped_total{namespace} counter; tier_block_read_seconds{tier} gauge
//	prestage_blocks_total{result="staged"|"useful"|"wasted"}, prestage_wasted_bytes_total counters
//	namespace_tokens_found_total{namespace}, namespace_prefill_avoided_seconds_total{namespace} counters
//	nbd_connections_total, nbd_requests_total, nbd_request_errors_total, nbd_bytes_total{direction} counters; nbd_active_connections gauge
//	control_connected, control_queued_bytes, control_scheduler_leader gauges
//	control_messages_total{kind}, control_commands_total{result}, control_dropped_total{kind} counters
//	g4_removed_blocks_total{reason="size"|"expired"}                     counters
//	fuse_request_duration_seconds{op}, nbd_request_duration_seconds{op} histograms (Latencies)
//	dirty_bytes, dirty_limit_bytes                                       gauges
//	writer_waits_total, promotions_total                                 counters
//	g4_run_reads_total, g4_run_blocks_total                              counters
//	evictions_total{tier}, demotions_total{tier}, dropped_blocks_total{reason} counters
//	admissions_refused_total, crc_errors_total, objects_lost_total       counters
//	objects                                                              gauge
//	build_info{version}                                                  gauge (1)
package metrics

import (
	"maps"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ctxmem/ctxmemd/hitratio"
	"github.com/ctxmem/ctxmemd/tiering"
)

// Snapshot is what one scrape reports.
type Snapshot struct {
	Tiers []tiering.TierUsage
	Stats tiering.Stats
	// Passthrough is the mount's FUSE passthrough state; nil before the
	// mount serves.
	Passthrough *Passthrough
	// Lookups are the mount's KV lookups (package hitratio): the source
	// of ctxmem_hit_ratio.
	Lookups hitratio.Counts
	// Namespaces are the served namespaces, with their lookups.
	Namespaces []Namespace
	// Curves are the online miss-ratio curves (curves.go): the total
	// (Namespace "") and per namespace.
	Curves []Curve
	// NBD is the block-device front end's counters; nil without NBD.
	NBD *NBD
	// Control is the control plane's counters; nil without one.
	Control *Control
	// ReadCost is each lower tier's estimated block read time.
	ReadCost []TierReadCost
	// G4Evicted and G4Expired count blocks G4 deleted for its size bound
	// (g4_size) and for age (g4_ttl).
	G4Evicted, G4Expired int64
}

// NBD is the NBD server's counters in a Snapshot (nbd.Stats).
type NBD struct {
	Connections, ActiveConnections, Requests, Errors, BytesRead, BytesWritten int64
}

// Control is the control plane's counters in a Snapshot (the sidecar
// agent's sidecar.Stats, and whether this daemon's scheduler replica
// leads).
type Control struct {
	Connected                                                             bool
	Published, Applied, Duplicates, Failed, Malformed                     int64
	DroppedMessages, DroppedEvents, DroppedPoolEvents, Queued, QueuedByte int64
	// SchedulerLeader is 1 when this daemon's replica leads, 0 when it
	// follows, -1 when the daemon runs none.
	SchedulerLeader int
}

// Namespace is one namespace's figures in a Snapshot.
type Namespace struct {
	Name           string
	Objects, Bytes int64
	// QuotaBytes is 0 without a quota.
	QuotaBytes int64
	Lookups    hitratio.Counts
	// TokensFound and PrefillAvoidedS value the lookup hits
	// (admin.NamespaceStatus); 0 without tokens_per_block.
	TokensFound     int64
	PrefillAvoidedS float64
	// RestoreSkipped counts opens answered as misses by the namespace's
	// restore budget.
	RestoreSkipped int64
}

// TierReadCost is a lower tier's estimated block read time in a Snapshot.
type TierReadCost struct {
	Tier    string
	Seconds float64
}

// Passthrough is the FUSE front end's passthrough state in a Snapshot.
type Passthrough struct {
	On bool
	// DaemonReads and DaemonWrites are READ and WRITE requests the daemon
	// served (passthrough opens send none).
	DaemonReads, DaemonWrites int64
}

// SnapshotFunc returns the current snapshot; it is called once per scrape
// and must be safe for concurrent use.
type SnapshotFunc func() Snapshot

// Collector is a prometheus.Collector over a SnapshotFunc.
type Collector struct {
	snap    SnapshotFunc
	version string
	descs   descs
}

type descs struct {
	tierUsed, tierCap, tierBlocks, tierHigh, tierLow          *prometheus.Desc
	reqs, reqHits, blockReads, blockMisses, blockHits         *prometheus.Desc
	byteReads, byteHits, hitRatio                             *prometheus.Desc
	dirty, dirtyLimit, writerWaits, promotions                *prometheus.Desc
	g4RunReads, g4RunBlocks                                   *prometheus.Desc
	evictions, demotions, dropped, admRefused, crc, lost, obj *prometheus.Desc
	build                                                     *prometheus.Desc
	tierDegraded, tierRecovering, tierFull, storeDegraded     *prometheus.Desc
	tierHealth, tierHealthChanges, tierRefused                *prometheus.Desc
	ptOn, ptOpens, fuseReqs                                   *prometheus.Desc
	gcPending, gcDeleted, gcFailed                            *prometheus.Desc
	g3PutBytes, g3CompactedBytes, lookupMisses, lookupHits    *prometheus.Desc
	nsObjects, nsBytes, nsQuota                               *prometheus.Desc
	nbdConns, nbdActive, nbdReqs, nbdErrs, nbdBytes           *prometheus.Desc
	ctlConnected, ctlMsgs, ctlCmds, ctlDropped, ctlQueued     *prometheus.Desc
	ctlLeader, g4Removed, nsTokens, nsPrefill                 *prometheus.Desc
	prestage, prestageWasted                                  *prometheus.Desc
	restoreSkipped, readCost, tierRequests                    *prometheus.Desc
}

const ns = "ctxmem"

func newDesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(ns, "", name), help, labels, nil)
}

// NewCollector returns a collector that calls snap on every scrape and
// reports version in ctxmem_build_info.
func NewCollector(snap SnapshotFunc, version string) *Collector {
	return &Collector{snap: snap, version: version, descs: descs{
		tierUsed:     newDesc("tier_used_bytes", "Bytes of block payload held by the tier.", "tier"),
		tierCap:      newDesc("tier_capacity_bytes", "Configured capacity of the tier in bytes (0 = unbounded).", "tier"),
		tierBlocks:   newDesc("tier_blocks", "Blocks held by the tier.", "tier"),
		tierHigh:     newDesc("tier_high_watermark_ratio", "High watermark of the tier as a fraction of capacity.", "tier"),
		tierLow:      newDesc("tier_low_watermark_ratio", "Low watermark of the tier as a fraction of capacity.", "tier"),
		tierRequests: newDesc("tier_requests_total", "Requests sent to the tier's backend, by type (put, get, head, list, delete), for tiers billed per request (G4 on an object store).", "tier", "type"),
		reqs:         newDesc("read_requests_total", "Read requests (one ReadAt call each)."),
		reqHits:      newDesc("read_request_hits_total", "Read requests all of whose blocks were found."),
		blockReads:   newDesc("block_reads_total", "Block reads."),
		blockMisses:  newDesc("block_misses_total", "Block reads that found the block in no tier."),
		blockHits:    newDesc("block_hits_total", "Block reads served, by the tier that served them.", "tier"),
		byteReads:    newDesc("read_bytes_total", "Bytes requested by reads."),
		byteHits:     newDesc("byte_hits_total", "Bytes served, by tier.", "tier"),
		hitRatio: newDesc("hit_ratio", "KV lookup hit ratio of the mount since start (0-1): kind=\"served_from_g2\" is G2 hits / lookups, "+
			"kind=\"found_in_any_tier\" is hits in any tier / lookups; a lookup is an open for reading of an existing file (a hit) "+
			"or a name lookup answered ENOENT (a miss).", "kind"),
		dirty:             newDesc("dirty_bytes", "Bytes in G2 not yet written back."),
		dirtyLimit:        newDesc("dirty_limit_bytes", "Bound on dirty bytes; writers wait above it."),
		writerWaits:       newDesc("writer_waits_total", "Writes that waited for the dirty bound."),
		promotions:        newDesc("promotions_total", "Blocks copied up to G2 on read or prestage."),
		g4RunReads:        newDesc("g4_run_reads_total", "Batched restores from G4: runs of a pack's blocks brought up to G2 with one request."),
		g4RunBlocks:       newDesc("g4_run_blocks_total", "Blocks batched G4 restores brought up beside the one a reader or prestage asked for."),
		evictions:         newDesc("evictions_total", "Blocks that left a tier, by tier.", "tier"),
		demotions:         newDesc("demotions_total", "Blocks written to a tier by demotion or write-back, by target tier.", "tier"),
		dropped:           newDesc("dropped_blocks_total", "Blocks dropped, by reason.", "reason"),
		admRefused:        newDesc("admissions_refused_total", "Blocks refused by admission control."),
		crc:               newDesc("crc_errors_total", "CRC32C mismatches found on reads from G3, G3.5 or G4."),
		lost:              newDesc("objects_lost_total", "Objects removed because a block was gone from every tier."),
		obj:               newDesc("objects", "Live objects."),
		build:             newDesc("build_info", "Build information; value 1.", "version"),
		tierFull:          newDesc("tier_full", "1 while the tier answers \"no space\" to write-back (skipped a second at a time), else 0.", "tier"),
		storeDegraded:     newDesc("store_degraded", "1 when the store cannot keep its promises (its data directory was deleted under it), else 0."),
		tierDegraded:      newDesc("tier_degraded", "1 while the tier's backend does not answer (or its first listing is pending), else 0.", "tier"),
		tierHealth:        newDesc("tier_health", "1 for the tier's current health state (up, degraded, down, bypassed), 0 for the others.", "tier", "state"),
		tierHealthChanges: newDesc("tier_health_changes_total", "Changes of the tier's health into each state since start.", "tier", "state"),
		tierRefused:       newDesc("tier_calls_refused_total", "Puts and gets the core did not make because the tier was down, bypassed, or full within its backoff.", "tier"),
		ptOn:              newDesc("passthrough_on", "1 while opens of G2-resident files are served by FUSE passthrough, else 0."),
		ptOpens:           newDesc("passthrough_opens_total", "Opens served by FUSE passthrough from a memory file."),
		fuseReqs:          newDesc("fuse_daemon_requests_total", "READ and WRITE requests the daemon served through FUSE (passthrough opens send none), by op.", "op"),
		gcPending:         newDesc("gc_pending_blocks", "Block copies in lower tiers that no live block uses, queued for deletion."),
		gcDeleted:         newDesc("gc_deleted_blocks_total", "Garbage block copies deleted from lower tiers."),
		gcFailed:          newDesc("gc_failures_total", "Failed deletions of garbage block copies (each is retried with backoff)."),
		g3PutBytes:        newDesc("g3_put_bytes_total", "Payload bytes written to G3 by write-back and demotion."),
		g3CompactedBytes: newDesc("g3_compacted_bytes_total", "Payload bytes G3 reclaim copied forward (compaction); "+
			"write amplification is (put + compacted) / put."),
		lookupMisses: newDesc("lookup_misses_total", "KV lookup misses: lookups of names the namespace does not hold (ENOENT), "+
			"the kernel's own lookups before creating a name excluded.", "namespace"),
		lookupHits: newDesc("lookup_hits_total", "KV lookup hits: opens for reading of existing files, by the slowest tier the file "+
			"was served from.", "namespace", "tier"),
		nbdConns:     newDesc("nbd_connections_total", "NBD connections accepted."),
		nbdActive:    newDesc("nbd_active_connections", "NBD connections open now."),
		nbdReqs:      newDesc("nbd_requests_total", "NBD transmission requests answered."),
		nbdErrs:      newDesc("nbd_request_errors_total", "NBD transmission requests answered with an error."),
		nbdBytes:     newDesc("nbd_bytes_total", "NBD payload bytes, by direction (read: sent to clients; write: stored).", "direction"),
		ctlConnected: newDesc("control_connected", "1 while the sidecar is connected to the control bus (NATS), else 0."),
		ctlMsgs:      newDesc("control_messages_total", "Control-plane messages by kind: published (reports and events sent), malformed (received and refused).", "kind"),
		ctlCmds:      newDesc("control_commands_total", "Scheduler commands received by this host, by result: applied, duplicate, failed.", "result"),
		ctlDropped:   newDesc("control_dropped_total", "Telemetry dropped while the bus was away or slow, by kind: messages, events.", "kind"),
		ctlQueued:    newDesc("control_queued_bytes", "Telemetry bytes queued for the bus."),
		ctlLeader:    newDesc("control_scheduler_leader", "1 while this daemon's scheduler replica leads the cluster, 0 while it follows (absent without a replica)."),
		g4Removed:    newDesc("g4_removed_blocks_total", "Blocks G4 deleted itself, by reason: size (oldest first, above g4_high of g4_size), expired (older than g4_ttl).", "reason"),
		nsTokens: newDesc("namespace_tokens_found_total", "Prompt tokens in the files lookups found (hits × the namespace's tokens_per_block): "+
			"an upper bound of the tokens not recomputed.", "namespace"),
		nsPrefill: newDesc("namespace_prefill_avoided_seconds_total", "Prefill time the lookup hits saved (tokens found × the namespace's "+
			"prefill_us_per_token), an upper bound.", "namespace"),
		prestage: newDesc("prestage_blocks_total", "Blocks prestage brought up to G2 (result=staged), of them read before leaving G2 (useful) "+
			"and freed unread (wasted).", "result"),
		restoreSkipped: newDesc("restore_skipped_total", "Opens for reading answered as misses (ENOENT) because the file's predicted restore "+
			"exceeded the namespace's restore_budget; the file is prestaged meanwhile.", "namespace"),
		readCost: newDesc("tier_block_read_seconds", "Estimated time of one block read from the tier (moving average of reads; "+
			"a default before the first), the basis of restore budgets.", "tier"),
		prestageWasted: newDesc("prestage_wasted_bytes_total", "Bytes of prestaged blocks that left G2 unread."),
		nsObjects:      newDesc("namespace_objects", "Files (objects) in the namespace.", "namespace"),
		nsBytes:        newDesc("namespace_bytes", "Bytes of file data in the namespace.", "namespace"),
		nsQuota:        newDesc("namespace_quota_bytes", "The namespace's quota in bytes (absent without one).", "namespace"),
		tierRecovering: newDesc("tier_recovering", "1 while the daemon, started during the tier's outage, waits for its first listing "+
			"(blocks only that tier holds read as EIO), else 0.", "tier"),
	}}
}

// Describe sends every descriptor.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	d := c.descs
	for _, x := range []*prometheus.Desc{d.tierUsed, d.tierCap, d.tierBlocks, d.tierHigh, d.tierLow,
		d.reqs, d.reqHits, d.blockReads, d.blockMisses, d.blockHits, d.byteReads, d.byteHits, d.hitRatio,
		d.dirty, d.dirtyLimit, d.writerWaits, d.promotions, d.g4RunReads, d.g4RunBlocks, d.evictions, d.demotions, d.dropped,
		d.admRefused, d.crc, d.lost, d.obj, d.build, d.tierDegraded, d.tierRecovering, d.tierFull, d.storeDegraded, d.tierHealth, d.tierHealthChanges, d.tierRefused,
		d.ptOn, d.ptOpens, d.fuseReqs, d.gcPending, d.gcDeleted, d.gcFailed,
		d.g3PutBytes, d.g3CompactedBytes, d.lookupMisses, d.lookupHits, d.nsObjects, d.nsBytes, d.nsQuota,
		d.nbdConns, d.nbdActive, d.nbdReqs, d.nbdErrs, d.nbdBytes,
		d.ctlConnected, d.ctlMsgs, d.ctlCmds, d.ctlDropped, d.ctlQueued, d.ctlLeader, d.g4Removed, d.nsTokens, d.nsPrefill, d.prestage, d.prestageWasted, d.restoreSkipped, d.readCost, d.tierRequests} {
		ch <- x
	}
	ch <- reuseDistance
	ch <- nsReuseDistance
}

// Collect takes one snapshot and sends its metrics.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.snap()
	d := c.descs
	collectCurves(ch, s.Curves)
	gauge := func(desc *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, labels...)
	}
	counter := func(desc *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v), labels...)
	}
	byLabel := func(desc *prometheus.Desc, m map[string]int64) {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			counter(desc, m[k], k)
		}
	}
	counter(d.ptOpens, s.Stats.PassthroughOpens)
	gauge(d.gcPending, float64(s.Stats.GCPending))
	counter(d.gcDeleted, s.Stats.GCDeleted)
	counter(d.gcFailed, s.Stats.GCFailed)
	counter(d.g3PutBytes, s.Stats.G3PutBytes)
	counter(d.g3CompactedBytes, s.Stats.G3CompactedBytes)
	for _, n := range s.Namespaces {
		counter(d.lookupMisses, n.Lookups.Misses, n.Name)
		for _, t := range hitratio.Tiers() {
			counter(d.lookupHits, n.Lookups.Hits[t], n.Name, t)
		}
		counter(d.restoreSkipped, n.RestoreSkipped, n.Name)
		counter(d.nsTokens, n.TokensFound, n.Name)
		ch <- prometheus.MustNewConstMetric(d.nsPrefill, prometheus.CounterValue, n.PrefillAvoidedS, n.Name)
		gauge(d.nsObjects, float64(n.Objects), n.Name)
		gauge(d.nsBytes, float64(n.Bytes), n.Name)
		if n.QuotaBytes > 0 {
			gauge(d.nsQuota, float64(n.QuotaBytes), n.Name)
		}
	}
	for _, c := range s.ReadCost {
		gauge(d.readCost, c.Seconds, c.Tier)
	}
	counter(d.prestage, s.Stats.Prestaged, "staged")
	counter(d.prestage, s.Stats.PrestageUseful, "useful")
	counter(d.prestage, s.Stats.PrestageWasted, "wasted")
	counter(d.prestageWasted, s.Stats.PrestageWastedBytes)
	counter(d.g4Removed, s.G4Evicted, "size")
	counter(d.g4Removed, s.G4Expired, "expired")
	if n := s.NBD; n != nil {
		counter(d.nbdConns, n.Connections)
		gauge(d.nbdActive, float64(n.ActiveConnections))
		counter(d.nbdReqs, n.Requests)
		counter(d.nbdErrs, n.Errors)
		counter(d.nbdBytes, n.BytesRead, "read")
		counter(d.nbdBytes, n.BytesWritten, "write")
	}
	if c := s.Control; c != nil {
		gauge(d.ctlConnected, b2f(c.Connected))
		counter(d.ctlMsgs, c.Published, "published")
		counter(d.ctlMsgs, c.Malformed, "malformed")
		counter(d.ctlCmds, c.Applied, "applied")
		counter(d.ctlCmds, c.Duplicates, "duplicate")
		counter(d.ctlCmds, c.Failed, "failed")
		counter(d.ctlDropped, c.DroppedMessages, "messages")
		counter(d.ctlDropped, c.DroppedEvents, "events")
		counter(d.ctlDropped, c.DroppedPoolEvents, "pool_events")
		gauge(d.ctlQueued, float64(c.QueuedByte))
		if c.SchedulerLeader >= 0 {
			gauge(d.ctlLeader, float64(c.SchedulerLeader))
		}
	}
	gauge(d.hitRatio, s.Lookups.ServedFromG2(), "served_from_g2")
	gauge(d.hitRatio, s.Lookups.FoundInAnyTier(), "found_in_any_tier")
	if p := s.Passthrough; p != nil {
		gauge(d.ptOn, b2f(p.On))
		counter(d.fuseReqs, p.DaemonReads, "read")
		counter(d.fuseReqs, p.DaemonWrites, "write")
	}
	for _, t := range s.Tiers {
		if r := t.Requests; r != nil {
			counter(d.tierRequests, r.Put, t.Name, "put")
			counter(d.tierRequests, r.Get, t.Name, "get")
			counter(d.tierRequests, r.Head, t.Name, "head")
			counter(d.tierRequests, r.List, t.Name, "list")
			counter(d.tierRequests, r.Delete, t.Name, "delete")
		}
		gauge(d.tierUsed, float64(t.UsedBytes), t.Name)
		gauge(d.tierCap, float64(t.CapacityBytes), t.Name)
		gauge(d.tierBlocks, float64(t.Blocks), t.Name)
		if t.HighWatermark > 0 {
			gauge(d.tierHigh, t.HighWatermark, t.Name)
		}
		if t.LowWatermark > 0 {
			gauge(d.tierLow, t.LowWatermark, t.Name)
		}
		gauge(d.tierDegraded, b2f(t.Degraded), t.Name)
		gauge(d.tierRecovering, b2f(t.Recovering), t.Name)
		gauge(d.tierFull, b2f(t.Full), t.Name)
		if t.Health != "" {
			for _, st := range []string{"up", "degraded", "down", "bypassed"} {
				gauge(d.tierHealth, b2f(t.Health == st), t.Name, st)
				counter(d.tierHealthChanges, t.HealthChanges[st], t.Name, st)
			}
			counter(d.tierRefused, t.Refused, t.Name)
		}
	}
	st := s.Stats
	counter(d.reqs, st.ReadRequests)
	counter(d.reqHits, st.ReadRequestHits)
	counter(d.blockReads, st.BlockReads)
	counter(d.blockMisses, st.BlockMisses)
	byLabel(d.blockHits, st.BlockHits)
	counter(d.byteReads, st.ByteReads)
	byLabel(d.byteHits, st.ByteHits)
	gauge(d.dirty, float64(st.DirtyBytes))
	gauge(d.dirtyLimit, float64(st.DirtyLimitBytes))
	counter(d.writerWaits, st.WriterWaits)
	counter(d.promotions, st.Promotions)
	counter(d.g4RunReads, st.G4RunReads)
	counter(d.g4RunBlocks, st.G4RunBlocks)
	byLabel(d.evictions, st.Evictions)
	byLabel(d.demotions, st.Demotions)
	byLabel(d.dropped, st.Dropped)
	counter(d.admRefused, st.AdmissionsDenied)
	counter(d.crc, st.CRCErrors)
	counter(d.lost, st.ObjectsLost)
	gauge(d.obj, float64(st.Objects))
	gauge(d.storeDegraded, b2f(st.Degraded != ""))
	gauge(d.build, 1, c.version)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
