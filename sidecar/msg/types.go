package msg

// Where is a bit set of the tiers holding at least one block of an object.
type Where uint8

// Tier bits of Where.
const (
	InG2  Where = 1 << iota // some block is in DRAM
	InG3                    // some block is on local NVMe
	InG35                   // some block is in the shared pool
	InG4                    // some block is in object storage
)

// AboveG4 reports whether some block lives in a tier above G4.
func (w Where) AboveG4() bool { return w&(InG2|InG3|InG35) != 0 }

// String renders the set as "G2+G3", or "none".
func (w Where) String() string {
	s := ""
	for i, n := range []string{"G2", "G3", "G3.5", "G4"} {
		if w&(1<<i) != 0 {
			if s != "" {
				s += "+"
			}
			s += n
		}
	}
	if s == "" {
		return "none"
	}
	return s
}

// Tier is one tier's occupancy on a host.
type Tier struct {
	Name     string  `msgpack:"n" json:"name"`
	Used     int64   `msgpack:"u" json:"used"`     // bytes
	Capacity int64   `msgpack:"c" json:"capacity"` // bytes, 0 = unbounded
	Blocks   int64   `msgpack:"b" json:"blocks"`
	High     float64 `msgpack:"hi,omitempty" json:"high,omitempty"` // watermark, fraction of Capacity
	Low      float64 `msgpack:"lo,omitempty" json:"low,omitempty"`
	Degraded bool    `msgpack:"d,omitempty" json:"degraded,omitempty"`
}

// Object is one object in a heat report.
type Object struct {
	Namespace string  `msgpack:"ns" json:"namespace"`
	Path      string  `msgpack:"p" json:"path"`    // inside the namespace, "a/b"
	ID        uint64  `msgpack:"id" json:"id"`     // the host's object id (valid for the host's boot)
	Score     float32 `msgpack:"s" json:"score"`   // heat score 0–100 at report time
	IdleMs    int64   `msgpack:"i" json:"idle_ms"` // ms since the last read or write
	Size      int64   `msgpack:"z" json:"size"`    // bytes
	Where     Where   `msgpack:"w" json:"where"`   // tiers holding blocks
	Pinned    bool    `msgpack:"pin,omitempty" json:"pinned,omitempty"`
	// LastAccess is the unix ms of the last read or write (exact, unlike
	// Time − IdleMs, so decisions keyed on it are stable across reports).
	LastAccess int64 `msgpack:"la,omitempty" json:"last_access,omitempty"`
}

// Hits are read counters since the daemon started.
type Hits struct {
	Requests    int64            `msgpack:"rq" json:"requests"` // ReadAt calls
	RequestHits int64            `msgpack:"rh" json:"request_hits"`
	Blocks      int64            `msgpack:"br" json:"blocks"`     // block reads
	BlockHits   map[string]int64 `msgpack:"bh" json:"block_hits"` // by tier
	Misses      int64            `msgpack:"bm" json:"misses"`
}

// Knobs are the policy settings a scheduler can change on a host (zero
// fields: leave unchanged).
type Knobs struct {
	ColdThreshold float64 `msgpack:"cold,omitempty" json:"cold_threshold,omitempty"` // heat score 0–100
	WarmThreshold float64 `msgpack:"warm,omitempty" json:"warm_threshold,omitempty"`
	DRAMHigh      float64 `msgpack:"g2hi,omitempty" json:"dram_high,omitempty"` // G2 watermarks, fractions
	DRAMLow       float64 `msgpack:"g2lo,omitempty" json:"dram_low,omitempty"`
}

// Report is a host's heat report, published every interval on
// Names.Report(host).
type Report struct {
	V        int    `msgpack:"v" json:"v"`
	Host     string `msgpack:"h" json:"host"`
	Boot     int64  `msgpack:"b" json:"boot"` // daemon start, unix ns: object ids are valid within one boot
	Seq      uint64 `msgpack:"q" json:"seq"`  // per boot, +1 per report
	Time     int64  `msgpack:"t" json:"time"` // unix ns
	Interval int64  `msgpack:"iv" json:"interval"`
	// Tiers in order G2, G3, G3.5, G4 (those configured).
	Tiers []Tier `msgpack:"tiers" json:"tiers"`
	// Hot are the hottest objects, hottest first; Cold the least recently
	// used objects with blocks above G4, least recent first.
	Hot  []Object `msgpack:"hot" json:"hot"`
	Cold []Object `msgpack:"cold" json:"cold"`
	// Histogram counts objects per heat-score decile [0,10) … [90,100].
	Histogram [10]int64 `msgpack:"hist" json:"histogram"`
	Hits      Hits      `msgpack:"hits" json:"hits"`
	// Moves are block moves since the previous report, by kind:
	// "demote.G3", "demote.G4", "evict.G2", "promote", "drop".
	Moves   map[string]int64 `msgpack:"mv,omitempty" json:"moves,omitempty"`
	Objects int64            `msgpack:"o" json:"objects"`
	Knobs   Knobs            `msgpack:"k" json:"knobs"`
	// DroppedMessages counts telemetry the sidecar dropped (its buffer
	// was full while NATS was unreachable) since it started.
	DroppedMessages int64    `msgpack:"dm,omitempty" json:"dropped_messages,omitempty"`
	Namespaces      []string `msgpack:"nss,omitempty" json:"namespaces,omitempty"`
	// Pool is the host's view of the shared pool (G3.5), when it has one.
	Pool *Pool `msgpack:"pool,omitempty" json:"pool,omitempty"`
}

// Pool is a host's share of the G3.5 pool in a report.
type Pool struct {
	Extents    uint32 `msgpack:"n" json:"extents"`      // extents in the pool
	ExtentSize int64  `msgpack:"sz" json:"extent_size"` // bytes
	Bypass     bool   `msgpack:"by,omitempty" json:"bypass,omitempty"`
	// Held are the extents this host holds a lease on.
	Held []uint32 `msgpack:"h,omitempty" json:"held,omitempty"`
	// LastUse is, per extent this host wrote or read, the unix ns of its
	// last use here.
	LastUse map[uint32]int64 `msgpack:"u,omitempty" json:"last_use,omitempty"`
	// LastWrite is, per extent this host wrote, the unix ns of its last
	// write (an extent still being filled is not reclaimed).
	LastWrite map[uint32]int64 `msgpack:"lw,omitempty" json:"last_write,omitempty"`
	// StarvedAt is the unix ns of this host's latest pool write that
	// found every extent leased (0: none since start): the scheduler then
	// reclaims extents of hosts above their fair share for it.
	StarvedAt int64 `msgpack:"st,omitempty" json:"starved_at,omitempty"`
	// Imports and Shares count files imported from / published to the
	// pool since start; ImportNs is the total time spent importing.
	Imports  int64 `msgpack:"im,omitempty" json:"imports,omitempty"`
	Shares   int64 `msgpack:"sh,omitempty" json:"shares,omitempty"`
	ImportNs int64 `msgpack:"in,omitempty" json:"import_ns,omitempty"`
}

// Event kinds.
const (
	EvStored  = "stored"  // object created (its path is known)
	EvRemoved = "removed" // object deleted or lost
	EvRead    = "read"    // object read during the interval
	EvMoved   = "moved"   // a command moved the object's blocks (Where is the result)
	// EvWanted: a lookup of Namespace/Path on this host found nothing,
	// locally or in the shared pool: the scheduler asks a host that holds
	// the name to share it (G3.5).
	EvWanted = "wanted"
	// EvShared: the host published the object to the shared pool index.
	EvShared = "shared"
	// EvImported: the host made a file another host shared available
	// locally (its blocks read from the pool).
	EvImported = "imported"
	// EvStale: a read on this host found the pool record of a shared file
	// stale or corrupt; the host withdrew the index entry, and the next
	// share of the name re-puts its blocks (Command.Force).
	EvStale = "stale"
)

// Event is one object event.
type Event struct {
	Kind      string `msgpack:"k" json:"kind"`
	Namespace string `msgpack:"ns,omitempty" json:"namespace,omitempty"`
	Path      string `msgpack:"p,omitempty" json:"path,omitempty"`
	ID        uint64 `msgpack:"id" json:"id"`
	Where     Where  `msgpack:"w,omitempty" json:"where,omitempty"`
	Size      int64  `msgpack:"z,omitempty" json:"size,omitempty"`
}

// Events is a batch of events, published on Names.Event(host). Resync is
// set on the batches a host sends in answer to a "resync" command (its
// full inventory); Last marks the final one.
type Events struct {
	V      int     `msgpack:"v" json:"v"`
	Host   string  `msgpack:"h" json:"host"`
	Boot   int64   `msgpack:"b" json:"boot"`
	Seq    uint64  `msgpack:"q" json:"seq"`
	Time   int64   `msgpack:"t" json:"time"`
	Resync bool    `msgpack:"rs,omitempty" json:"resync,omitempty"`
	Last   bool    `msgpack:"l,omitempty" json:"last,omitempty"`
	Events []Event `msgpack:"e" json:"events"`
}

// Command operations.
const (
	OpSink          = "sink"           // move the object to G4
	OpDemote        = "demote"         // move the object out of G2
	OpPromote       = "promote"        // copy the object to G2 (background)
	OpPrestage      = "prestage"       // copy to G2 before Deadline, abandoned after it
	OpPin           = "pin"            // pin in G2
	OpUnpin         = "unpin"          //
	OpDropNamespace = "drop_namespace" // remove every file of Namespace
	OpSetKnobs      = "set_knobs"      // apply Knobs
	OpResync        = "resync"         // publish the full inventory as Events{Resync}
	OpShare         = "share"          // copy the object into the shared pool (G3.5) and publish it
	OpReclaim       = "reclaim_extent" // withdraw the host's records in Extent and release its lease
)

// Command is a scheduler's order to one host, published on
// Names.Command(host) with the JetStream message id set to ID.
type Command struct {
	V    int    `msgpack:"v" json:"v"`
	ID   string `msgpack:"id" json:"id"` // unique; a host applies an id at most once
	Host string `msgpack:"h" json:"host"`
	Op   string `msgpack:"op" json:"op"`
	// The object: by Namespace+Path, or by Object id within Boot (when
	// Boot differs from the host's current boot the id is stale and the
	// path is used).
	Namespace string `msgpack:"ns,omitempty" json:"namespace,omitempty"`
	Path      string `msgpack:"p,omitempty" json:"path,omitempty"`
	Object    uint64 `msgpack:"o,omitempty" json:"object,omitempty"`
	Boot      int64  `msgpack:"b,omitempty" json:"boot,omitempty"`
	// Deadline (unix ns, 0 = none): after it the command is abandoned and
	// acknowledged "expired".
	Deadline int64  `msgpack:"dl,omitempty" json:"deadline,omitempty"`
	Knobs    *Knobs `msgpack:"k,omitempty" json:"knobs,omitempty"`
	// Extent is the pool extent of a reclaim_extent command.
	Extent uint32 `msgpack:"x,omitempty" json:"extent,omitempty"`
	// Force, on a share command, drops the host's pool copies of the
	// object first and puts every block again (its pool record went stale).
	Force  bool   `msgpack:"f,omitempty" json:"force,omitempty"`
	Issued int64  `msgpack:"t" json:"issued"`
	Issuer string `msgpack:"by,omitempty" json:"issuer,omitempty"` // scheduler replica id
	Reason string `msgpack:"why,omitempty" json:"reason,omitempty"`
}

// Ack statuses.
const (
	AckOK        = "ok"
	AckNotFound  = "not_found" // no such object or namespace on the host
	AckDuplicate = "duplicate" // the id was applied before; nothing done
	AckExpired   = "expired"   // the deadline passed before it finished
	AckRefused   = "refused"   // not applicable (pinned object, no G4, bad op)
	AckError     = "error"     // it failed; Error says why
)

// Ack is a host's answer to a command, published on Names.Ack(host).
type Ack struct {
	V      int    `msgpack:"v" json:"v"`
	Host   string `msgpack:"h" json:"host"`
	ID     string `msgpack:"id" json:"id"`
	Op     string `msgpack:"op" json:"op"`
	Status string `msgpack:"s" json:"status"`
	Error  string `msgpack:"e,omitempty" json:"error,omitempty"`
	Blocks int    `msgpack:"n,omitempty" json:"blocks,omitempty"` // blocks moved/copied
	Where  Where  `msgpack:"w,omitempty" json:"where,omitempty"`  // where the object is afterwards
	TookUs int64  `msgpack:"us" json:"took_us"`
	Time   int64  `msgpack:"t" json:"time"`
}

// HostState is a host's liveness record (HostsBucket).
type HostState struct {
	V          int      `msgpack:"v" json:"v"`
	Host       string   `msgpack:"h" json:"host"`
	Boot       int64    `msgpack:"b" json:"boot"`
	Time       int64    `msgpack:"t" json:"time"` // unix ns of this update
	Version    string   `msgpack:"ver" json:"version"`
	Mount      string   `msgpack:"m" json:"mount"`
	Tiers      []Tier   `msgpack:"tiers" json:"tiers"`
	Objects    int64    `msgpack:"o" json:"objects"`
	Hits       Hits     `msgpack:"hits" json:"hits"`
	Namespaces []string `msgpack:"nss,omitempty" json:"namespaces,omitempty"`
	Knobs      Knobs    `msgpack:"k" json:"knobs"`
	Applied    int64    `msgpack:"ap" json:"applied"` // commands applied since start
	// Pool is the host's share of the G3.5 pool, when it has one.
	Pool *Pool `msgpack:"pool,omitempty" json:"pool,omitempty"`
}

// Leader is the scheduler leadership record (SchedulerBucket, LeaderKey)
// and the body of replica records.
type Leader struct {
	V     int    `msgpack:"v" json:"v"`
	ID    string `msgpack:"id" json:"id"`
	Since int64  `msgpack:"t" json:"since"` // unix ns
	Host  string `msgpack:"h" json:"host"`  // OS host name and pid of the replica
}

// PrestageRequest asks the cluster to bring files of a namespace to G2 on
// the host(s) holding them before Deadline (unix ns). Send it as a NATS
// request to Names.Prestage(); the reply is a PrestageReply.
type PrestageRequest struct {
	V         int      `msgpack:"v" json:"v"`
	ID        string   `msgpack:"id,omitempty" json:"id,omitempty"` // optional; makes retries idempotent
	Namespace string   `msgpack:"ns" json:"namespace"`
	Paths     []string `msgpack:"p" json:"paths"`
	Deadline  int64    `msgpack:"dl" json:"deadline"`
	Host      string   `msgpack:"h,omitempty" json:"host,omitempty"` // optional: only this host
}

// PrestageResult is the outcome for one path on one host.
type PrestageResult struct {
	Path   string `msgpack:"p" json:"path"`
	Host   string `msgpack:"h" json:"host"`
	Status string `msgpack:"s" json:"status"` // an Ack status, or "no_host" when no host answered
	Error  string `msgpack:"e,omitempty" json:"error,omitempty"`
	Blocks int    `msgpack:"n,omitempty" json:"blocks,omitempty"`
	TookUs int64  `msgpack:"us,omitempty" json:"took_us,omitempty"`
}

// PrestageReply answers a PrestageRequest once every addressed host
// acknowledged or the deadline passed.
type PrestageReply struct {
	V       int              `msgpack:"v" json:"v"`
	ID      string           `msgpack:"id" json:"id"`
	Leader  string           `msgpack:"by" json:"leader"`
	Results []PrestageResult `msgpack:"r" json:"results"`
	Error   string           `msgpack:"e,omitempty" json:"error,omitempty"`
}
