package config

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"time"
)

// Block-size limits in bytes (DESIGN.md: KV blocks of 4 KiB to 4 MiB).
const (
	MinBlockSize = 4 << 10
	MaxBlockSize = 4 << 20
)

// validToken reports whether s is a valid control-bus name token.
func validToken(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// maxSocketPath is the longest unix socket path Linux accepts (sun_path is
// 108 bytes including the terminating NUL).
const maxSocketPath = 107

// Validate checks the whole configuration and returns every problem found,
// joined (errors.Join), each naming its key: empty paths, a data directory
// inside the mount, watermarks with low >= high, block sizes that are not
// powers of two in 4 KiB–4 MiB, a segment smaller than a block, dirty bytes
// above dram, thresholds out of order, a bad metrics address, a socket path
// too long, duplicate or malformed namespaces.
//
// Only root causes are reported: a value the user did not give, derived
// from an option already reported (dirty_bytes from dram, g3_dir, g4 and
// admin from data_dir), is not reported too.
func (c Config) Validate() error {
	var errs []error
	from := map[string]string{} // derived option → the option it derives from
	for _, o := range table() {
		if o.from != "" {
			from[o.Key] = o.from
		}
	}
	reported := map[string]bool{}
	bad := func(key, format string, a ...any) {
		if src := from[key]; src != "" && reported[src] && c.origin(key) == "" {
			return // follows from src's error
		}
		reported[key] = true
		if o := c.origin(key); o != "" {
			errs = append(errs, fmt.Errorf("config: %s: %s: %s", o, key, fmt.Sprintf(format, a...)))
			return
		}
		errs = append(errs, fmt.Errorf("config: %s: %s", key, fmt.Sprintf(format, a...)))
	}
	if c.Mount == "" {
		bad("mount", "must not be empty")
	}
	if c.DataDir == "" {
		bad("data_dir", "must not be empty")
	}
	if c.Mount != "" && c.DataDir != "" {
		if c.Mount == c.DataDir {
			bad("data_dir", "must differ from mount (%s)", c.Mount)
		}
		for _, p := range []struct{ key, path string }{{"data_dir", c.DataDir}, {"g3_dir", c.G3Dir}, {"admin", c.Admin}} {
			if p.path != "" && within(p.path, c.Mount) {
				bad(p.key, "%s is inside the mount point %s (the daemon would store into itself)", p.path, c.Mount)
			}
		}
		if g4, ok := c.G4Path(); ok && within(g4, c.Mount) {
			bad("g4", "%s is inside the mount point %s", g4, c.Mount)
		}
	}
	if !validBlockSize(int64(c.BlockSize)) {
		bad("block_size", "%s is not a power of two between 4KiB and 4MiB", FormatSize(int64(c.BlockSize)))
	}
	if c.DRAM < int64(MaxBlockSize) {
		bad("dram", "%s is too small (at least 4MiB)", FormatSize(c.DRAM))
	}
	checkWatermarks := func(hk, lk string, h, l float64) {
		if l >= h {
			bad(lk, "low watermark %g must be below %s %g", l, hk, h)
		}
	}
	checkWatermarks("dram_high", "dram_low", c.DRAMHigh, c.DRAMLow)
	checkWatermarks("g3_high", "g3_low", c.G3High, c.G3Low)
	checkWatermarks("g4_high", "g4_low", c.G4High, c.G4Low)
	for _, t := range []struct{ key, v string }{{"cluster", c.Cluster}, {"host", c.Host}} {
		if !validToken(t.v) {
			bad(t.key, "%q: want 1-64 letters, digits, '_' or '-'", t.v)
		}
	}
	if c.G4Lifecycle != "auto" && c.G4Lifecycle != "off" {
		bad("g4_lifecycle", "%q: want auto or off", c.G4Lifecycle)
	}
	if c.PoolShare != "eager" && c.PoolShare != "wanted" {
		bad("pool_share", "%q: want eager or wanted", c.PoolShare)
	}
	switch c.Scheduler {
	case "auto", "on", "off":
	default:
		bad("scheduler", "%q: want auto, on or off", c.Scheduler)
	}
	if (c.Pool != "" || len(c.PoolTargets) > 0) && !c.ControlPlane() {
		bad("pool", "the shared pool needs the control plane (extent leases and the shared index live on the bus); nats is none")
	}
	if c.PoolLeaseTTL < 3*time.Second {
		bad("pool_lease_ttl", "%s is too short (at least 3s)", c.PoolLeaseTTL)
	}
	if c.ReportInterval < 100*time.Millisecond {
		bad("report_interval", "%s is too short (at least 100ms)", c.ReportInterval)
	}
	if c.SinkGrace < 0 {
		bad("sink_grace", "must not be negative")
	}
	if c.NATSListen != "" {
		if _, _, err := net.SplitHostPort(c.NATSListen); err != nil {
			bad("nats_listen", "%q is not host:port", c.NATSListen)
		}
		if c.NATS != "" {
			bad("nats_listen", "only applies to the embedded server (nats is %q)", c.NATS)
		}
	}
	if (c.NATSTLSCert == "") != (c.NATSTLSKey == "") {
		bad("nats_tls_cert", "nats_tls_cert and nats_tls_key go together")
	}
	n := 0
	for _, set := range []bool{c.NATSUser != "" || c.NATSPassword != "", c.NATSToken != "", c.NATSNKey != "", c.NATSCreds != ""} {
		if set {
			n++
		}
	}
	if n > 1 {
		bad("nats_user", "give at most one of nats_user/nats_password, nats_token, nats_nkey and nats_creds")
	}
	if c.DirtyBytes <= 0 || c.DirtyBytes > c.DRAM {
		bad("dirty_bytes", "%s must be above 0 and at most dram (%s)", FormatSize(c.DirtyBytes), FormatSize(c.DRAM))
	}
	maxBlock := int64(c.BlockSize)
	for _, ns := range c.Namespaces {
		maxBlock = max(maxBlock, int64(ns.BlockSize))
	}
	if c.StatfsCapacity < 0 {
		bad("statfs_capacity", "must not be negative")
	}
	if c.G3Size < 0 {
		bad("g3_size", "must not be negative")
	}
	if c.G3Size > 0 {
		if c.G3Dir == "" {
			bad("g3_dir", "must not be empty when g3_size > 0")
		}
		if c.G3SegmentSize < maxBlock {
			bad("g3_segment_size", "%s is smaller than the largest block size %s", FormatSize(c.G3SegmentSize), FormatSize(maxBlock))
		}
		// G3 rolls over between segments: it needs two below its high
		// watermark and one below its low (tiering/g3 Options.segLimits).
		seg := float64(c.G3SegmentSize)
		if c.G3SegmentSize > 0 && c.G3High > 0 && c.G3Low > 0 &&
			(int(c.G3High*float64(c.G3Size)/seg) < 2 || int(c.G3Low*float64(c.G3Size)/seg) < 1) {
			need := int64(max(2*seg/c.G3High, seg/c.G3Low))
			need = (need + 1<<20 - 1) / (1 << 20) * (1 << 20)
			bad("g3_size", "%s holds fewer than two %s segments below g3_high %g (and one below g3_low %g); want at least %s, or 0 to disable G3",
				FormatSize(c.G3Size), FormatSize(c.G3SegmentSize), c.G3High, c.G3Low, FormatSize(need))
		}
	}
	if c.G4 == "" {
		bad("g4", "must not be empty (use none to disable)")
	}
	if c.NBD != "" && c.G4 == "none" && c.G3Size > 0 {
		// G3 is a log: reclaiming a segment drops the only stored copy of
		// an export block whose rewrite is not yet written back, and
		// without G4 nothing can keep that flushed version meanwhile, so
		// a kill -9 would read it as zeros. G2-only exports are RAM disks
		// (volatile by design) and stay allowed.
		bad("g4", "none with NBD exports on G3: a G3 reclaim could drop the flushed copy of an export block (set g4, e.g. file://DATA_DIR/g4, or g3_size 0 for a volatile RAM export)")
	}
	if c.G4TTL <= 0 {
		bad("g4_ttl", "must be positive")
	}
	if c.G4Size < G4SizeAuto || c.G4Size > 0 && c.G4Size < maxBlock {
		bad("g4_size", "%s is smaller than the largest block size %s (auto, 0 for unbounded, or a size)", FormatSize(c.G4Size), FormatSize(maxBlock))
	}
	if c.G4PackSize != 0 && (c.G4PackSize < 1<<20 || c.G4PackSize > 256<<20) {
		bad("g4_pack_size", "%s: want 1MiB to 256MiB, or 0 for one object per block", FormatSize(c.G4PackSize))
	}
	if c.LocalReadTimeout < 100*time.Millisecond {
		bad("local_read_timeout", "%v must be at least 100ms", c.LocalReadTimeout)
	}
	if c.LocalWriteTimeout < 100*time.Millisecond {
		bad("local_write_timeout", "%v must be at least 100ms", c.LocalWriteTimeout)
	}
	if c.WriteTimeout < time.Second {
		bad("write_timeout", "%v must be at least 1s", c.WriteTimeout)
	}
	if c.PassthroughMaxBytes < 0 {
		bad("passthrough_max_bytes", "must not be negative")
	}
	if c.WriteBackDelay < 0 || c.WriteBackDelay > time.Second {
		bad("writeback_delay", "%v must be between 0 and 1s", c.WriteBackDelay)
	}
	if c.G2Policy != "decay" && c.G2Policy != "adaptive" && c.G2Policy != "density" && c.G2Policy != "arbiter" {
		bad("g2_policy", "%q: want decay, adaptive, density or arbiter", c.G2Policy)
	}
	if c.HeatHalfLife <= 0 {
		bad("heat_half_life", "must be positive")
	}
	if c.ColdThreshold >= c.WarmThreshold {
		bad("cold_threshold", "%g must be below warm_threshold %g", c.ColdThreshold, c.WarmThreshold)
	}
	switch {
	case c.Admin == "":
		bad("admin", "must not be empty")
	case len(c.Admin) > maxSocketPath:
		bad("admin", "socket path %s is %d bytes, longer than the %d a unix socket allows; set admin to a shorter path",
			c.Admin, len(c.Admin), maxSocketPath)
	}
	if c.Metrics != "" {
		if err := checkAddr(c.Metrics); err != nil {
			bad("metrics", "%v", err)
		}
	}
	if c.KVEvents != "" {
		if err := checkZMQEndpoint(c.KVEvents); err != nil {
			bad("kv_events", "%v", err)
		}
	}
	if c.KVEventsReplay != "" {
		if err := checkZMQEndpoint(c.KVEventsReplay); err != nil {
			bad("kv_events_replay", "%v", err)
		} else if c.KVEvents == "" {
			bad("kv_events_replay", "needs kv_events")
		}
	}
	if err := checkKVLayout(c.KVLayout); err != nil {
		bad("kv_layout", "%v", err)
	}
	if err := setLogLevel(&Config{}, c.LogLevel); err != nil {
		bad("log_level", "%v", err)
	}
	names := map[string]bool{}
	for i, ns := range c.Namespaces {
		key := fmt.Sprintf("namespaces[%d]", i)
		switch {
		case ns.Name == "":
			bad(key, "name is missing")
		case ns.Name == "." || ns.Name == ".." || strings.ContainsAny(ns.Name, "/\x00") || len(ns.Name) > 255:
			bad(key, "name %q is not a valid directory name", ns.Name)
		case names[ns.Name]:
			bad(key, "name %q is declared twice", ns.Name)
		}
		names[ns.Name] = true
		if !validBlockSize(int64(ns.BlockSize)) {
			bad(key, "block_size %s of namespace %q is not a power of two between 4KiB and 4MiB", FormatSize(int64(ns.BlockSize)), ns.Name)
		}
		if ns.Quota < 0 {
			bad(key, "quota is negative")
		}
		if err := checkKVLayout(ns.KVLayout); err != nil {
			bad(key, "kv_layout of namespace %q: %v", ns.Name, err)
		}
	}
	// An export counted in a namespace needs that namespace, and the
	// exports of a namespace with a quota must fit it together (its files
	// then share what is left).
	quota := map[string]int64{}
	for _, ns := range c.Namespaces {
		quota[ns.Name] = ns.Quota
	}
	if len(c.Namespaces) == 0 {
		quota["default"] = 0 // the implicit namespace, without a quota
	}
	inNS := map[string]int64{}
	for i, e := range c.Exports {
		if e.Namespace == "" {
			continue
		}
		if _, ok := quota[e.Namespace]; !ok {
			bad(fmt.Sprintf("exports[%d]", i), "namespace %q of export %q is not a configured namespace", e.Namespace, e.Name)
			continue
		}
		inNS[e.Namespace] += e.Size
	}
	for ns, sum := range inNS {
		if q := quota[ns]; q > 0 && sum > q {
			bad("exports", "the exports counted in namespace %q need %s, more than its quota of %s", ns, FormatSize(sum), FormatSize(q))
		}
	}
	return errors.Join(errs...)
}

func validBlockSize(n int64) bool {
	return n >= MinBlockSize && n <= MaxBlockSize && n&(n-1) == 0
}

// within reports whether path p is dir or inside it (both absolute, clean).
func within(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../") && !filepath.IsAbs(rel)
}
