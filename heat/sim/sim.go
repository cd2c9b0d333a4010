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
// SimulateTwoTier runs two Policies as G2 over G3 to measure the G3 write
// filter (PredictReuse).
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
//	policy[:order=decay|lru2|lru,halflife=D,sample=N,admit=on|off]
//	                         heat.Policy (defaults: heat.PolicyConfig's)
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
			if c.access(b, t.Millis[i]*int64(time.Millisecond)+int64(i)) {
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

// cache is one simulated policy: access replays one reference at time
// nanos (UnixNano) and reports a hit; on a miss it may insert and evict.
type cache interface {
	access(block uint64, nanos int64) bool
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
	case "policy":
		cfg, err := policyConfig(o, capacity)
		if err != nil {
			return nil, err
		}
		p, err := heat.NewPolicy[uint64](cfg)
		if err != nil {
			return nil, err
		}
		c = &policyCache{p: p, capacity: capacity}
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

// policyCache drives heat.Policy exactly as the tiering core does (see
// the heat package documentation), with a budget of capacity blocks.
type policyCache struct {
	p        *heat.Policy[uint64]
	capacity int
}

func (c *policyCache) access(b uint64, nanos int64) bool {
	now := time.Unix(0, nanos)
	h := heat.Mix64(b)
	if c.p.Access(b, h, now) {
		return true
	}
	if c.p.Len() >= c.capacity {
		if !c.p.ShouldAdmit(h, now) {
			return false
		}
		if v, ok := c.p.Victim(); ok {
			c.p.Remove(v)
		}
	}
	c.p.Insert(b, h, now)
	return false
}

// lru2Cache is plain LRU-2 (heat.LRU2), inserting every miss.
type lru2Cache struct {
	l        *heat.LRU2[uint64]
	capacity int
}

func (c *lru2Cache) access(b uint64, nanos int64) bool {
	now := time.Unix(0, nanos)
	if c.l.Contains(b) {
		c.l.Touch(b, now)
		return true
	}
	if c.l.Len() >= c.capacity {
		v, _ := c.l.Victim()
		c.l.Remove(v)
	}
	c.l.Touch(b, now)
	return false
}
