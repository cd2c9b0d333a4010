package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// namespaceKeys are the keys a namespaces: entry may have.
func namespaceKeys() []string {
	return []string{"name", "uid", "gid", "mode", "quota", "block_size", "model_id", "model_revision",
		"tokenizer_revision", "kv_dtype", "layout_version", "tenant", "kv_layout", "tokens_per_block", "prefill_us_per_token", "restore_budget"}
}

// applyYAML sets c from a YAML document: a mapping of option keys to
// scalars plus the YAML-only namespaces list. Unknown keys are errors
// naming the key and its line.
func applyYAML(c *Config, file string, data []byte) error {
	// One document only: yaml.Unmarshal stops after the first and would
	// ignore keys written after it (e.g. below a "{}" line) in silence.
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		return nil // empty, or comments only
	} else if err != nil {
		return fmt.Errorf("config: %s: %w", file, err)
	}
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		if err == nil {
			err = fmt.Errorf("line %d: a second YAML document; put every key in one mapping", more.Line)
		}
		return fmt.Errorf("config: %s: content after the first document: %w", file, err)
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil // empty file
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil
	}
	if root.Kind != yaml.MappingNode {
		return fmt.Errorf("config: %s line %d: the top level must be a mapping of key: value", file, root.Line)
	}
	opts := table()
	var keys []string
	for _, o := range opts {
		keys = append(keys, o.Key)
	}
	keys = append(keys, "namespaces", "exports", "pool_targets")
	seen := map[string]bool{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		key := k.Value
		if seen[key] {
			return fmt.Errorf("config: %s line %d: key %q given twice", file, k.Line, key)
		}
		seen[key] = true
		if key == "pool_targets" {
			pt, err := parsePoolTargets(file, v)
			if err != nil {
				return err
			}
			c.PoolTargets = pt
			continue
		}
		if key == "exports" {
			ex, err := parseExports(file, v)
			if err != nil {
				return err
			}
			c.Exports = ex
			continue
		}
		if key == "namespaces" {
			ns, err := parseNamespaces(file, v)
			if err != nil {
				return err
			}
			c.Namespaces = ns
			continue
		}
		o, ok := lookupKey(opts, key)
		if !ok {
			return unknownKey(file, k.Line, key, "", keys)
		}
		val, err := scalar(v)
		if err != nil {
			return fmt.Errorf("config: %s line %d: %s: %v", file, v.Line, key, err)
		}
		if err := o.set(c, val); err != nil {
			return fmt.Errorf("config: %s line %d: %s: %w", file, v.Line, key, err)
		}
		c.setGiven(o.Key, SourceFile, fmt.Sprintf("%s line %d", file, v.Line))
	}
	return nil
}

func lookupKey(opts []Option, key string) (Option, bool) {
	for _, o := range opts {
		if o.Key == key {
			return o, true
		}
	}
	return Option{}, false
}

// scalar returns a scalar node's text; null is "".
func scalar(n *yaml.Node) (string, error) {
	switch {
	case n.Kind == yaml.AliasNode && n.Alias != nil:
		return scalar(n.Alias)
	case n.Kind != yaml.ScalarNode:
		return "", fmt.Errorf("expected a single value, got a list or mapping")
	case n.Tag == "!!null":
		return "", nil
	}
	return n.Value, nil
}

func unknownKey(file string, line int, key, where string, known []string) error {
	msg := fmt.Sprintf("config: %s line %d: unknown key %q%s", file, line, key, where)
	if s := closest(key, known); s != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", s)
	}
	return fmt.Errorf("%s", msg)
}

// parseNamespaces decodes the namespaces: list.
func parseNamespaces(file string, n *yaml.Node) ([]Namespace, error) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("config: %s line %d: namespaces must be a list", file, n.Line)
	}
	var out []Namespace
	for _, e := range n.Content {
		if e.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("config: %s line %d: each namespace must be a mapping (name: ..., uid: ...)", file, e.Line)
		}
		ns := Namespace{UID: os.Getuid(), GID: os.Getgid(), Mode: 0o755}
		for i := 0; i+1 < len(e.Content); i += 2 {
			k, v := e.Content[i], e.Content[i+1]
			val, err := scalar(v)
			if err != nil {
				return nil, fmt.Errorf("config: %s line %d: namespaces.%s: %v", file, v.Line, k.Value, err)
			}
			if err := setNamespaceField(&ns, k.Value, val); err != nil {
				if err == errUnknownKey {
					return nil, unknownKey(file, k.Line, k.Value, " in a namespace", namespaceKeys())
				}
				return nil, fmt.Errorf("config: %s line %d: namespaces.%s: %w", file, v.Line, k.Value, err)
			}
		}
		out = append(out, ns)
	}
	return out, nil
}

// errUnknownKey is an internal marker for setNamespaceField.
var errUnknownKey = errors.New("unknown key")

func setNamespaceField(ns *Namespace, key, val string) error {
	switch key {
	case "name":
		ns.Name = val
	case "uid", "gid":
		id, err := strconv.Atoi(strings.TrimSpace(val))
		if err != nil || id < 0 {
			return fmt.Errorf("%q is not a non-negative integer id", val)
		}
		if key == "uid" {
			ns.UID = id
		} else {
			ns.GID = id
		}
	case "mode":
		m, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(val), "0o"), 8, 32)
		if err != nil || m > 0o7777 {
			return fmt.Errorf("%q is not an octal mode such as \"0755\" (quote it in YAML)", val)
		}
		ns.Mode = os.FileMode(m & 0o777)
		if m&0o1000 != 0 {
			ns.Mode |= os.ModeSticky
		}
		if m&0o2000 != 0 {
			ns.Mode |= os.ModeSetgid
		}
		if m&0o4000 != 0 {
			ns.Mode |= os.ModeSetuid
		}
	case "quota":
		q, err := ParseSize(val)
		if err != nil {
			return err
		}
		ns.Quota = q
	case "block_size":
		b, err := ParseSize(val)
		if err != nil {
			return err
		}
		if b > 1<<30 {
			return fmt.Errorf("block size %q is too large", val)
		}
		ns.BlockSize = int(b)
	case "model_id":
		ns.ModelID = val
	case "model_revision":
		ns.ModelRevision = val
	case "tokenizer_revision":
		ns.TokenizerRevision = val
	case "kv_dtype":
		ns.KVDtype = val
	case "layout_version":
		ns.LayoutVersion = val
	case "tenant":
		ns.Tenant = val
	case "kv_layout":
		ns.KVLayout = val
	case "tokens_per_block":
		n, err := strconv.Atoi(strings.TrimSpace(val))
		if err != nil || n < 0 {
			return fmt.Errorf("%q is not a non-negative token count", val)
		}
		ns.TokensPerBlock = n
	case "restore_budget":
		d, err := time.ParseDuration(strings.TrimSpace(val))
		if err != nil || d < 0 {
			return fmt.Errorf("%q is not a non-negative Go duration such as 20ms", val)
		}
		ns.RestoreBudget = d
	case "prefill_us_per_token":
		f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
			return fmt.Errorf("%q is not a non-negative cost in µs per token", val)
		}
		ns.PrefillUsPerToken = f
	default:
		return errUnknownKey
	}
	return nil
}

// closest returns the known key nearest to key by edit distance when it is
// within 2 edits (or key is a prefix of it), else "".
func closest(key string, known []string) string {
	best, bestD := "", 3
	for _, k := range known {
		d := editDistance(key, k)
		if d < bestD {
			best, bestD = k, d
		}
	}
	if best == "" {
		for _, k := range known {
			if strings.HasPrefix(k, key) && len(key) >= 3 {
				return k
			}
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// exportKeys are the keys an exports: entry may have.
func exportKeys() []string { return []string{"name", "size", "block_size", "read_only", "namespace"} }

// parseExports decodes the exports: list (NBD exports).
func parseExports(file string, n *yaml.Node) ([]Export, error) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("config: %s line %d: exports must be a list", file, n.Line)
	}
	var out []Export
	seen := map[string]bool{}
	for _, e := range n.Content {
		if e.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("config: %s line %d: each export must be a mapping (name: ..., size: ...)", file, e.Line)
		}
		var ex Export
		for i := 0; i+1 < len(e.Content); i += 2 {
			k, v := e.Content[i], e.Content[i+1]
			val, err := scalar(v)
			if err != nil {
				return nil, fmt.Errorf("config: %s line %d: exports.%s: %v", file, v.Line, k.Value, err)
			}
			switch k.Value {
			case "name":
				ex.Name = val
			case "size", "block_size":
				b, err := ParseSize(val)
				if err != nil {
					return nil, fmt.Errorf("config: %s line %d: exports.%s: %w", file, v.Line, k.Value, err)
				}
				if k.Value == "size" {
					ex.Size = b
				} else {
					ex.BlockSize = int(b)
				}
			case "namespace":
				ex.Namespace = strings.TrimSpace(val)
			case "read_only":
				b, err := strconv.ParseBool(strings.TrimSpace(val))
				if err != nil {
					return nil, fmt.Errorf("config: %s line %d: exports.read_only: %q is not true or false", file, v.Line, val)
				}
				ex.ReadOnly = b
			default:
				return nil, unknownKey(file, k.Line, k.Value, " in an export", exportKeys())
			}
		}
		if ex.Name == "" || ex.Size <= 0 {
			return nil, fmt.Errorf("config: %s line %d: an export needs a name and a size > 0", file, e.Line)
		}
		if seen[ex.Name] {
			return nil, fmt.Errorf("config: %s line %d: export %q declared twice", file, e.Line, ex.Name)
		}
		seen[ex.Name] = true
		out = append(out, ex)
	}
	return out, nil
}

// poolTargetKeys are the keys a pool_targets: entry may have.
func poolTargetKeys() []string {
	return []string{"transport", "address", "service_id", "nqn", "host_nqn"}
}

// parsePoolTargets decodes the pool_targets: list (NVMe-oF targets).
func parsePoolTargets(file string, n *yaml.Node) ([]PoolTarget, error) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("config: %s line %d: pool_targets must be a list", file, n.Line)
	}
	var out []PoolTarget
	for _, e := range n.Content {
		if e.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("config: %s line %d: each pool target must be a mapping (transport, address, nqn, ...)", file, e.Line)
		}
		t := PoolTarget{Transport: "tcp", ServiceID: "4420"}
		for i := 0; i+1 < len(e.Content); i += 2 {
			k, v := e.Content[i], e.Content[i+1]
			val, err := scalar(v)
			if err != nil {
				return nil, fmt.Errorf("config: %s line %d: pool_targets.%s: %v", file, v.Line, k.Value, err)
			}
			switch k.Value {
			case "transport":
				t.Transport = val
			case "address":
				t.Address = val
			case "service_id":
				t.ServiceID = val
			case "nqn":
				t.NQN = val
			case "host_nqn":
				t.HostNQN = val
			default:
				return nil, unknownKey(file, k.Line, k.Value, " in a pool target", poolTargetKeys())
			}
		}
		if t.Address == "" || t.NQN == "" {
			return nil, fmt.Errorf("config: %s line %d: a pool target needs an address and an nqn", file, e.Line)
		}
		out = append(out, t)
	}
	return out, nil
}
