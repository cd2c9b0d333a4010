// Package sim replays a block-reference trace through cache policies and
// reports block hit ratios. It drives heat.Policy through the same calls
// (Access, ShouldAdmit, Victim, Remove, Insert) the tiering core makes, and
// compares it with a reference LRU, heat.LRU2, W-TinyLFU, ARC and Belady's
// offline optimum (OPT).
//
// Model: each request references its blocks in order; a resident block is
// a hit, any other block a miss, after which the policy may insert it
// (evicting one block when the cache holds capacity blocks). Every block
// reference counts, including hits after a miss in the same request.
//
// SimulateTiers runs any policy as G2 over G3 (a G2 miss is looked up in
// G3; G2 victims are written to G3), and SimulateTwoTier runs two default
// heat.Policy instances that way to measure the G3 write filter
// (PredictReuse).
package sim

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/ctxmem/ctxmemd/heat"
)

// ErrPolicy is returned (wrapped) for an unknown policy name or option.
var ErrPolicy = errors.New("sim: bad policy")

// Result is the outcome of one policy at one capacity.
type Result struct {
	Policy   string        // the policy spec as given
	Capacity int           // cache size in blocks
	Refs     int64         // block references replayed
	Hits     int64         // block references that hit
	HitRatio float64       // Hits / Refs (0 for an empty trace)
	Elapsed  time.Duration // wall time of the replay
}

// DefaultPolicies returns the comparison set, final policy ("policy")
// included: reference LRU, plain LRU-2, ARC, W-TinyLFU, LRU-2 with TinyLFU
// admission, the default heat.Policy, and the offline bounds (LRU with
// perfect reuse prediction, OPT).
func DefaultPolicies() []string {
	return []string{"lru", "lru2", "arc", "wtinylfu", "policy:order=lru2", "policy", "lru-oracle", "opt"}
}

// DefaultCapacities returns the cache sizes, in blocks, of the reference
// comparison on the Mooncake trace: 5,000, 10,000 and 20,000.
func DefaultCapacities() []int { return []int{5000, 10000, 20000} }

// Run loads a trace from r (see Load) and simulates every policy at every
// capacity (in blocks), returning results in capacity-major order. Policy
// specs are a name, optionally followed by ":key=value,key=value":
//
//	lru                      reference LRU (independent of package heat)
//	lru2                     heat.LRU2 order, every miss inserted
//	opt                      Belady's OPT (offline, next-use distances)
//	lru-oracle               LRU that knows whether a block is referenced
//	                         again (offline bound on reuse prediction)
//	arc                      ARC
//	wtinylfu[:window=F,protected=F,sample=N]
//	                         W-TinyLFU; window and protected are fractions
//	                         (default 0.01, 0.8), sample is W/C (default 10)
//	density[:sample=N,reuse=N,depth=on|off]
//	                         heat.DensityPolicy (learned hit density per
//	                         class); depth=off leaves each block's depth
//	                         in its prefix chain out of the classes
//	policy[:order=decay|lru2|lru,halflife=D,sample=N,admit=on|off,reuse=N]
//	                         heat.Policy (defaults: heat.PolicyConfig's);
//	                         reuse is the G3 write filter's PredictReuse
//	                         threshold (SimulateTiers only; 0 writes
//	                         every G2 victim to G3)
//
// It returns an error wrapping ErrTrace for a malformed trace and ErrPolicy
// for an unknown policy or option, or a capacity below 1.
func Run(r io.Reader, capacities []int, policies []string) ([]Result, error) {
	t, err := Load(r)
	if err != nil {
		return nil, err
	}
	var out []Result
	for _, c := range capacities {
		for _, p := range policies {
			res, err := Simulate(t, c, p)
			if err != nil {
				return nil, err
			}
			out = append(out, res)
		}
	}
	return out, nil
}

// Simulate replays t through one policy (a spec as in Run) with a cache of
// capacity blocks. Reference i of the trace happens at its request's
// timestamp plus i nanoseconds, so that times are strictly increasing.
func Simulate(t *Trace, capacity int, policy string) (Result, error) {
	if capacity < 1 {
		return Result{}, fmt.Errorf("%w: capacity %d blocks must be >= 1", ErrPolicy, capacity)
	}
	res := Result{Policy: policy, Capacity: capacity, Refs: int64(len(t.Blocks))}
	start := time.Now()
	name, opts, err := parseSpec(policy)
	if err != nil {
		return Result{}, err
	}
	if name == "opt" || name == "lru-oracle" {
		if len(opts) > 0 {
			return Result{}, fmt.Errorf("%w: %q takes no options", ErrPolicy, policy)
		}
		if name == "opt" {
			res.Hits = optHits(t.Blocks, capacity)
		} else {
			res.Hits = oracleLRUHits(t.Blocks, capacity)
		}
	} else {
		c, err := newCache(name, opts, capacity)
		if err != nil {
			return Result{}, fmt.Errorf("%w (%q)", err, policy)
		}
		for i, b := range t.Blocks {
			if access(c, t.ref(i, b)) {
				res.Hits++
			}
		}
	}
	res.Elapsed = time.Since(start)
	if res.Refs > 0 {
		res.HitRatio = float64(res.Hits) / float64(res.Refs)
	}
	return res, nil
}

// ref is one block reference: the block, its position in the trace and
// its time (UnixNano).
type ref struct {
	block uint64
	i     int
	nanos int64
	depth int32 // position in the request's prefix chain
}

// ref returns reference i of t, block b: it happens at its request's
// timestamp plus i nanoseconds, so that times are strictly increasing.
func (t *Trace) ref(i int, b uint64) ref {
	r := ref{block: b, i: i, nanos: t.Millis[i]*int64(time.Millisecond) + int64(i)}
	if i < len(t.Depth) {
		r.depth = t.Depth[i]
	}
	return r
}

// cache is one simulated policy, usable as a tier. lookup replays a
// reference and reports a hit (touching the block; it may also record the
// reference in the policy's statistics, as heat.Policy.Access does). insert
// follows a miss: the policy may refuse the block (admitted false) or make
// it resident, and reports the block that left the cache to make room
// (evicted), if any. contains reports residency without counting a
// reference.
type cache interface {
	lookup(r ref) bool
	insert(r ref) (victim uint64, evicted, admitted bool)
	contains(block uint64) bool
}

// access replays r through c as a single cache: lookup, and insert on a
// miss. It reports a hit.
func access(c cache, r ref) bool {
	if c.lookup(r) {
		return true
	}
	c.insert(r)
	return false
}

func parseSpec(spec string) (string, map[string]string, error) {
	name, rest, _ := strings.Cut(spec, ":")
	opts := map[string]string{}
	if rest == "" {
		return name, opts, nil
	}
	for kv := range strings.SplitSeq(rest, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return "", nil, fmt.Errorf("%w: option %q in %q is not key=value", ErrPolicy, kv, spec)
		}
		opts[k] = v
	}
	return name, opts, nil
}

// options consumes typed options, remembering the first error and any key
// left unused.
type options struct {
	m   map[string]string
	err error
}

func (o *options) take(k string) (string, bool) {
	v, ok := o.m[k]
	delete(o.m, k)
	return v, ok
}

func (o *options) float(k string, def float64) float64 {
	v, ok := o.take(k)
	if !ok {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0 || f > 1 {
		o.fail("%s=%q is not a fraction in [0,1]", k, v)
	}
	return f
}

func (o *options) int(k string, def int) int {
	v, ok := o.take(k)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		o.fail("%s=%q is not a positive integer", k, v)
	}
	return n
}

func (o *options) fail(format string, args ...any) {
	if o.err == nil {
		o.err = fmt.Errorf("%w: "+format, append([]any{ErrPolicy}, args...)...)
	}
}

func (o *options) done() error {
	if o.err != nil {
		return o.err
	}
	for k := range o.m {
		return fmt.Errorf("%w: unknown option %q", ErrPolicy, k)
	}
	return nil
}

func newCache(name string, m map[string]string, capacity int) (cache, error) {
	o := &options{m: m}
	var c cache
	switch name {
	case "lru":
		c = newRefLRU(capacity)
	case "lru2":
		c = &lru2Cache{l: heat.NewLRU2[uint64](), capacity: capacity}
	case "arc":
		c = newARC(capacity)
	case "wtinylfu":
		c = newWTinyLFU(capacity, o.float("window", 0.01), o.float("protected", 0.8), o.int("sample", heat.DefaultSampleFactor))
	case "density", "arbiter":
		for _, k := range []string{"order", "halflife", "admit"} {
			if _, ok := m[k]; ok && (name == "density" || k != "halflife") {
				return nil, fmt.Errorf("%w: %s takes no %s option", ErrPolicy, name, k)
			}
		}
		cfg, err := policyConfig(o, capacity)
		if err != nil {
			return nil, err
		}
		pc := &policyCache{capacity: capacity, keepAll: cfg.ReuseMinCount == 0}
		var depth func(uint64) int
		switch v, _ := o.take("depth"); v {
		case "", "on":
			depth = func(uint64) int { return int(pc.cur) }
		case "off":
		default:
			return nil, fmt.Errorf("%w: depth=%q (want on or off)", ErrPolicy, v)
		}
		if name == "density" {
			pc.p, err = heat.NewDensityPolicy[uint64](cfg, depth)
		} else {
			pc.p, err = heat.NewArbiterPolicy[uint64](cfg, depth)
		}
		if err != nil {
			return nil, err
		}
		c = pc
	case "policy", "adaptive":
		cfg, err := policyConfig(o, capacity)
		if err != nil {
			return nil, err
		}
		var p placer
		if name == "policy" {
			p, err = heat.NewPolicy[uint64](cfg)
		} else {
			p, err = heat.NewAdaptivePolicy[uint64](cfg)
		}
		if err != nil {
			return nil, err
		}
		pc := &policyCache{p: p, capacity: capacity, keepAll: cfg.ReuseMinCount == 0}
		if v, ok := o.take("depth"); ok {
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return nil, fmt.Errorf("%w: depth=%q is not a duration >= 0", ErrPolicy, v)
			}
			pc.depthAge = d
		}
		c = pc
	default:
		return nil, fmt.Errorf("%w: unknown policy %q", ErrPolicy, name)
	}
	if err := o.done(); err != nil {
		return nil, err
	}
	return c, nil
}

func policyConfig(o *options, capacity int) (heat.PolicyConfig, error) {
	cfg := heat.PolicyConfig{Capacity: capacity, SampleFactor: o.int("sample", 0)}
	if v, ok := o.take("order"); ok {
		switch v {
		case "decay":
			cfg.Order = heat.OrderDecay
		case "lru2":
			cfg.Order = heat.OrderLRU2
		case "lru":
			cfg.Order = heat.OrderLRU
		default:
			return cfg, fmt.Errorf("%w: order=%q (want decay, lru2 or lru)", ErrPolicy, v)
		}
	}
	if v, ok := o.take("halflife"); ok {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return cfg, fmt.Errorf("%w: halflife=%q is not a positive duration", ErrPolicy, v)
		}
		cfg.HalfLife = d
	}
	if v, ok := o.take("reuse"); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return cfg, fmt.Errorf("%w: reuse=%q is not a count >= 0", ErrPolicy, v)
		}
		cfg.ReuseMinCount = n
	} else {
		cfg.ReuseMinCount = heat.DefaultReuseMinCount
	}
	if v, ok := o.take("admit"); ok {
		switch v {
		case "on":
		case "off":
			cfg.NoAdmission = true
		default:
			return cfg, fmt.Errorf("%w: admit=%q (want on or off)", ErrPolicy, v)
		}
	}
	return cfg, o.err
}

// placer is the placement protocol of the heat policies.
type placer = heat.Placer[uint64]

// policyCache drives heat.Policy exactly as the tiering core does (see
// the heat package documentation), with a budget of capacity blocks. As
// G2 above a G3 it writes to G3 only the victims PredictReuse keeps (every
// victim when keepAll: spec option reuse=0).
type policyCache struct {
	p        placer
	capacity int
	keepAll  bool
	// depthAge ages each reference by depthAge per level of depth in its
	// prefix chain (spec option depth=D), so deeper blocks are evicted first.
	depthAge time.Duration
	// cur is the depth of the reference being replayed, the density
	// policy's depth feature.
	cur int32
}

func (c *policyCache) now(r ref) time.Time {
	return time.Unix(0, r.nanos-int64(r.depth)*int64(c.depthAge))
}

func (c *policyCache) lookup(r ref) bool {
	c.cur = r.depth
	return c.p.Access(r.block, heat.Mix64(r.block), c.now(r))
}

func (c *policyCache) insert(r ref) (victim uint64, evicted, admitted bool) {
	c.cur = r.depth
	now := c.now(r)
	h := heat.Mix64(r.block)
	if c.p.Len() >= c.capacity {
		if !c.p.ShouldAdmit(h, now) {
			return 0, false, false
		}
		if victim, evicted = c.p.Victim(); evicted {
			c.p.Remove(victim)
		}
	}
	c.p.Insert(r.block, h, now)
	return victim, evicted, true
}

func (c *policyCache) contains(b uint64) bool { return c.p.Contains(b) }

// keep is the G3 write filter (see writeFilter).
func (c *policyCache) keep(v uint64) bool { return c.keepAll || c.p.PredictReuse(heat.Mix64(v)) }

// lru2Cache is plain LRU-2 (heat.LRU2), inserting every miss.
type lru2Cache struct {
	l        *heat.LRU2[uint64]
	capacity int
}

func (c *lru2Cache) lookup(r ref) bool {
	if !c.l.Contains(r.block) {
		return false
	}
	c.l.Touch(r.block, time.Unix(0, r.nanos))
	return true
}

func (c *lru2Cache) insert(r ref) (victim uint64, evicted, admitted bool) {
	if c.l.Len() >= c.capacity {
		if victim, evicted = c.l.Victim(); evicted {
			c.l.Remove(victim)
		}
	}
	c.l.Touch(r.block, time.Unix(0, r.nanos))
	return victim, evicted, true
}

func (c *lru2Cache) contains(b uint64) bool { return c.l.Contains(b) }
