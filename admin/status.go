// Package admin is ctxmemd's control socket: an HTTP/JSON server on a unix
// socket (mode 0600, default <data_dir>/admin.sock) that reports status and
// forwards control requests to the daemon, and the client that `ctxmemd
// status` uses.
//
// Endpoints:
//
//	GET  /status            → Status
//	POST /prestage {"path"} → 204; Provider must implement Prestager
//	POST /evict    {"path"} → 204; Provider must implement Evicter
//	POST /pin      {"path", "pinned"} → 204; Provider must implement Pinner
//	POST /sink     {"path"} → 204; Provider must implement Sinker
//	POST /warmup   {"path"} → 204 once in G2; Provider must implement Warmer
//	POST /fsck     FsckRequest → tiering.FsckReport; Provider must implement Fscker
//	POST /gc       GCRequest → tiering.GCReport; Provider must implement Collector
//
// Errors are {"error": "..."} with 400 (bad request), 404 (no such path),
// 409 (already running), 501 (the daemon does not offer that control) or
// 500.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/ctxmem/ctxmemd/hitratio"
	"github.com/ctxmem/ctxmemd/tiering"
)

// Status is what GET /status returns.
type Status struct {
	// Version is the daemon's build version (filled by the Server).
	Version string `json:"version"`
	// UptimeSeconds since the Server's Started time (filled by the Server).
	UptimeSeconds float64 `json:"uptime_s"`
	// PID of the daemon (filled by the Server).
	PID     int    `json:"pid"`
	Mount   string `json:"mount"`
	DataDir string `json:"data_dir"`
	// Tiers are the per-tier occupancies, top (G2) first.
	Tiers []tiering.TierUsage `json:"tiers"`
	// Stats are the store's counters.
	Stats tiering.Stats `json:"stats"`
	// Namespaces are the mounted namespaces.
	Namespaces []NamespaceStatus `json:"namespaces"`
	// Links are the watched network interfaces (config key link).
	Links []LinkStatus `json:"links,omitempty"`
	// Passthrough is the mount's FUSE passthrough state.
	Passthrough PassthroughStatus `json:"passthrough"`
	// KernelEntries are the files the kernel holds looked up, their
	// bound (config kernel_files), and the entries invalidated and files
	// forgotten since mount.
	KernelEntries KernelEntriesStatus `json:"kernel_entries"`
	// Lookups are the mount's KV lookups since mount, hits by serving
	// tier and misses (package hitratio has the one definition of hit
	// ratio, shared with the replay and ctxmem_hit_ratio).
	Lookups hitratio.Counts `json:"lookups"`
	// RestoreCost is each lower tier's estimated block read time, the
	// basis of restore budgets (tiering.Store.ReadCost).
	RestoreCost map[string]tiering.TierCost `json:"restore_cost,omitempty"`
	// G4Lifecycle is the state of the S3 bucket lifecycle rule for g4_ttl
	// (config g4_lifecycle): "installed: …", "off", "unsupported by the
	// server: …", "denied: …" or "pending: …" (S3 not answering yet);
	// empty without an S3 G4.
	G4Lifecycle string `json:"g4_lifecycle,omitempty"`
	// LookupMisses is Lookups.Misses (kept for older clients).
	LookupMisses int64 `json:"lookup_misses"`
	// Curves are the online miss-ratio curves of the KV lookups
	// (curves.go, package mrc).
	Curves *Curves `json:"curves,omitempty"`
	// Control is the control plane (sidecar and scheduler replica), when
	// the daemon runs one.
	Control *ControlStatus `json:"control,omitempty"`
}

// PassthroughStatus is the FUSE passthrough part of Status: whether opens
// of G2-resident files are served by the kernel from memory files, why
// not, and the READ and WRITE requests the daemon served itself.
type PassthroughStatus struct {
	On           bool   `json:"on"`
	Reason       string `json:"reason,omitempty"`
	DaemonReads  int64  `json:"daemon_reads"`
	DaemonWrites int64  `json:"daemon_writes"`
}

// KernelEntriesStatus is the kernel entry part of Status: files the
// kernel holds looked up (Files, at most about Limit when Limit > 0), and
// since mount the entry invalidations sent (Invalidated) and the file
// FORGETs received (Forgotten).
type KernelEntriesStatus struct {
	Files       int   `json:"files"`
	Limit       int   `json:"limit"`
	Invalidated int64 `json:"invalidated"`
	Forgotten   int64 `json:"forgotten"`
}

// ControlStatus is the control-plane part of Status.
type ControlStatus struct {
	Cluster string `json:"cluster"`
	Host    string `json:"host"`
	// Bus is "embedded" or the NATS URL list.
	Bus       string `json:"bus"`
	Connected bool   `json:"connected"`
	// Sidecar and Scheduler are the agent's and the in-daemon scheduler
	// replica's counters (JSON objects; Scheduler absent when the daemon
	// runs no replica).
	Sidecar   json.RawMessage `json:"sidecar,omitempty"`
	Scheduler json.RawMessage `json:"scheduler,omitempty"`
}

// ClusterPrestageRequest is the body of POST /cluster/prestage.
type ClusterPrestageRequest struct {
	Namespace string   `json:"namespace"`
	Paths     []string `json:"paths"`
	// DeadlineMs is the time budget in milliseconds (0 = 5 s).
	DeadlineMs int64 `json:"deadline_ms"`
	// Host restricts the request to one host ("" = wherever held).
	Host string `json:"host,omitempty"`
}

// ClusterProvider is implemented by daemons with a control plane: the
// cluster view (GET /cluster) and prestage requests carried through the
// scheduler (POST /cluster/prestage). Both return JSON documents.
type ClusterProvider interface {
	Cluster(ctx context.Context) (json.RawMessage, error)
	ClusterPrestage(ctx context.Context, req ClusterPrestageRequest) (json.RawMessage, error)
}

// LinkStatus is one watched network interface in Status.
type LinkStatus struct {
	Name      string    `json:"name"`
	Up        bool      `json:"up"`
	OperState string    `json:"oper_state"`
	Changed   time.Time `json:"changed"`
}

// NamespaceStatus is one namespace in Status.
type NamespaceStatus struct {
	Name      string `json:"name"`
	Objects   int64  `json:"objects"`
	Bytes     int64  `json:"bytes"`
	BlockSize int    `json:"block_size"`
	// QuotaBytes is 0 when the namespace has no quota.
	QuotaBytes int64  `json:"quota_bytes"`
	ModelID    string `json:"model_id,omitempty"`
	Tenant     string `json:"tenant,omitempty"`
	// Lookups are the namespace's KV lookups since mount (or since it
	// was added).
	Lookups hitratio.Counts `json:"lookups"`
	// TokensPerBlock and PrefillUsPerToken are the namespace's value
	// settings (0: unknown). TokensFound = lookup hits × TokensPerBlock
	// and PrefillAvoidedS = TokensFound × PrefillUsPerToken / 1e6: an
	// upper bound of the prompt tokens not recomputed and of the prefill
	// time saved (the mount does not see which hits lead their request,
	// the only ones a prefix cache uses; the replay reports those).
	TokensPerBlock    int     `json:"tokens_per_block,omitempty"`
	PrefillUsPerToken float64 `json:"prefill_us_per_token,omitempty"`
	TokensFound       int64   `json:"tokens_found"`
	PrefillAvoidedS   float64 `json:"prefill_avoided_s"`
	// RestoreBudget is the namespace's restore_budget (0: none);
	// RestoreSkipped counts opens answered as misses because their
	// restore was predicted to take longer (RestoreSkippedPredicted: the
	// sum of those predictions).
	RestoreBudget           time.Duration `json:"restore_budget_ns,omitempty"`
	RestoreSkipped          int64         `json:"restore_skipped"`
	RestoreSkippedPredicted time.Duration `json:"restore_skipped_predicted_ns"`
}

// Provider supplies status; the daemon implements it. Control endpoints
// are available when the Provider also implements Prestager, Evicter or
// Pinner.
type Provider interface {
	// Status returns the current status; Version, UptimeSeconds and PID are
	// overwritten by the Server.
	Status(ctx context.Context) (Status, error)
}

// Prestager brings every block of the object at path (relative to the
// mount, e.g. "ns/file.bin") up to G2. Return ErrNotFound for an unknown
// path.
type Prestager interface {
	Prestage(ctx context.Context, path string) error
}

// Evicter demotes every block of the object at path out of G2.
type Evicter interface {
	Evict(ctx context.Context, path string) error
}

// Sinker moves every block of the object at path to G4.
type Sinker interface {
	Sink(ctx context.Context, path string) error
}

// Warmer brings every block of the object at path up to G2 and returns
// once they are there (Prestager only starts it).
type Warmer interface {
	Warmup(ctx context.Context, path string) error
}

// Pinner pins (keeps in G2) or unpins the object at path.
type Pinner interface {
	SetPinned(ctx context.Context, path string, pinned bool) error
}

// Errors.
var (
	// ErrNotFound: a Provider returns it (wrapped) for an unknown path; the
	// server answers 404 and the client returns an error wrapping it.
	ErrNotFound = errors.New("admin: no such path")
	// ErrUnsupported: the daemon does not offer this control (HTTP 501).
	ErrUnsupported = errors.New("admin: not supported by this daemon")
	// ErrNotRunning: no daemon answers on the socket (the client could not
	// connect, or the daemon accepted and sent no answer within the
	// client's timeout: hung or stopped).
	ErrNotRunning = errors.New("admin: no daemon answers")
	// ErrPermission: the caller may not open the socket (mode 0600: the
	// daemon's user only).
	ErrPermission = errors.New("admin: permission denied")
	// ErrInUse: Serve found another live daemon on the socket.
	ErrInUse = errors.New("admin: socket in use by a running daemon")
)
