package config

import (
	"strings"
	"testing"

	"github.com/ctxmem/ctxmemd/internal/fuzzkit"
)

// defaults returns a Config with every literal default set, as Load starts.
func defaults(t testing.TB) Config {
	c := Config{given: map[string]givenAt{}}
	for _, o := range table() {
		if o.derive == nil {
			if err := o.set(&c, o.Default); err != nil {
				t.Fatalf("default of %s: %v", o.Key, err)
			}
		}
	}
	return c
}

// FuzzYAML checks the config file parser (applyYAML, what Load runs on the
// file) on arbitrary documents:
//   - it never panics, allocates in proportion to the document (no alias
//     expansion bomb), and every error names the file ("config: <file>");
//   - Validate never panics on what it accepted;
//   - every option value it accepted renders (get, as Summary shows it)
//     to text that parses back to the same value: what the daemon reports
//     can be pasted into a config file.
func FuzzYAML(f *testing.F) {
	fuzzkit.Seed(f,
		fuzzkit.C("options", []byte("data_dir: /var/lib/ctxmemd\ng2_bytes: 8GiB\ndirty_ratio: 0.25\nlog_level: debug\n")),
		fuzzkit.C("namespaces", []byte("namespaces:\n  - name: llama\n    uid: 1000\n    gid: 1000\n    mode: \"0750\"\n    quota: 100G\n    block_size: 1MiB\n")),
		fuzzkit.C("exports", []byte("exports:\n  - name: disk0\n    size: 64GiB\n    block_size: 64KiB\n    read_only: false\n")),
		fuzzkit.C("pool", []byte("pool_targets:\n  - transport: tcp\n    address: 10.0.0.1\n    service_id: \"4420\"\n    nqn: nqn.2014-08.org.example:pool\n")),
		fuzzkit.C("empty", []byte("")),
		fuzzkit.C("null", []byte("~\n")),
		fuzzkit.C("typo", []byte("data_dri: /x\n")),
		fuzzkit.C("twice", []byte("mount: /a\nmount: /b\n")),
		fuzzkit.C("alias", []byte("a: &x [1, 2]\nmount: *x\n")),
		fuzzkit.C("aliasbomb", []byte("a: &a [x, x, x, x]\nb: &b [*a, *a, *a, *a]\nc: &c [*b, *b, *b, *b]\nd: &d [*c, *c, *c, *c]\nmount: *d\n")),
		fuzzkit.C("list", []byte("- a\n- b\n")),
		fuzzkit.C("badtab", []byte("mount:\t/a\n\t- x: [\n")),
	)
	f.Fuzz(func(t *testing.T, data []byte) {
		c := defaults(t)
		var err error
		fuzzkit.AllocAtMost(t, 4<<20+2048*uint64(len(data)), "applyYAML", func() { err = applyYAML(&c, "fuzz.yaml", data) })
		if err != nil {
			if !strings.HasPrefix(err.Error(), "config: fuzz.yaml") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		_ = c.Validate()
		for _, o := range table() {
			v := o.get(&c)
			c2 := defaults(t)
			if err := o.set(&c2, v); err != nil {
				t.Fatalf("%s: accepted value renders as %q, which does not parse: %v", o.Key, v, err)
			}
			if got := o.get(&c2); got != v {
				t.Fatalf("%s: %q parses back as %q", o.Key, v, got)
			}
		}
	})
}
