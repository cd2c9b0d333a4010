package config

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// KVLayouts are the built-in kv_layout names (package kvevents parses
// them; these are the --layout names of ctxmemd replay).
var KVLayouts = []string{"flat", "sglang", "vllm", "lmcache", "nixl"}

// NamespaceKVLayout is the kv_layout of namespace ns: its own, else the
// global one.
func (c Config) NamespaceKVLayout(ns Namespace) string {
	if ns.KVLayout != "" {
		return ns.KVLayout
	}
	return c.KVLayout
}

// checkKVLayout accepts "", a built-in layout, or a regular expression
// with a group named hash.
func checkKVLayout(s string) error {
	if s == "" || slices.Contains(KVLayouts, s) {
		return nil
	}
	re, err := regexp.Compile(s)
	if err != nil || re.SubexpIndex("hash") < 0 {
		return fmt.Errorf("%q is not a layout (%s) nor a regular expression with a (?P<hash>...) group", s, strings.Join(KVLayouts, ", "))
	}
	return nil
}

// checkZMQEndpoint accepts tcp://host:port (host may be * or empty) and
// ipc:///path.
func checkZMQEndpoint(s string) error {
	if p, ok := strings.CutPrefix(s, "ipc://"); ok {
		if p == "" {
			return fmt.Errorf("%q: ipc:// needs a path", s)
		}
		return nil
	}
	a, ok := strings.CutPrefix(s, "tcp://")
	if !ok {
		return fmt.Errorf("%q: want tcp://host:port or ipc:///path", s)
	}
	return checkAddr(a)
}
