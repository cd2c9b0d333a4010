// Package config is ctxmemd's configuration: one table of options (see
// Options) from which the command-line flags (urfave/cli/v2), the CTXMEM_*
// environment variables, the YAML keys of the config file and the README's
// reference table are all derived, so the four can never disagree.
//
// Precedence, highest first: command-line flag, environment variable, YAML
// config file, built-in default. The config file is --config /
// CTXMEM_CONFIG, default /etc/ctxmem/ctxmemd.yaml; a missing default file is
// not an error, a missing file named explicitly is.
//
// The option-table idea (one declarative list driving flags, env and docs)
// follows rclone's vfs/vfscommon/options.go; the code is this project's own.
package config

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// DefaultConfigFile is the config file read when neither --config nor
// CTXMEM_CONFIG names one. Packages install it; a checkout has none, which is
// fine.
const DefaultConfigFile = "/etc/ctxmem/ctxmemd.yaml"

// DevRoot is the directory, relative to the working directory, under which
// the built-in defaults put the mount point (DevRoot/mnt) and the data
// directory (DevRoot/data) when nothing else names them, so that a plain
// `ctxmemd run` in a source checkout works without root. Packaged installs
// set mount and data_dir in DefaultConfigFile instead.
const DevRoot = "ctxmem-data"

// Source says which layer set an option's value.
type Source int

// Sources, lowest precedence first.
const (
	SourceDefault Source = iota // built-in default (or derived from another option)
	SourceFile                  // the YAML config file
	SourceEnv                   // a CTXMEM_* environment variable
	SourceFlag                  // a command-line flag
)

// String returns "default", "file", "env" or "flag".
func (s Source) String() string {
	switch s {
	case SourceFile:
		return "file"
	case SourceEnv:
		return "env"
	case SourceFlag:
		return "flag"
	}
	return "default"
}

// Config is the daemon's resolved configuration. Sizes are bytes,
// watermarks are fractions of capacity (0–1), thresholds are heat scores
// (0–100). Paths are absolute after Load.
type Config struct {
	// Mount is the FUSE mount point.
	Mount string
	// DataDir holds metadata and, by default, G3 segments, the local G4 and
	// the admin socket.
	DataDir string
	// DRAM is the G2 (host DRAM) budget in bytes.
	DRAM int64
	// DRAMHigh and DRAMLow are the G2 watermarks (fractions of DRAM).
	DRAMHigh, DRAMLow float64
	// DirtyBytes bounds bytes in G2 not yet written back; writers wait above
	// it. Default DRAM/4.
	DirtyBytes int64
	// WriteTimeout bounds how long a write(2) or fsync waits without
	// write-back progress before it fails (ENOSPC when the tiers below G2
	// are full, EIO otherwise); also how long write-back retries a file
	// block while those tiers are unavailable (tiering.Config.WriteTimeout).
	WriteTimeout time.Duration
	// LocalReadTimeout bounds a read of G3 or G3.5 (a hung device) as the
	// reader sees it (tiering.Config.LocalReadTimeout).
	LocalReadTimeout time.Duration
	// LocalWriteTimeout bounds a write, delete or sync of G3 or G3.5 (a
	// hung device) as the core sees it (tiering.Config.LocalWriteTimeout).
	LocalWriteTimeout time.Duration
	// WriteBackDelay is how long a dirty block's write-back waits after
	// its latest write (coalescing; 0 = at once; at most 1s). fsync, NBD
	// FLUSH/FUA and the close of a file's last writer never wait for it
	// (tiering.Config.WriteBackDelay).
	WriteBackDelay time.Duration
	// Passthrough serves files by FUSE passthrough from memory files while
	// they are in G2 (fusefs passthrough.go; on by default, effective with
	// root on Linux 6.9+). PassthroughMaxBytes is the largest file so
	// served.
	Passthrough         bool
	PassthroughWrites   bool
	PassthroughMaxBytes int64
	// PassthroughMaxFiles bounds the objects that keep a memory file.
	PassthroughMaxFiles int
	// BlockSize is the default namespace block size in bytes (power of two,
	// 4 KiB–4 MiB).
	BlockSize int
	// G3Dir is the directory of G3 (local NVMe) segment files.
	G3Dir string
	// G3Size is the G3 capacity in bytes; 0 disables G3.
	G3Size int64
	// StatfsCapacity is the capacity in bytes statfs reports for a
	// namespace without a quota; 0 means G2 + G3 capacity.
	StatfsCapacity int64
	// G3SegmentSize is the size in bytes of one G3 segment file.
	G3SegmentSize int64
	// G3High and G3Low are the G3 watermarks (fractions of G3Size).
	G3High, G3Low float64
	// G3CompactLive is the fraction of G3Size below which G3's live data
	// is compacted rather than demoted at reclaim (g3.Options.CompactLive);
	// 0 turns compaction off.
	G3CompactLive float64
	// G4 is the object-storage tier location: "file:///abs/path", an
	// "s3://bucket/prefix" URL, or "none" (G4 disabled).
	G4 string
	// G4TTL is how long a block is kept in G4.
	G4TTL time.Duration
	// G4Size is the most payload bytes G4 may hold (its oldest blocks are
	// evicted above G4High); 0 = unbounded; G4SizeAuto = 80% of the size
	// of a local G4's filesystem, unbounded for S3 (resolved at start).
	G4Size int64
	// G4High and G4Low are the G4 watermarks (fractions of G4Size).
	G4High, G4Low float64
	// G4PackSize bounds one G4 pack object in bytes, header included: a
	// file sunk to G4 is stored as runs of its blocks of up to this size,
	// one object each; 0 = one object per block.
	G4PackSize int64
	// G4Lifecycle is whether the daemon keeps an S3 bucket lifecycle rule
	// for g4_ttl: "auto" installs it where the server supports lifecycle
	// rules and tagged PUTs (the TTL sweeper runs either way), "off"
	// removes the daemon's rule if the bucket has one. No effect on a
	// file:// G4.
	G4Lifecycle string
	// G2Policy is G2's eviction policy: "decay" (LRFU with TinyLFU
	// admission), "adaptive" (decay or LRU, whichever hits more on shadow
	// caches), "density" (learned hit density per class) or "arbiter"
	// (decay or density, whichever hits more on shadow caches).
	G2Policy string
	// HeatHalfLife is the heat-score decay half-life.
	HeatHalfLife time.Duration
	// ColdThreshold and WarmThreshold split heat scores (0–100) into cold
	// (< cold), warm and hot (>= warm).
	ColdThreshold, WarmThreshold float64
	// Admin is the admin unix-socket path.
	Admin string
	// Metrics is the Prometheus listen address (host:port); "" disables.
	Metrics string
	// KVEvents is the ZMQ PUB endpoint of the KV events (vLLM's wire
	// format, package kvevents); "" disables them. KVEventsReplay is the
	// optional ROUTER endpoint answering replay requests, KVEventsTopic
	// the topic frame, KVEventsBuffer the batches kept for replay.
	KVEvents, KVEventsReplay, KVEventsTopic string
	KVEventsBuffer                          int
	// KernelFiles bounds the files the kernel keeps looked up
	// (fusefs.Options.KernelFiles; 0 = no bound).
	KernelFiles int
	// KVLayout is the default kv_layout of namespaces: how block hashes
	// are derived from file names (vllm, sglang, lmcache, nixl, flat or a
	// regular expression with a (?P<hash>...) group; "" = no events).
	KVLayout string
	// NBD lists NBD listener URLs (unix:///path, tcp://host:port),
	// comma-separated; "" disables the NBD front end.
	NBD string
	// NBDSize is the size in bytes of the NBD export "default", served
	// when Exports is empty.
	NBDSize int64
	// Exports are the declared NBD exports (YAML only).
	Exports []Export
	// Link names the network interface whose link state is watched
	// (the one that reaches the G3.5 pools); "" watches none.
	Link string
	// Cluster names the control-bus cluster (subject token).
	Cluster string
	// Host names this host on the control bus (subject token).
	Host string
	// NATS lists the control bus's NATS URLs; "" embeds a server, "none"
	// disables the control plane.
	NATS string
	// NATSListen is the embedded server's client listener ("" = none).
	NATSListen string
	// NATS credentials: user/password, token, nkey seed file or creds
	// file, and TLS client certificate, key and CA files.
	NATSUser, NATSPassword, NATSToken, NATSNKey, NATSCreds string
	NATSTLSCert, NATSTLSKey, NATSTLSCA                     string
	// Scheduler is auto, on or off: whether the daemon runs a scheduler
	// replica.
	Scheduler string
	// ReportInterval is the sidecar's report and liveness period.
	ReportInterval time.Duration
	// SinkGrace is how long a cold private object stays idle before the
	// scheduler sinks it to G4.
	SinkGrace time.Duration
	// Pool is the G3.5 shared pool device or file ("" = none, unless
	// PoolTargets attach one).
	Pool string
	// PoolLeaseTTL is the lifetime of a pool extent lease.
	PoolLeaseTTL time.Duration
	// PoolShare is when files are shared to the pool: "eager" (the
	// default: every KV file once written and stored, before another host
	// asks) or "wanted" (when another host missed it).
	PoolShare string
	// PoolTargets are NVMe-oF targets to attach at start (YAML only); the
	// first namespace found becomes the pool when Pool is empty.
	PoolTargets []PoolTarget
	// LogLevel is one of debug, info, warn, error.
	LogLevel string
	// Namespaces are the declared namespaces (YAML only).
	Namespaces []Namespace

	// File is the config file that was read ("" when none was).
	File string

	// given says, for each option not left at its default, which layer
	// set it and where (for the messages of Validate).
	given map[string]givenAt
}

// givenAt is where an option's value was given: its layer and, for
// messages, "FILE line N", "environment CTXMEM_X=value" or
// "flag --x=value".
type givenAt struct {
	src   Source
	where string
}

// origin returns where key's value was given, "" for a default.
func (c Config) origin(key string) string { return c.given[key].where }

// setGiven records that src set key's value, at where.
func (c *Config) setGiven(key string, src Source, where string) {
	if c.given == nil {
		c.given = map[string]givenAt{}
	}
	c.given[key] = givenAt{src, where}
}

// ControlPlane reports whether the sidecar (and control bus) run.
func (c Config) ControlPlane() bool { return c.NATS != "none" }

// EmbeddedNATS reports whether the daemon embeds its NATS server.
func (c Config) EmbeddedNATS() bool { return c.NATS == "" }

// RunsScheduler reports whether the daemon runs a scheduler replica.
func (c Config) RunsScheduler() bool {
	switch c.Scheduler {
	case "on":
		return c.ControlPlane()
	case "off":
		return false
	}
	return c.EmbeddedNATS()
}

// Namespace is one declared namespace: a top-level directory of the mount
// and the identity that makes its KV bytes reusable across hosts
// (DESIGN.md, "Data model").
type Namespace struct {
	Name string
	// UID and GID own the namespace directory (default: the daemon's own).
	UID, GID int
	// Mode is the directory's permission bits (YAML: octal string, default
	// "0755").
	Mode os.FileMode
	// Quota caps the namespace's bytes; 0 means no quota.
	Quota int64
	// BlockSize in bytes; 0 in YAML means the global block_size.
	BlockSize int
	// Identity: two hosts share a block only when all of these match.
	ModelID, ModelRevision, TokenizerRevision string
	KVDtype, LayoutVersion, Tenant            string
	// KVLayout overrides the global kv_layout for this namespace.
	KVLayout string
	// TokensPerBlock is how many tokens one KV file of the namespace holds
	// (0: unknown); PrefillUsPerToken what recomputing one token's KV
	// costs its engine, in µs (0: unknown). Status and metrics turn
	// lookup hits into tokens found and prefill time avoided with them.
	TokensPerBlock    int
	PrefillUsPerToken float64
	// RestoreBudget is how long an open for reading may take to bring a
	// file up from lower tiers; a longer predicted restore is answered as
	// a miss and the file prestaged (0: no budget).
	RestoreBudget time.Duration
}

// PoolTarget is one NVMe-oF target of the pool_targets: list.
type PoolTarget struct {
	Transport string // tcp or rdma
	Address   string // IP address
	ServiceID string // port, default 4420
	NQN       string // subsystem NQN
	HostNQN   string // this host's NQN ("" = the kernel's default)
}

// Export is one NBD export declared in the YAML exports: list. Its bytes
// are an object of the tiering core (namespace "nbd").
type Export struct {
	Name string
	// Size in bytes; an existing export may grow, never shrink.
	Size int64
	// BlockSize in bytes; 0 means the NBD front end's default (64 KiB).
	BlockSize int
	// ReadOnly exports refuse writes, trims and write-zeroes (EPERM).
	ReadOnly bool
	// Namespace, when set, names the configured namespace whose quota
	// (quota_bytes) the export's whole Size counts against, as its files
	// do; "" counts it against none.
	Namespace string
}

// Source reports which layer set the option named by its YAML key
// ("dram", "mount", ...). Unknown keys report SourceDefault.
func (c Config) Source(key string) Source { return c.given[key].src }

// UsesDevRoot reports whether the mount point or the data directory came
// from the built-in checkout defaults (under DevRoot in the working
// directory); the daemon says so when it starts.
func (c Config) UsesDevRoot() bool {
	return c.Source("mount") == SourceDefault || c.Source("data_dir") == SourceDefault
}

// Summary returns one line per option, "key = value (source)", in table
// order, followed by one line per namespace: what the daemon logs at start.
func (c Config) Summary() []string {
	var out []string
	if c.File != "" {
		out = append(out, "config file = "+c.File)
	} else {
		out = append(out, "config file = (none)")
	}
	for _, o := range table() {
		out = append(out, fmt.Sprintf("%s = %s (%s)", o.Key, o.get(&c), c.Source(o.Key)))
	}
	for _, ns := range c.Namespaces {
		out = append(out, fmt.Sprintf("namespace %s uid=%d gid=%d mode=%#o quota=%s block_size=%s model=%s@%s tenant=%s",
			ns.Name, ns.UID, ns.GID, ns.Mode, FormatSize(ns.Quota), FormatSize(int64(ns.BlockSize)),
			ns.ModelID, ns.ModelRevision, ns.Tenant))
	}
	return out
}

// SlogLevel maps LogLevel to a slog.Level (unknown values → Info; Load
// rejects them anyway).
func (c Config) SlogLevel() slog.Level {
	switch strings.ToLower(c.LogLevel) {
	case "debug":
		return slog.LevelDebug
	case "warn", "warning":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}

// G4Path returns the directory of a file:// G4 and true, or "" and false
// when G4 is "none" or not a local directory.
func (c Config) G4Path() (string, bool) {
	if p, ok := strings.CutPrefix(c.G4, "file://"); ok {
		return p, true
	}
	return "", false
}

// G4SizeAuto is the G4Size of g4_size "auto" (the default).
const G4SizeAuto = -1

// G4Enabled reports whether a G4 tier is configured (G4 != "none").
func (c Config) G4Enabled() bool { return c.G4 != "none" }

// EnsureDirs creates the mount point, the data directory (mode 0700), the
// G3 directory and a local G4 directory when they do not exist yet. It
// returns the first mkdir error.
func (c Config) EnsureDirs() error {
	type dir struct {
		key, path string
		mode      os.FileMode
	}
	dirs := []dir{{"data_dir", c.DataDir, 0o700}, {"mount", c.Mount, 0o755}}
	if c.G3Size > 0 {
		dirs = append(dirs, dir{"g3_dir", c.G3Dir, 0o700})
	}
	if p, ok := c.G4Path(); ok {
		dirs = append(dirs, dir{"g4", p, 0o700})
	}
	for _, d := range dirs {
		// Parents are world-traversable (0755): the mount point may sit
		// next to the private data directory (the embedded default), and
		// other users must reach the mount.
		if err := os.MkdirAll(filepath.Dir(d.path), 0o755); err != nil {
			return fmt.Errorf("config: %s: create %s: %w", d.key, filepath.Dir(d.path), err)
		}
		if err := os.MkdirAll(d.path, d.mode); err != nil {
			return fmt.Errorf("config: %s: create %s: %w", d.key, d.path, err)
		}
	}
	return nil
}

// absPath makes p absolute against the working directory and cleans it.
func absPath(p string) (string, error) {
	if p == "" {
		return "", nil
	}
	if strings.HasPrefix(p, "~/") {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		p = filepath.Join(home, p[2:])
	}
	return filepath.Abs(p)
}

// UnixMode returns the namespace directory's mode as raw unix permission
// bits (0–07777, setuid/setgid/sticky included), for FUSE attributes.
func (n Namespace) UnixMode() uint32 {
	m := uint32(n.Mode.Perm())
	if n.Mode&os.ModeSetuid != 0 {
		m |= 0o4000
	}
	if n.Mode&os.ModeSetgid != 0 {
		m |= 0o2000
	}
	if n.Mode&os.ModeSticky != 0 {
		m |= 0o1000
	}
	return m
}
