package msg

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/ctxmem/ctxmemd/internal/fuzzkit"
)

// fill sets every field of the struct v points to (recursively: nested
// structs, pointers, slices of two elements, maps of two entries, arrays)
// to a non-zero value derived from *n, so a round trip that loses or mixes
// up any field (a missing or duplicated msgpack tag, a field whose type
// does not survive msgpack) shows up as a difference.
func fill(v reflect.Value, n *int) {
	*n++
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), n)
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			fill(v.Field(i), n)
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := 0; i < 2; i++ {
			fill(v.Index(i), n)
		}
	case reflect.Array:
		for i := 0; i < v.Len(); i++ {
			fill(v.Index(i), n)
		}
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		for i := 0; i < 2; i++ {
			k := reflect.New(v.Type().Key()).Elem()
			fill(k, n)
			e := reflect.New(v.Type().Elem()).Elem()
			fill(e, n)
			v.SetMapIndex(k, e)
		}
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", *n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(*n%100 + 1))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(*n%100 + 1))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(*n) + 0.5)
	default:
		panic(fmt.Sprintf("fill: unhandled kind %s", v.Kind()))
	}
}

// filled returns a *T with every field set (see fill) and V = Version.
func filled[T any]() *T {
	var m T
	n := 0
	fill(reflect.ValueOf(&m).Elem(), &n)
	reflect.ValueOf(&m).Elem().FieldByName("V").SetInt(Version)
	return &m
}

// roundTrip encodes m, decodes it into a fresh value and requires equality.
func roundTrip[T any, PT interface {
	*T
	versioned
}](t *testing.T, m PT) {
	t.Helper()
	data, err := Encode(m)
	if err != nil {
		t.Fatalf("%T: encode: %v", m, err)
	}
	var got T
	if err := Decode(data, PT(&got)); err != nil {
		t.Fatalf("%T: decode: %v", m, err)
	}
	if !reflect.DeepEqual(*m, got) {
		t.Fatalf("%T: round trip differs:\n sent %+v\n got  %+v", m, *m, got)
	}
	// Wire names are unique per struct (a duplicated tag would make
	// msgpack keep only one field).
	checkTags(t, reflect.TypeOf(got))
}

// checkTags requires every exported field of t (and of nested structs) to
// have a msgpack tag, unique within its struct.
func checkTags(t *testing.T, typ reflect.Type) {
	t.Helper()
	for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice || typ.Kind() == reflect.Array || typ.Kind() == reflect.Map {
		typ = typ.Elem()
	}
	if typ.Kind() != reflect.Struct {
		return
	}
	seen := map[string]string{}
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("msgpack"), ",")
		if name == "" || name == "-" {
			t.Errorf("%s.%s has no msgpack name", typ.Name(), f.Name)
			continue
		}
		if prev, dup := seen[name]; dup {
			t.Errorf("%s: fields %s and %s share the wire name %q", typ.Name(), prev, f.Name, name)
		}
		seen[name] = f.Name
		checkTags(t, f.Type)
	}
}

func TestRoundTripEveryType(t *testing.T) {
	roundTrip(t, filled[Report]())
	roundTrip(t, filled[Events]())
	roundTrip(t, filled[Command]())
	roundTrip(t, filled[Ack]())
	roundTrip(t, filled[HostState]())
	roundTrip(t, filled[Leader]())
	roundTrip(t, filled[PrestageRequest]())
	roundTrip(t, filled[PrestageReply]())
}

// TestOmitEmptyRoundTrip: zero optional fields are left off the wire and
// come back as zero values; required ones are always sent.
func TestOmitEmptyRoundTrip(t *testing.T) {
	c := &Command{V: Version, ID: "sink-a-0011223344556677", Host: "a", Op: OpSink, Issued: 42}
	data, err := Encode(c)
	if err != nil {
		t.Fatal(err)
	}
	var got Command
	if err := Decode(data, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*c, got) {
		t.Fatalf("got %+v, want %+v", got, *c)
	}
	// A short key is a msgpack fixstr: 0xa0|len, then the bytes.
	for _, name := range []string{"ns", "p", "o", "b", "dl", "k", "by", "why"} {
		key := append([]byte{0xa0 | byte(len(name))}, name...)
		if bytes.Contains(data, key) {
			t.Errorf("empty field %q was encoded: % x", name, data)
		}
	}
	for _, name := range []string{"v", "id", "h", "op", "t"} {
		if !bytes.Contains(data, append([]byte{0xa0 | byte(len(name))}, name...)) {
			t.Errorf("field %q missing from % x", name, data)
		}
	}
}

func TestDecodeRejectsWrongVersionAndGarbage(t *testing.T) {
	good, err := Encode(filled[Report]())
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []int{0, Version + 1, -1, 99} {
		r := filled[Report]()
		r.V = v
		data, err := Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		var got Report
		if err := Decode(data, &got); !errors.Is(err, ErrMalformed) {
			t.Errorf("version %d: err %v, want ErrMalformed", v, err)
		}
	}
	// A map without "v" at all (an older or foreign sender).
	noV, _ := msgpack.Marshal(map[string]any{"h": "host", "q": 3})
	cases := map[string][]byte{
		"empty":       nil,
		"text":        []byte("not msgpack \xff\x00"),
		"json":        []byte(`{"v":1,"h":"a"}`),
		"nil":         {0xc0},
		"array":       {0x92, 0x01, 0x02},
		"truncated":   good[:len(good)/2],
		"no version":  noV,
		"wrong type":  mustMarshal(t, map[string]any{"v": 1, "hot": "not a list"}),
		"int for str": mustMarshal(t, map[string]any{"v": 1, "h": 12}),
	}
	for name, data := range cases {
		var got Report
		if err := Decode(data, &got); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err %v, want ErrMalformed", name, err)
		}
	}
	// Random bytes and random corruptions of a good message never panic
	// and, when they fail, fail with ErrMalformed.
	rng := rand.New(rand.NewPCG(5, 7))
	for i := 0; i < 2000; i++ {
		var data []byte
		if i%2 == 0 {
			data = make([]byte, rng.IntN(64))
			for j := range data {
				data[j] = byte(rng.Uint32())
			}
		} else {
			data = bytes.Clone(good)
			for k := 0; k < 3; k++ {
				data[rng.IntN(len(data))] = byte(rng.Uint32())
			}
		}
		var got Report
		if err := Decode(data, &got); err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("input % x: error %v does not wrap ErrMalformed", data, err)
		}
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fuzzTypes are the message types FuzzDecode decodes into, by its kind
// argument.
var fuzzTypes = []func() versioned{
	func() versioned { return new(Report) }, func() versioned { return new(Events) },
	func() versioned { return new(Command) }, func() versioned { return new(Ack) },
	func() versioned { return new(HostState) }, func() versioned { return new(Leader) },
	func() versioned { return new(PrestageRequest) }, func() versioned { return new(PrestageReply) },
}

// FuzzDecode: Decode of any input into any message type never panics,
// allocates in proportion to the input (declared lengths are not taken on
// trust) and returns nil or an ErrMalformed error; what decodes has the
// current version and re-encodes to bytes that decode to the same message.
func FuzzDecode(f *testing.F) {
	var cases []fuzzkit.Case
	for i, m := range []any{filled[Report](), filled[Events](), filled[Command](), filled[Ack](),
		filled[HostState](), filled[Leader](), filled[PrestageRequest](), filled[PrestageReply]()} {
		b, err := Encode(m)
		if err != nil {
			f.Fatal(err)
		}
		cases = append(cases, fuzzkit.C(fmt.Sprintf("%T", m)[5:], b, byte(i)))
	}
	v2, _ := Encode(&Ack{V: 2})
	cases = append(cases,
		fuzzkit.C("garbage", []byte("garbage"), byte(2)),
		fuzzkit.C("version2", v2, byte(3)),
		fuzzkit.C("hugearray", []byte{0x81, 0xa1, 'o', 0xdd, 0x00, 0xff, 0xff, 0xff}, byte(0)),
		fuzzkit.C("deep", bytes.Repeat([]byte{0x91}, 100), byte(1)),
	)
	fuzzkit.Seed(f, cases...)
	f.Fuzz(func(t *testing.T, data []byte, kind byte) {
		newMsg := fuzzTypes[int(kind)%len(fuzzTypes)]
		m := newMsg()
		var err error
		fuzzkit.AllocAtMost(t, 64<<10+64*uint64(len(data)), "Decode", func() { err = Decode(data, m) })
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if m.version() != Version {
			t.Fatalf("accepted version %d", m.version())
		}
		again, err := Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		m2 := newMsg()
		if err := Decode(again, m2); err != nil {
			t.Fatalf("re-decode of %T: %v", m, err)
		}
		if !sameValue(reflect.ValueOf(m), reflect.ValueOf(m2)) {
			t.Fatalf("%T does not survive encode/decode:\n%+v\n%+v", m, m, m2)
		}
	})
}

// sameValue is reflect.DeepEqual for decoded messages, except that a NaN
// equals itself.
func sameValue(a, b reflect.Value) bool {
	if a.Kind() != b.Kind() {
		return false
	}
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		return sameValue(a.Elem(), b.Elem())
	case reflect.Struct:
		for i := 0; i < a.NumField(); i++ {
			if !sameValue(a.Field(i), b.Field(i)) {
				return false
			}
		}
		return true
	case reflect.Slice:
		if a.IsNil() != b.IsNil() || a.Len() != b.Len() {
			return false
		}
		for i := 0; i < a.Len(); i++ {
			if !sameValue(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	case reflect.Map:
		if a.IsNil() != b.IsNil() || a.Len() != b.Len() {
			return false
		}
		for _, k := range a.MapKeys() {
			if v := b.MapIndex(k); !v.IsValid() || !sameValue(a.MapIndex(k), v) {
				return false
			}
		}
		return true
	case reflect.Float32, reflect.Float64:
		x, y := a.Float(), b.Float()
		return x == y || x != x && y != y
	}
	if !a.CanInterface() {
		return true // unexported fields: none carry data
	}
	return a.Interface() == b.Interface()
}

// kvKeyRE is JetStream's key-value key syntax (nats.go jetstream's
// validKeyRe): applied-command keys must pass it.
var kvKeyRE = regexp.MustCompile(`^[-/_=\.a-zA-Z0-9]+$`)

var tokenSafe = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

func TestCommandIDDeterministicAndTokenSafe(t *testing.T) {
	id := CommandID(OpSink, "host-a", int64(1700000000123456789), uint64(42), int64(0))
	if again := CommandID(OpSink, "host-a", int64(1700000000123456789), uint64(42), int64(0)); again != id {
		t.Fatalf("not deterministic: %s vs %s", id, again)
	}
	if !regexp.MustCompile(`^sink-host-a-[0-9a-f]{16}$`).MatchString(id) {
		t.Fatalf("id %q: want sink-host-a-<16 hex digits>", id)
	}
	// Any change of op, host or a part changes the id; so does moving a
	// boundary between parts ("ab","c" vs "a","bc").
	others := []string{
		CommandID(OpDemote, "host-a", int64(1700000000123456789), uint64(42), int64(0)),
		CommandID(OpSink, "host-b", int64(1700000000123456789), uint64(42), int64(0)),
		CommandID(OpSink, "host-a", int64(1700000000123456788), uint64(42), int64(0)),
		CommandID(OpSink, "host-a", int64(1700000000123456789), uint64(43), int64(0)),
		CommandID(OpSink, "host-a", int64(1700000000123456789), uint64(42), int64(1)),
		CommandID(OpSink, "host-a", int64(1700000000123456789), uint64(42)),
	}
	seen := map[string]bool{id: true}
	for _, o := range others {
		if seen[o] {
			t.Fatalf("collision: %s", o)
		}
		seen[o] = true
	}
	if CommandID("x", "h", "ab", "c") == CommandID("x", "h", "a", "bc") {
		t.Fatal("part boundaries do not matter")
	}
	// Ids are token-safe for every valid host name and every op, and make
	// valid key-value keys; 10,000 distinct decisions give 10,000 ids.
	ops := []string{OpSink, OpDemote, OpPromote, OpPrestage, OpPin, OpUnpin, OpDropNamespace, OpSetKnobs, OpResync}
	hosts := []string{"a", "host_1", "H-2", strings.Repeat("z", 64)}
	ids := map[string]bool{}
	for i := 0; i < 10000; i++ {
		op, host := ops[i%len(ops)], hosts[i%len(hosts)]
		if err := ValidToken(host); err != nil {
			t.Fatal(err)
		}
		id := CommandID(op, host, "ns with spaces/and.dots", i, "päth\x00")
		if !tokenSafe.MatchString(id) {
			t.Fatalf("id %q is not token-safe", id)
		}
		if k := AppliedKey(host, id); !kvKeyRE.MatchString(k) {
			t.Fatalf("applied key %q is not a valid KV key", k)
		}
		ids[id] = true
	}
	if len(ids) != 10000 {
		t.Fatalf("%d distinct ids for 10000 decisions", len(ids))
	}
}

func TestValidToken(t *testing.T) {
	for _, ok := range []string{"a", "host-1", "H_2", strings.Repeat("x", 64)} {
		if err := ValidToken(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a.b", "a b", "a*", "a>", "ä", strings.Repeat("x", 65), "a/b"} {
		if ValidToken(bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestSubjects(t *testing.T) {
	n := For("prod-1")
	if got := n.Report("h1"); got != "ctxmem.prod-1.v1.report.h1" {
		t.Fatalf("report subject %q", got)
	}
	for _, c := range []struct{ subj, kind string }{
		{n.Report("h1"), "report"}, {n.Event("h1"), "event"}, {n.Ack("h1"), "ack"},
		{n.Command("h1"), ""}, {n.Prestage(), ""}, {For("other").Report("h1"), ""}, {"ctxmem.prod-1.v2.report.h1", ""},
	} {
		if got := n.KindOf(c.subj); got != c.kind {
			t.Errorf("KindOf(%q) = %q, want %q", c.subj, got, c.kind)
		}
	}
	if HostOf(n.Ack("host-9")) != "host-9" {
		t.Fatal("HostOf")
	}
	// The telemetry stream captures reports, events and acks, not commands;
	// the commands stream only commands.
	match := func(pats []string, subj string) bool {
		for _, p := range pats {
			pt, st := strings.Split(p, "."), strings.Split(subj, ".")
			if len(pt) != len(st) {
				continue
			}
			ok := true
			for i := range pt {
				if pt[i] != "*" && pt[i] != st[i] {
					ok = false
				}
			}
			if ok {
				return true
			}
		}
		return false
	}
	for _, s := range []string{n.Report("x"), n.Event("x"), n.Ack("x")} {
		if !match(n.TelemetrySubjects(), s) || match(n.CommandSubjects(), s) {
			t.Errorf("%s in the wrong stream", s)
		}
	}
	if match(n.TelemetrySubjects(), n.Command("x")) || !match(n.CommandSubjects(), n.Command("x")) {
		t.Error("commands in the wrong stream")
	}
	if n.Telemetry() != "CTXMEM_PROD-1_TELEMETRY" || n.HostsBucket() != "ctxmem_prod-1_hosts" {
		t.Errorf("names %s %s", n.Telemetry(), n.HostsBucket())
	}
}

func TestWhere(t *testing.T) {
	for _, c := range []struct {
		w     Where
		s     string
		above bool
	}{
		{0, "none", false}, {InG4, "G4", false}, {InG2 | InG4, "G2+G4", true},
		{InG35, "G3.5", true}, {InG2 | InG3 | InG35 | InG4, "G2+G3+G3.5+G4", true},
	} {
		if c.w.String() != c.s || c.w.AboveG4() != c.above {
			t.Errorf("%08b: %q %v, want %q %v", c.w, c.w.String(), c.w.AboveG4(), c.s, c.above)
		}
	}
}

// sampleReport is a heat report as a busy host sends it: 64 hot and 256
// cold objects with realistic namespace and path names, 4 tiers, hits by
// tier and block moves.
func sampleReport() *Report {
	r := &Report{V: Version, Host: "gpu-node-017", Boot: 1700000000123456789, Seq: 86400,
		Time: 1700000086400123456, Interval: 1000, Objects: 182790,
		Tiers: []Tier{
			{Name: "G2", Used: 60 << 30, Capacity: 64 << 30, Blocks: 245760, High: 0.9, Low: 0.75},
			{Name: "G3", Used: 1 << 40, Capacity: 2 << 40, Blocks: 4194304, High: 0.9, Low: 0.75},
			{Name: "G3.5", Used: 3 << 40, Capacity: 8 << 40, Blocks: 12582912},
			{Name: "G4", Used: 20 << 40, Blocks: 83886080},
		},
		Histogram: [10]int64{150000, 12000, 8000, 4000, 3000, 2000, 1500, 1000, 700, 590},
		Hits: Hits{Requests: 123456789, RequestHits: 110000000, Blocks: 987654321, Misses: 12345678,
			BlockHits: map[string]int64{"G2": 800000000, "G3": 150000000, "G4": 25000000}},
		Moves:      map[string]int64{"demote.G3": 1200, "demote.G4": 300, "evict.G2": 1500, "promote": 800},
		Knobs:      Knobs{ColdThreshold: 30, WarmThreshold: 60, DRAMHigh: 0.9, DRAMLow: 0.75},
		Namespaces: []string{"llama3-70b-bf16", "qwen2-72b-fp8"},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	obj := func(i int, hot bool) Object {
		o := Object{Namespace: "llama3-70b-bf16",
			Path: fmt.Sprintf("sess-%06d/layer-%02d/blk-%08x", rng.IntN(1000000), rng.IntN(80), rng.Uint32()),
			ID:   uint64(1000000 + rng.IntN(1000000)), Size: 256 << 10}
		if hot {
			o.Score, o.IdleMs, o.Where = 100-float32(i)*0.7, int64(rng.IntN(900)), InG2|InG3
		} else {
			o.Score, o.IdleMs, o.Where = float32(rng.Float64()*10), int64(300000+rng.IntN(3600000)), InG3
		}
		return o
	}
	for i := 0; i < 64; i++ {
		r.Hot = append(r.Hot, obj(i, true))
	}
	for i := 0; i < 256; i++ {
		r.Cold = append(r.Cold, obj(i, false))
	}
	return r
}

// TestReportSize compares the MessagePack size of a full report (64 hot +
// 256 cold objects) with encoding/json of the same value: a few tens of
// KiB, and under 3/4 of the JSON form (measured: 33,304 vs 52,149 bytes,
// 0.64×, with ~33-byte paths; paths and namespaces are the same bytes in
// both encodings, so longer paths bring the ratio closer to 1).
func TestReportSize(t *testing.T) {
	r := sampleReport()
	mp, err := Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("report with %d hot + %d cold objects: msgpack %d bytes, encoding/json %d bytes (%.2f×)",
		len(r.Hot), len(r.Cold), len(mp), len(js), float64(len(mp))/float64(len(js)))
	if len(mp) >= len(js)*3/4 {
		t.Errorf("msgpack %d bytes is not well under json %d bytes", len(mp), len(js))
	}
	if len(mp) > 64<<10 {
		t.Errorf("report is %d bytes, more than 64 KiB", len(mp))
	}
	var back Report
	if err := Decode(mp, &back); err != nil || !reflect.DeepEqual(*r, back) {
		t.Fatalf("sample report does not round-trip: %v", err)
	}
}

// BenchmarkReportEncode: encode and decode cost of a full report, with
// its size in bytes (msgpack and encoding/json) as metrics.
func BenchmarkReportEncode(b *testing.B) {
	r := sampleReport()
	js, _ := json.Marshal(r)
	b.Run("msgpack", func(b *testing.B) {
		var n int
		b.ReportAllocs()
		for range b.N {
			data, err := Encode(r)
			if err != nil {
				b.Fatal(err)
			}
			n = len(data)
		}
		b.ReportMetric(float64(n), "bytes")
	})
	b.Run("msgpack-decode", func(b *testing.B) {
		data, _ := Encode(r)
		b.ReportAllocs()
		for range b.N {
			var got Report
			if err := Decode(data, &got); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := json.Marshal(r); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(js)), "bytes")
	})
}
