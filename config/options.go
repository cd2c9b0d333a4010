package config

import (
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Option is one row of the options table: a YAML key and the flag and
// environment variable derived from it, the default as text (parsed exactly
// like user input, or a description such as "<data_dir>/g3" for derived
// defaults) and a one-line help.
type Option struct {
	// Key is the YAML key ("data_dir").
	Key string
	// Flag is the long flag name without dashes ("data-dir").
	Flag string
	// Env is the environment variable ("CTXMEM_DATA_DIR").
	Env string
	// Default is the default as shown to users.
	Default string
	// Help is a one-line description.
	Help string

	// set parses a user value into the config.
	set func(c *Config, v string) error
	// get renders the current value (for Summary).
	get func(c *Config) string
	// derive fills the value from other options when it is still the zero
	// value after all layers; nil means Default is parsed literally.
	derive func(c *Config)
	// from is the option derive computes the value from ("" for none):
	// Validate does not report a derived value whose source it reported.
	from string
}

// EnvPrefix prefixes every environment variable.
const EnvPrefix = "CTXMEM_"

// ConfigFlag and ConfigEnv name the config-file flag and variable, which
// sit outside the table (they say where the table's YAML comes from).
const (
	ConfigFlag = "config"
	ConfigEnv  = EnvPrefix + "CONFIG"
)

// Options returns the options table in documentation order. The returned
// slice is a fresh copy.
func Options() []Option { return table() }

func opt(key, def, help string, set func(*Config, string) error, get func(*Config) string) Option {
	return Option{
		Key: key, Flag: strings.ReplaceAll(key, "_", "-"), Env: EnvPrefix + strings.ToUpper(key),
		Default: def, Help: help, set: set, get: get,
	}
}

func derived(o Option, from string, derive func(*Config)) Option {
	o.derive, o.from = derive, from
	return o
}

func table() []Option {
	return []Option{
		opt("mount", "./"+DevRoot+"/mnt", "FUSE mount point (created if missing)",
			setString(func(c *Config) *string { return &c.Mount }), getString(func(c *Config) *string { return &c.Mount })),
		opt("data_dir", "./"+DevRoot+"/data", "data directory: metadata, G3 segments and local G4 by default, admin socket",
			setString(func(c *Config) *string { return &c.DataDir }), getString(func(c *Config) *string { return &c.DataDir })),
		opt("dram", "1GiB", "G2 (host DRAM) budget; sizes accept 4096, 512MiB, 4GiB, 1G (all units binary)",
			setSize(func(c *Config) *int64 { return &c.DRAM }), getSize(func(c *Config) *int64 { return &c.DRAM })),
		opt("dram_high", "0.90", "G2 high watermark, a fraction of dram (0.9) or a percentage (90%): demotion starts above it",
			setFraction(func(c *Config) *float64 { return &c.DRAMHigh }), getFloat(func(c *Config) *float64 { return &c.DRAMHigh })),
		opt("dram_low", "0.75", "G2 low watermark: demotion stops below it",
			setFraction(func(c *Config) *float64 { return &c.DRAMLow }), getFloat(func(c *Config) *float64 { return &c.DRAMLow })),
		derived(opt("dirty_bytes", "dram/4", "bound on dirty (not yet written back) bytes in G2; writers wait above it; 0 = dram/4",
			setSize(func(c *Config) *int64 { return &c.DirtyBytes }), getSize(func(c *Config) *int64 { return &c.DirtyBytes })),
			"dram", func(c *Config) { c.DirtyBytes = c.DRAM / 4 }),
		opt("block_size", "256KiB", "default namespace block size: power of two, 4KiB to 4MiB",
			setBlockSize(func(c *Config) *int { return &c.BlockSize }), getInt(func(c *Config) *int { return &c.BlockSize })),
		derived(opt("g3_dir", "<data_dir>/g3", "directory of G3 (local NVMe) segment files",
			setString(func(c *Config) *string { return &c.G3Dir }), getString(func(c *Config) *string { return &c.G3Dir })),
			"data_dir", func(c *Config) { c.G3Dir = filepath.Join(c.DataDir, "g3") }),
		opt("g3_size", "10GiB", "G3 capacity (fixed default, not a fraction of the filesystem); 0 disables G3",
			setSize(func(c *Config) *int64 { return &c.G3Size }), getSize(func(c *Config) *int64 { return &c.G3Size })),
		opt("statfs_capacity", "0", "capacity statfs reports for a namespace without a quota (f_blocks); 0 = dram + g3_size (an unbounded G4 adds nothing)",
			setSize(func(c *Config) *int64 { return &c.StatfsCapacity }), getSize(func(c *Config) *int64 { return &c.StatfsCapacity })),
		opt("g3_segment_size", "32MiB", "size of one G3 segment file (at least the largest block size)",
			setSize(func(c *Config) *int64 { return &c.G3SegmentSize }), getSize(func(c *Config) *int64 { return &c.G3SegmentSize })),
		opt("g3_high", "0.90", "G3 high watermark, a fraction of g3_size (0.9) or a percentage (90%)",
			setFraction(func(c *Config) *float64 { return &c.G3High }), getFloat(func(c *Config) *float64 { return &c.G3High })),
		opt("g3_low", "0.75", "G3 low watermark",
			setFraction(func(c *Config) *float64 { return &c.G3Low }), getFloat(func(c *Config) *float64 { return &c.G3Low })),
		opt("g3_compact_live", "0.5", "while G3's live data is at most this fraction of what g3_low holds, reclaim copies live blocks forward (compaction) instead of demoting them to G4; write amplification about 1/(1-x) at worst; 0 = off",
			setFractionOrZero(func(c *Config) *float64 { return &c.G3CompactLive }), getFloat(func(c *Config) *float64 { return &c.G3CompactLive })),
		derived(opt("g4", "file://<data_dir>/g4", "G4 object store: file:///abs/path, s3://bucket/prefix, or none to disable",
			setG4, func(c *Config) string { return c.G4 }),
			"data_dir", func(c *Config) { c.G4 = "file://" + filepath.Join(c.DataDir, "g4") }),
		opt("g4_ttl", "72h", "how long cold blocks are kept in G4 (Go duration, or days as 3d)",
			setDuration(func(c *Config) *time.Duration { return &c.G4TTL }), getDuration(func(c *Config) *time.Duration { return &c.G4TTL })),
		opt("g4_size", "auto", "most payload bytes G4 may hold; above g4_high its oldest blocks are evicted; auto = 80% of the size of the filesystem of a file:// G4 (measured at start), less g3_size when G3 is on that filesystem (at least a tenth of it), unbounded for s3://; 0 = unbounded",
			setG4Size, getG4Size),
		opt("g4_high", "0.95", "G4 high watermark, a fraction of g4_size (0.95) or a percentage (95%): eviction of the oldest blocks starts above it",
			setFraction(func(c *Config) *float64 { return &c.G4High }), getFloat(func(c *Config) *float64 { return &c.G4High })),
		opt("g4_low", "0.85", "G4 low watermark: eviction stops at it",
			setFraction(func(c *Config) *float64 { return &c.G4Low }), getFloat(func(c *Config) *float64 { return &c.G4Low })),
		opt("g4_pack_size", "16MiB", "largest G4 pack object: a file sunk to G4 is stored as runs of its blocks of up to this size (one PUT each instead of one per block; keep it at most 16MiB on S3, whose larger uploads take several requests); 1MiB to 256MiB, or 0 for one object per block",
			setSize(func(c *Config) *int64 { return &c.G4PackSize }), getSize(func(c *Config) *int64 { return &c.G4PackSize })),
		opt("g4_lifecycle", "auto", "S3 bucket lifecycle rule for g4_ttl: auto (installed where the server supports it: the server then also deletes KV blocks under the prefix g4_ttl after they were stored, rounded up to whole days, even those of a host that is gone; NBD export blocks are untagged and kept) or off (the daemon's rule is removed); the daemon's own expiry sweep runs either way",
			setString(func(c *Config) *string { return &c.G4Lifecycle }), getString(func(c *Config) *string { return &c.G4Lifecycle })),
		opt("write_timeout", "30s", "longest a write or fsync waits without write-back progress before it fails (ENOSPC if the tiers below G2 are full, else EIO)",
			setDuration(func(c *Config) *time.Duration { return &c.WriteTimeout }), getDuration(func(c *Config) *time.Duration { return &c.WriteTimeout })),
		opt("local_read_timeout", "10s", "longest a read of G3 or G3.5 may take before it fails with EIO (a hung device: five such failures take the tier down, so no reader waits on it)",
			setDuration(func(c *Config) *time.Duration { return &c.LocalReadTimeout }), getDuration(func(c *Config) *time.Duration { return &c.LocalReadTimeout })),
		opt("local_write_timeout", "10s", "longest a write, delete or sync of G3 or G3.5 may take before it fails (a hung device: five such failures take the tier down; write-back then goes to G4, and writers that wait on write-back fail with EIO within a second if no tier below G2 is up)",
			setDuration(func(c *Config) *time.Duration { return &c.LocalWriteTimeout }), getDuration(func(c *Config) *time.Duration { return &c.LocalWriteTimeout })),
		opt("passthrough", "true", "serve files by FUSE passthrough from memory files while they are in G2 (needs root and Linux 6.9+; false: every read and write goes through the daemon)",
			setBool(func(c *Config) *bool { return &c.Passthrough }), getBool(func(c *Config) *bool { return &c.Passthrough })),
		opt("passthrough_writes", "false", "serve opens for writing by passthrough too (writes never reach the daemon, but land in DRAM unchecked by dirty_bytes and dram until fsync or close)",
			setBool(func(c *Config) *bool { return &c.PassthroughWrites }), getBool(func(c *Config) *bool { return &c.PassthroughWrites })),
		opt("passthrough_max_bytes", "256MiB", "largest file served by passthrough (an open brings the whole file into G2 first); larger files go through the daemon",
			setSize(func(c *Config) *int64 { return &c.PassthroughMaxBytes }), getSize(func(c *Config) *int64 { return &c.PassthroughMaxBytes })),
		opt("kernel_files", "262144", "most files the kernel keeps looked up (a dentry and inode there, about 1.1 KiB of kernel slab, and about 460 B of FUSE state in the daemon, each); past it the least recently used files that are not open are invalidated so the kernel forgets them, and their next path lookup costs one LOOKUP; 0 = no bound",
			setCountOrZero(func(c *Config) *int { return &c.KernelFiles }), getCount(func(c *Config) *int { return &c.KernelFiles })),
		opt("passthrough_max_files", "auto", "most files that keep a memory file for passthrough at once (each costs the daemon a descriptor and a mapping; the least recently closed give theirs up first); auto = min(65536, (open-file limit - 4096) / 2, vm.max_map_count / 4), at least 1024",
			setCountOrAuto(func(c *Config) *int { return &c.PassthroughMaxFiles }), getCountOrAuto(func(c *Config) *int { return &c.PassthroughMaxFiles })),
		opt("writeback_delay", "30ms", "how long a dirty block's write-back waits after its latest write, so a block written in pieces is stored once; a block rewritten in place (NBD random writes) is held 100x this after its first write, and past half of dirty_bytes the oldest are stored first (0 = store at once; fsync, NBD FLUSH/FUA and close never wait for it)",
			setDuration(func(c *Config) *time.Duration { return &c.WriteBackDelay }), getDuration(func(c *Config) *time.Duration { return &c.WriteBackDelay })),
		opt("g2_policy", "decay", "G2 eviction policy: decay (decayed reference count with TinyLFU admission), adaptive (decay or LRU, whichever hits more on sampled shadow caches) density (evicts the lowest hit density learned per class of reference count, block index and whether the next block followed, never more than 0.002 below LRU or ARC on ctxmemd sim's synthetic traces) or arbiter (decay or density, whichever hits more on sampled shadow caches: the better of the two on the bundled trace at each size, and as robust as density on the synthetic traces); see docs/tiering.md",
			setString(func(c *Config) *string { return &c.G2Policy }), getString(func(c *Config) *string { return &c.G2Policy })),
		opt("heat_half_life", "60s", "half-life of the block heat score",
			setDuration(func(c *Config) *time.Duration { return &c.HeatHalfLife }), getDuration(func(c *Config) *time.Duration { return &c.HeatHalfLife })),
		opt("cold_threshold", "30", "heat score (0-100) under which a block is cold",
			setScore(func(c *Config) *float64 { return &c.ColdThreshold }), getFloat(func(c *Config) *float64 { return &c.ColdThreshold })),
		opt("warm_threshold", "60", "heat score (0-100) from which a block is hot; between the two it is warm",
			setScore(func(c *Config) *float64 { return &c.WarmThreshold }), getFloat(func(c *Config) *float64 { return &c.WarmThreshold })),
		derived(opt("admin", "<data_dir>/admin.sock", "admin unix socket (mode 0600) used by ctxmemd status",
			setString(func(c *Config) *string { return &c.Admin }), getString(func(c *Config) *string { return &c.Admin })),
			"data_dir", func(c *Config) { c.Admin = filepath.Join(c.DataDir, "admin.sock") }),
		opt("metrics", "127.0.0.1:9464", "Prometheus /metrics listen address (host:port); empty disables",
			setString(func(c *Config) *string { return &c.Metrics }), getString(func(c *Config) *string { return &c.Metrics })),
		opt("kv_events", "", "ZMQ PUB endpoint of KV events in vLLM's format (BlockStored/BlockRemoved with medium = tier) for KV-aware routers, e.g. tcp://127.0.0.1:5557; empty disables",
			setString(func(c *Config) *string { return &c.KVEvents }), getString(func(c *Config) *string { return &c.KVEvents })),
		opt("kv_events_replay", "", "ZMQ ROUTER endpoint answering KV event replay requests (start sequence, 8 bytes big-endian); empty disables replay",
			setString(func(c *Config) *string { return &c.KVEventsReplay }), getString(func(c *Config) *string { return &c.KVEventsReplay })),
		opt("kv_events_topic", "", "topic frame of every KV event message (vLLM's default is empty)",
			setString(func(c *Config) *string { return &c.KVEventsTopic }), getString(func(c *Config) *string { return &c.KVEventsTopic })),
		opt("kv_events_buffer", "10000", "KV event batches kept for replay",
			setCount(func(c *Config) *int { return &c.KVEventsBuffer }), getCount(func(c *Config) *int { return &c.KVEventsBuffer })),
		opt("kv_layout", "", "default file naming of namespaces for KV events: vllm, sglang, lmcache, nixl, flat, or a regular expression with a (?P<hash>...) group (hex) matched against the path in the namespace; empty = no events (namespaces: kv_layout overrides it)",
			setString(func(c *Config) *string { return &c.KVLayout }), getString(func(c *Config) *string { return &c.KVLayout })),
		opt("nbd", "", "NBD listeners, comma-separated: unix:///path (mode 0600) and/or tcp://127.0.0.1:10809; empty disables NBD",
			setString(func(c *Config) *string { return &c.NBD }), getString(func(c *Config) *string { return &c.NBD })),
		opt("nbd_size", "1GiB", "size of the NBD export named default",
			setSize(func(c *Config) *int64 { return &c.NBDSize }), getSize(func(c *Config) *int64 { return &c.NBDSize })),
		opt("link", "", "network interface that reaches the CMX pools; its link state is watched (netlink) and shown in status; empty = none",
			setString(func(c *Config) *string { return &c.Link }), getString(func(c *Config) *string { return &c.Link })),
		opt("cluster", "default", "control-bus cluster name (letters, digits, _ and -): subjects ctxmem.<cluster>.v1.*",
			setString(func(c *Config) *string { return &c.Cluster }), getString(func(c *Config) *string { return &c.Cluster })),
		derived(opt("host", "<OS host name>", "this host's name on the control bus (letters, digits, _ and -)",
			setString(func(c *Config) *string { return &c.Host }), getString(func(c *Config) *string { return &c.Host })),
			"", func(c *Config) { c.Host = DefaultHost() }),
		opt("nats", "", "NATS URL(s) of the control bus, comma-separated; empty embeds a NATS server in the daemon; none disables the control plane",
			setString(func(c *Config) *string { return &c.NATS }), getString(func(c *Config) *string { return &c.NATS })),
		opt("nats_listen", "", "client listener (host:port) of the embedded NATS server, for other hosts and schedulers; empty = in-process only",
			setString(func(c *Config) *string { return &c.NATSListen }), getString(func(c *Config) *string { return &c.NATSListen })),
		opt("nats_user", "", "NATS user name (with nats_password)",
			setString(func(c *Config) *string { return &c.NATSUser }), getString(func(c *Config) *string { return &c.NATSUser })),
		opt("nats_password", "", "NATS password (shown as *** in status and logs)",
			setString(func(c *Config) *string { return &c.NATSPassword }), getSecret(func(c *Config) *string { return &c.NATSPassword })),
		opt("nats_token", "", "NATS authentication token (shown as ***)",
			setString(func(c *Config) *string { return &c.NATSToken }), getSecret(func(c *Config) *string { return &c.NATSToken })),
		opt("nats_nkey", "", "file holding a NATS nkey user seed",
			setString(func(c *Config) *string { return &c.NATSNKey }), getString(func(c *Config) *string { return &c.NATSNKey })),
		opt("nats_creds", "", "NATS credentials file (JWT and seed)",
			setString(func(c *Config) *string { return &c.NATSCreds }), getString(func(c *Config) *string { return &c.NATSCreds })),
		opt("nats_tls_cert", "", "TLS client certificate (PEM) for NATS",
			setString(func(c *Config) *string { return &c.NATSTLSCert }), getString(func(c *Config) *string { return &c.NATSTLSCert })),
		opt("nats_tls_key", "", "TLS client key (PEM) for NATS",
			setString(func(c *Config) *string { return &c.NATSTLSKey }), getString(func(c *Config) *string { return &c.NATSTLSKey })),
		opt("nats_tls_ca", "", "CA bundle (PEM) to verify the NATS server",
			setString(func(c *Config) *string { return &c.NATSTLSCA }), getString(func(c *Config) *string { return &c.NATSTLSCA })),
		opt("scheduler", "auto", "run a scheduler replica inside the daemon: auto (only with the embedded NATS), on, off",
			setString(func(c *Config) *string { return &c.Scheduler }), getString(func(c *Config) *string { return &c.Scheduler })),
		opt("report_interval", "1s", "how often the sidecar sends its heat report and liveness",
			setDuration(func(c *Config) *time.Duration { return &c.ReportInterval }), getDuration(func(c *Config) *time.Duration { return &c.ReportInterval })),
		opt("sink_grace", "5m", "scheduler: how long a cold private object stays idle before it is sunk to G4",
			setDuration(func(c *Config) *time.Duration { return &c.SinkGrace }), getDuration(func(c *Config) *time.Duration { return &c.SinkGrace })),
		opt("pool", "", "G3.5 shared pool: an attached NVMe-oF namespace (block device) or a file every host opens; empty disables G3.5 (see pool_targets)",
			setString(func(c *Config) *string { return &c.Pool }), getString(func(c *Config) *string { return &c.Pool })),
		opt("pool_lease_ttl", "30s", "lifetime of a pool extent lease (renewed at a third of it); a crashed host's extents are reclaimable after it",
			setDuration(func(c *Config) *time.Duration { return &c.PoolLeaseTTL }), getDuration(func(c *Config) *time.Duration { return &c.PoolLeaseTTL })),
		opt("pool_share", "eager", "when KV files go to the G3.5 pool: eager (each file once closed and written back, before another host asks; while the pool has room and this host leases under half of its extents) or wanted (only after another host missed it: fewer pool writes, fewer cross-host hits)",
			setString(func(c *Config) *string { return &c.PoolShare }), getString(func(c *Config) *string { return &c.PoolShare })),
		opt("log_level", "info", "log level: debug, info, warn or error",
			setLogLevel, getString(func(c *Config) *string { return &c.LogLevel })),
	}
}

func setString(f func(*Config) *string) func(*Config, string) error {
	return func(c *Config, v string) error { *f(c) = strings.TrimSpace(v); return nil }
}

func getString(f func(*Config) *string) func(*Config) string {
	return func(c *Config) string { return *f(c) }
}

// getSecret renders a secret as "***" (or "" when unset).
func getSecret(f func(*Config) *string) func(*Config) string {
	return func(c *Config) string {
		if *f(c) == "" {
			return ""
		}
		return "***"
	}
}

// DefaultHost returns the OS host name reduced to what a control-bus host
// name allows (letters, digits, '_' and '-'; other bytes become '-'),
// or "host" when it is unknown.
func DefaultHost() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "host"
	}
	if i := strings.IndexByte(h, '.'); i > 0 {
		h = h[:i]
	}
	b := []byte(h)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			b[i] = '-'
		}
	}
	if len(b) > 64 {
		b = b[:64]
	}
	return string(b)
}

func setSize(f func(*Config) *int64) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := ParseSize(v)
		if err != nil {
			return err
		}
		*f(c) = n
		return nil
	}
}

func getSize(f func(*Config) *int64) func(*Config) string {
	return func(c *Config) string { return FormatSize(*f(c)) }
}

func setBlockSize(f func(*Config) *int) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := ParseSize(v)
		if err != nil {
			return err
		}
		if n > math.MaxInt32 {
			return fmt.Errorf("block size %q is too large", v)
		}
		*f(c) = int(n)
		return nil
	}
}

func getInt(f func(*Config) *int) func(*Config) string {
	return func(c *Config) string { return FormatSize(int64(*f(c))) }
}

// parseFraction accepts "0.9", ".9" or "90%".
func parseFraction(v string) (float64, error) {
	t := strings.TrimSpace(v)
	pct := strings.HasSuffix(t, "%")
	x, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(t, "%")), 64)
	if err != nil || math.IsNaN(x) {
		return 0, fmt.Errorf("%q is not a number or percentage", v)
	}
	if pct {
		x /= 100
	}
	if x <= 0 || x > 1 {
		return 0, fmt.Errorf("%q is outside (0, 1] (write 0.9 or 90%%)", v)
	}
	return x, nil
}

func setFraction(f func(*Config) *float64) func(*Config, string) error {
	return func(c *Config, v string) error {
		x, err := parseFraction(v)
		if err != nil {
			return err
		}
		*f(c) = x
		return nil
	}
}

// setFractionOrZero is setFraction that also takes 0 (off).
func setFractionOrZero(f func(*Config) *float64) func(*Config, string) error {
	frac := setFraction(f)
	return func(c *Config, v string) error {
		if x, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "%")), 64); err == nil && x == 0 {
			*f(c) = 0
			return nil
		}
		return frac(c, v)
	}
}

func getFloat(f func(*Config) *float64) func(*Config) string {
	return func(c *Config) string { return strconv.FormatFloat(*f(c), 'g', -1, 64) }
}

func setScore(f func(*Config) *float64) func(*Config, string) error {
	return func(c *Config, v string) error {
		x, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || math.IsNaN(x) {
			return fmt.Errorf("%q is not a number", v)
		}
		if x < 0 || x > 100 {
			return fmt.Errorf("heat score %q is outside 0-100", v)
		}
		*f(c) = x
		return nil
	}
}

// parseDuration accepts Go durations ("90s", "72h") and whole or
// fractional days ("3d", "1.5d").
func parseDuration(v string) (time.Duration, error) {
	t := strings.TrimSpace(v)
	if d, ok := strings.CutSuffix(t, "d"); ok {
		x, err := strconv.ParseFloat(d, 64)
		if err == nil && x >= 0 && x*24 < math.MaxInt64/float64(time.Hour) {
			return time.Duration(x * 24 * float64(time.Hour)), nil
		}
	}
	dur, err := time.ParseDuration(t)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (write 60s, 72h or 3d)", v)
	}
	if dur < 0 {
		return 0, fmt.Errorf("duration %q is negative", v)
	}
	return dur, nil
}

func setDuration(f func(*Config) *time.Duration) func(*Config, string) error {
	return func(c *Config, v string) error {
		d, err := parseDuration(v)
		if err != nil {
			return err
		}
		*f(c) = d
		return nil
	}
}

func setCount(f func(*Config) *int) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return fmt.Errorf("%q is not a positive whole number", v)
		}
		*f(c) = n
		return nil
	}
}

// setCountOrZero is setCount that also takes 0 (the option's "no bound").
func setCountOrZero(f func(*Config) *int) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 {
			return fmt.Errorf("%q is not 0 or a positive whole number", v)
		}
		*f(c) = n
		return nil
	}
}

// setCountOrAuto is setCount that also takes "auto" (stored as 0: the
// consumer computes the value).
func setCountOrAuto(f func(*Config) *int) func(*Config, string) error {
	return func(c *Config, v string) error {
		if strings.EqualFold(strings.TrimSpace(v), "auto") {
			*f(c) = 0
			return nil
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 {
			return fmt.Errorf("%q is not auto or a positive whole number", v)
		}
		*f(c) = n
		return nil
	}
}

func getCountOrAuto(f func(*Config) *int) func(*Config) string {
	return func(c *Config) string {
		if *f(c) == 0 {
			return "auto"
		}
		return strconv.Itoa(*f(c))
	}
}

func getCount(f func(*Config) *int) func(*Config) string {
	return func(c *Config) string { return strconv.Itoa(*f(c)) }
}

func setBool(f func(*Config) *bool) func(*Config, string) error {
	return func(c *Config, v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%q is not true or false", v)
		}
		*f(c) = b
		return nil
	}
}

func getBool(f func(*Config) *bool) func(*Config) string {
	return func(c *Config) string { return strconv.FormatBool(*f(c)) }
}

func getDuration(f func(*Config) *time.Duration) func(*Config) string {
	return func(c *Config) string { return f(c).String() }
}

func setLogLevel(c *Config, v string) error {
	l := strings.ToLower(strings.TrimSpace(v))
	switch l {
	case "debug", "info", "warn", "error":
	case "warning":
		l = "warn"
	default:
		return fmt.Errorf("log level %q is not one of debug, info, warn, error", v)
	}
	c.LogLevel = l
	return nil
}

// setG4Size accepts "auto" (G4SizeAuto) or a size (0 = unbounded).
func setG4Size(c *Config, v string) error {
	if strings.EqualFold(strings.TrimSpace(v), "auto") {
		c.G4Size = G4SizeAuto
		return nil
	}
	n, err := ParseSize(v)
	if err != nil {
		return fmt.Errorf("%w (or auto)", err)
	}
	c.G4Size = n
	return nil
}

func getG4Size(c *Config) string {
	if c.G4Size == G4SizeAuto {
		return "auto"
	}
	return FormatSize(c.G4Size)
}

// setG4 accepts "none", "" (derived default), file:// URLs, plain paths
// (stored as file:// URLs once made absolute by Load) and s3:// URLs.
func setG4(c *Config, v string) error {
	t := strings.TrimSpace(v)
	switch {
	case t == "" || strings.EqualFold(t, "none"):
		c.G4 = strings.ToLower(t)
		return nil
	case !strings.Contains(t, "://"):
		c.G4 = "file://" + t // made absolute in Load
		return nil
	}
	u, err := url.Parse(t)
	if err != nil {
		return fmt.Errorf("%q is not a URL: %v", v, err)
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return fmt.Errorf("%q: a file URL needs three slashes and an absolute path (file:///var/lib/ctxmem/g4)", v)
		}
		if u.Path == "" {
			return fmt.Errorf("%q: file URL has no path", v)
		}
		c.G4 = "file://" + u.Path
	case "s3":
		if u.Host == "" {
			return fmt.Errorf("%q: s3 URL has no bucket (s3://bucket/prefix)", v)
		}
		c.G4 = t
	default:
		return fmt.Errorf("%q: unsupported scheme %q (file, s3 or none)", v, u.Scheme)
	}
	return nil
}

// checkAddr validates a host:port listen address.
func checkAddr(a string) error {
	_, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %v", a, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("%q has a bad port", a)
	}
	return nil
}
