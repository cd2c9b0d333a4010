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
	Name     string  `msgpack:"n"`
	Used     int64   `msgpack:"u"` // bytes
	Capacity int64   `msgpack:"c"` // bytes, 0 = unbounded
	Blocks   int64   `msgpack:"b"`
	High     float64 `msgpack:"hi,omitempty"` // watermark, fraction of Capacity
	Low      float64 `msgpack:"lo,omitempty"`
	Degraded bool    `msgpack:"d,omitempty"`
}

// Object is one object in a heat report.
type Object struct {
	Namespace string  `msgpack:"ns"`
	Path      string  `msgpack:"p"`  // inside the namespace, "a/b"
	ID        uint64  `msgpack:"id"` // the host's object id (valid for the host's boot)
	Score     float32 `msgpack:"s"`  // heat score 0–100 at report time
	IdleMs    int64   `msgpack:"i"`  // ms since the last read or write
	Size      int64   `msgpack:"z"`  // bytes
	Where     Where   `msgpack:"w"`  // tiers holding blocks
	Pinned    bool    `msgpack:"pin,omitempty"`
}

// Hits are read counters since the daemon started.
type Hits struct {
	Requests    int64            `msgpack:"rq"` // ReadAt calls
	RequestHits int64            `msgpack:"rh"`
	Blocks      int64            `msgpack:"br"` // block reads
	BlockHits   map[string]int64 `msgpack:"bh"` // by tier
	Misses      int64            `msgpack:"bm"`
}

// Knobs are the policy settings a scheduler can change on a host (zero
// fields: leave unchanged).
type Knobs struct {
	ColdThreshold float64 `msgpack:"cold,omitempty"` // heat score 0–100
	WarmThreshold float64 `msgpack:"warm,omitempty"`
	DRAMHigh      float64 `msgpack:"g2hi,omitempty"` // G2 watermarks, fractions
	DRAMLow       float64 `msgpack:"g2lo,omitempty"`
}

// Report is a host's heat report, published every interval on
// Names.Report(host).
type Report struct {
	V        int    `msgpack:"v"`
	Host     string `msgpack:"h"`
	Boot     int64  `msgpack:"b"` // daemon start, unix ns: object ids are valid within one boot
	Seq      uint64 `msgpack:"q"` // per boot, +1 per report
	Time     int64  `msgpack:"t"` // unix ns
	Interval int64  `msgpack:"iv"`
	// Tiers in order G2, G3, G3.5, G4 (those configured).
	Tiers []Tier `msgpack:"tiers"`
	// Hot are the hottest objects, hottest first; Cold the least recently
	// used objects with blocks above G4, least recent first.
	Hot  []Object `msgpack:"hot"`
	Cold []Object `msgpack:"cold"`
	// Histogram counts objects per heat-score decile [0,10) … [90,100].
	Histogram [10]int64 `msgpack:"hist"`
	Hits      Hits      `msgpack:"hits"`
	// Moves are block moves since the previous report, by kind:
	// "demote.G3", "demote.G4", "evict.G2", "promote", "drop".
	Moves   map[string]int64 `msgpack:"mv,omitempty"`
	Objects int64            `msgpack:"o"`
	Knobs   Knobs            `msgpack:"k"`
	// DroppedMessages counts telemetry the sidecar dropped (its buffer
	// was full while NATS was unreachable) since it started.
	DroppedMessages int64    `msgpack:"dm,omitempty"`
	Namespaces      []string `msgpack:"nss,omitempty"`
	// Pool is the host's view of the shared pool (G3.5), when it has one.
	Pool *Pool `msgpack:"pool,omitempty"`
}

// Pool is a host's share of the G3.5 pool in a report.
type Pool struct {
	Extents    uint32 `msgpack:"n"`  // extents in the pool
	ExtentSize int64  `msgpack:"sz"` // bytes
	Bypass     bool   `msgpack:"by,omitempty"`
	// Held are the extents this host holds a lease on.
	Held []uint32 `msgpack:"h,omitempty"`
	// LastUse is, per extent this host wrote or read, the unix ns of its
	// last use here.
	LastUse map[uint32]int64 `msgpack:"u,omitempty"`
	// Imports and Shares count files imported from / published to the
	// pool since start; ImportNs is the total time spent importing.
	Imports  int64 `msgpack:"im,omitempty"`
	Shares   int64 `msgpack:"sh,omitempty"`
	ImportNs int64 `msgpack:"in,omitempty"`
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
)

// Event is one object event.
type Event struct {
	Kind      string `msgpack:"k"`
	Namespace string `msgpack:"ns,omitempty"`
	Path      string `msgpack:"p,omitempty"`
	ID        uint64 `msgpack:"id"`
	Where     Where  `msgpack:"w,omitempty"`
	Size      int64  `msgpack:"z,omitempty"`
}

// Events is a batch of events, published on Names.Event(host). Resync is
// set on the batches a host sends in answer to a "resync" command (its
// full inventory); Last marks the final one.
type Events struct {
	V      int     `msgpack:"v"`
	Host   string  `msgpack:"h"`
	Boot   int64   `msgpack:"b"`
	Seq    uint64  `msgpack:"q"`
	Time   int64   `msgpack:"t"`
	Resync bool    `msgpack:"rs,omitempty"`
	Last   bool    `msgpack:"l,omitempty"`
	Events []Event `msgpack:"e"`
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
	V    int    `msgpack:"v"`
	ID   string `msgpack:"id"` // unique; a host applies an id at most once
	Host string `msgpack:"h"`
	Op   string `msgpack:"op"`
	// The object: by Namespace+Path, or by Object id within Boot (when
	// Boot differs from the host's current boot the id is stale and the
	// path is used).
	Namespace string `msgpack:"ns,omitempty"`
	Path      string `msgpack:"p,omitempty"`
	Object    uint64 `msgpack:"o,omitempty"`
	Boot      int64  `msgpack:"b,omitempty"`
	// Deadline (unix ns, 0 = none): after it the command is abandoned and
	// acknowledged "expired".
	Deadline int64  `msgpack:"dl,omitempty"`
	Knobs    *Knobs `msgpack:"k,omitempty"`
	// Extent is the pool extent of a reclaim_extent command.
	Extent uint32 `msgpack:"x,omitempty"`
	Issued int64  `msgpack:"t"`
	Issuer string `msgpack:"by,omitempty"` // scheduler replica id
	Reason string `msgpack:"why,omitempty"`
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
	V      int    `msgpack:"v"`
	Host   string `msgpack:"h"`
	ID     string `msgpack:"id"`
	Op     string `msgpack:"op"`
	Status string `msgpack:"s"`
	Error  string `msgpack:"e,omitempty"`
	Blocks int    `msgpack:"n,omitempty"` // blocks moved/copied
	Where  Where  `msgpack:"w,omitempty"` // where the object is afterwards
	TookUs int64  `msgpack:"us"`
	Time   int64  `msgpack:"t"`
}

// HostState is a host's liveness record (HostsBucket).
type HostState struct {
	V          int      `msgpack:"v"`
	Host       string   `msgpack:"h"`
	Boot       int64    `msgpack:"b"`
	Time       int64    `msgpack:"t"` // unix ns of this update
	Version    string   `msgpack:"ver"`
	Mount      string   `msgpack:"m"`
	Tiers      []Tier   `msgpack:"tiers"`
	Objects    int64    `msgpack:"o"`
	Hits       Hits     `msgpack:"hits"`
	Namespaces []string `msgpack:"nss,omitempty"`
	Knobs      Knobs    `msgpack:"k"`
	Applied    int64    `msgpack:"ap"` // commands applied since start
}

// Leader is the scheduler leadership record (SchedulerBucket, LeaderKey)
// and the body of replica records.
type Leader struct {
	V     int    `msgpack:"v"`
	ID    string `msgpack:"id"`
	Since int64  `msgpack:"t"` // unix ns
	Host  string `msgpack:"h"` // OS host name and pid of the replica
}

// PrestageRequest asks the cluster to bring files of a namespace to G2 on
// the host(s) holding them before Deadline (unix ns). Send it as a NATS
// request to Names.Prestage(); the reply is a PrestageReply.
type PrestageRequest struct {
	V         int      `msgpack:"v"`
	ID        string   `msgpack:"id,omitempty"` // optional; makes retries idempotent
	Namespace string   `msgpack:"ns"`
	Paths     []string `msgpack:"p"`
	Deadline  int64    `msgpack:"dl"`
	Host      string   `msgpack:"h,omitempty"` // optional: only this host
}

// PrestageResult is the outcome for one path on one host.
type PrestageResult struct {
	Path   string `msgpack:"p"`
	Host   string `msgpack:"h"`
	Status string `msgpack:"s"` // an Ack status, or "no_host" when no host answered
	Error  string `msgpack:"e,omitempty"`
	Blocks int    `msgpack:"n,omitempty"`
	TookUs int64  `msgpack:"us,omitempty"`
}

// PrestageReply answers a PrestageRequest once every addressed host
// acknowledged or the deadline passed.
type PrestageReply struct {
	V       int              `msgpack:"v"`
	ID      string           `msgpack:"id"`
	Leader  string           `msgpack:"by"`
	Results []PrestageResult `msgpack:"r"`
	Error   string           `msgpack:"e,omitempty"`
}
