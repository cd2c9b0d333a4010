package kvevents

import (
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
)

// HashFunc derives a block hash from the path of a file inside its
// namespace ("a/b/0123abcd.bin", no leading slash). ok is false for names
// that are not blocks of the layout (temporary files, other files).
type HashFunc func(rel string) (hash uint64, ok bool)

// Layouts names the built-in layouts, the --layout names of `ctxmemd
// replay` (package replay describes how each engine names its files).
func Layouts() []string { return []string{"flat", "sglang", "vllm", "lmcache", "nixl"} }

// Built-in layouts: a regular expression matched against the base name,
// whose first group is the hash in hex.
var layouts = map[string]*regexp.Regexp{
	// <16 hex>.bin
	"flat": regexp.MustCompile(`^([0-9a-f]{16})\.bin$`),
	// <sha256 hex>_<model>_<tp rank>_<tp size>.bin (SGLang HiCacheFile)
	"sglang": regexp.MustCompile(`^([0-9a-f]{64})_.+\.bin$`),
	// <model>_<cfg>_r<rank>/<hhh>/<hh>_g<group>/<16 hex>.bin (vLLM FS tier, llm-d)
	"vllm": regexp.MustCompile(`^([0-9a-f]{16})\.bin$`),
	// <model>@<world size>@<worker>@<chunk hash hex>@<dtype>.pt (LMCache local disk)
	"lmcache": regexp.MustCompile(`^[^@/]+@[0-9]+@[0-9]+@([0-9a-f]{1,64})@[^@/]+\.pt$`),
	// <2 hex>/<16 hex>_<k|v> (NIXL POSIX)
	"nixl": regexp.MustCompile(`^([0-9a-f]{16})_[kv]$`),
}

// ParseLayout returns the HashFunc of spec: a built-in layout name (see
// Layouts), or a Go regular expression (RE2 syntax) with a named group
// "hash", matched against the whole path inside the namespace (anchor it
// yourself). The hash text must be hexadecimal; its first 16 digits are
// the hash (a 64-bit value, as Dynamo's decoder takes), fewer digits are
// the value they spell. "" returns nil (no events for the namespace).
func ParseLayout(spec string) (HashFunc, error) {
	if spec == "" {
		return nil, nil
	}
	if re, ok := layouts[spec]; ok {
		return func(rel string) (uint64, bool) {
			m := re.FindStringSubmatch(path.Base(rel))
			if m == nil {
				return 0, false
			}
			return hexHash(m[1])
		}, nil
	}
	if !strings.Contains(spec, "(?P<hash>") && !strings.Contains(spec, "(?<hash>") {
		return nil, fmt.Errorf("kv_layout %q: not a layout (one of %s) and not a regular expression with a (?P<hash>...) group",
			spec, strings.Join(Layouts(), ", "))
	}
	re, err := regexp.Compile(spec)
	if err != nil {
		return nil, fmt.Errorf("kv_layout %q: %w", spec, err)
	}
	g := re.SubexpIndex("hash")
	return func(rel string) (uint64, bool) {
		m := re.FindStringSubmatch(rel)
		if m == nil {
			return 0, false
		}
		return hexHash(m[g])
	}, nil
}

// hexHash parses the first 16 hex digits of s.
func hexHash(s string) (uint64, bool) {
	if len(s) > 16 {
		s = s[:16]
	}
	if s == "" {
		return 0, false
	}
	v, err := strconv.ParseUint(s, 16, 64)
	return v, err == nil
}
