// Package fuzzkit holds what the fuzz targets of the parsers share: seeding
// a target from real encoders (in code and as corpus files under the
// package's testdata/fuzz), and a bound on what one decode may allocate.
//
// Seeds: every target calls Seed with inputs built by the package's own
// encoders (valid records) and a few malformed ones. They are registered
// with f.Add, so they run under plain go test; with CTXMEM_WRITE_FUZZ_SEEDS=1
// they are also written to testdata/fuzz/<target>/seed-<name> in the
// "go test fuzz v1" corpus format, which is how the committed corpus files
// were made (regenerate after a format change).
package fuzzkit

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// A Case is one seed input: a name for its corpus file and the target's
// arguments, in order.
type Case struct {
	Name string
	Args []any
}

// C builds a Case.
func C(name string, args ...any) Case { return Case{Name: name, Args: args} }

// Seed registers the cases with f.Add and, when CTXMEM_WRITE_FUZZ_SEEDS=1,
// writes them as corpus files under testdata/fuzz/<f.Name()>.
func Seed(f *testing.F, cases ...Case) {
	f.Helper()
	write := os.Getenv("CTXMEM_WRITE_FUZZ_SEEDS") == "1"
	dir := filepath.Join("testdata", "fuzz", f.Name())
	if write {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			f.Fatal(err)
		}
	}
	for _, c := range cases {
		f.Add(c.Args...)
		if !write {
			continue
		}
		b, err := Marshal(c.Args...)
		if err != nil {
			f.Fatalf("seed %s: %v", c.Name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, "seed-"+c.Name), b, 0o644); err != nil {
			f.Fatal(err)
		}
	}
}

// Marshal encodes values in the "go test fuzz v1" corpus file format (the
// types testing.F accepts).
func Marshal(vals ...any) ([]byte, error) {
	var sb strings.Builder
	sb.WriteString("go test fuzz v1\n")
	for _, v := range vals {
		switch x := v.(type) {
		case []byte:
			fmt.Fprintf(&sb, "[]byte(%s)\n", strconv.Quote(string(x)))
		case string:
			fmt.Fprintf(&sb, "string(%s)\n", strconv.Quote(x))
		case bool:
			fmt.Fprintf(&sb, "bool(%t)\n", x)
		case int:
			fmt.Fprintf(&sb, "int(%d)\n", x)
		case int8:
			fmt.Fprintf(&sb, "int8(%d)\n", x)
		case int16:
			fmt.Fprintf(&sb, "int16(%d)\n", x)
		case int32:
			fmt.Fprintf(&sb, "int32(%d)\n", x)
		case int64:
			fmt.Fprintf(&sb, "int64(%d)\n", x)
		case uint:
			fmt.Fprintf(&sb, "uint(%d)\n", x)
		case uint8:
			fmt.Fprintf(&sb, "byte(%d)\n", x)
		case uint16:
			fmt.Fprintf(&sb, "uint16(%d)\n", x)
		case uint32:
			fmt.Fprintf(&sb, "uint32(%d)\n", x)
		case uint64:
			fmt.Fprintf(&sb, "uint64(%d)\n", x)
		default:
			return nil, fmt.Errorf("fuzz corpus: unsupported type %T", v)
		}
	}
	return []byte(sb.String()), nil
}

// AllocAtMost runs fn and fails t if it allocated more than limit bytes
// (heap bytes, runtime.MemStats.TotalAlloc). A fuzz worker runs one input
// at a time, so the count is fn's plus a little runtime noise; limits should
// be generous multiples of what the input justifies, the point being to
// catch a declared length taken on trust (megabytes from a few bytes).
func AllocAtMost(t testing.TB, limit uint64, what string, fn func()) {
	t.Helper()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > limit {
		t.Fatalf("%s allocated %d bytes, more than the %d the input justifies", what, got, limit)
	}
}
