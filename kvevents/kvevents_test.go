package kvevents

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"sort"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/ctxmem/ctxmemd/tiering"
)

func TestEncodePositionalTaggedMaps(t *testing.T) {
	ts := time.Unix(1700000000, 500000000)
	b := Batch{TS: ts, Events: []Event{
		{Kind: AllBlocksCleared},
		{Kind: BlockStored, Hashes: []uint64{math.MaxUint64}, Medium: "G2"},
		{Kind: BlockRemoved, Hashes: []uint64{7}, Medium: "G3"},
	}}
	p, err := Encode(b)
	if err != nil {
		t.Fatal(err)
	}
	// The shape Dynamo deserialises: a 3-array [f64, [events], int].
	var raw []any
	if err := msgpack.Unmarshal(p, &raw); err != nil {
		t.Fatal(err)
	}
	if len(raw) != 3 {
		t.Fatalf("batch has %d elements, want 3", len(raw))
	}
	if f, ok := raw[0].(float64); !ok || f != 1700000000.5 {
		t.Fatalf("ts = %#v", raw[0])
	}
	evs := raw[1].([]any)
	stored := evs[1].(map[string]any)
	want := []string{"block_hashes", "block_size", "lora_id", "lora_name", "medium", "parent_block_hash", "token_ids", "type"}
	var keys []string
	for k := range stored {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if fmt.Sprint(keys) != fmt.Sprint(want) {
		t.Fatalf("BlockStored keys %v, want %v", keys, want)
	}
	if stored["type"] != "BlockStored" || stored["medium"] != "G2" || stored["parent_block_hash"] != nil {
		t.Fatalf("BlockStored = %#v", stored)
	}
	if h := stored["block_hashes"].([]any)[0]; h != uint64(math.MaxUint64) {
		t.Fatalf("hash = %#v", h)
	}
	if evs[0].(map[string]any)["type"] != "AllBlocksCleared" || evs[2].(map[string]any)["medium"] != "G3" {
		t.Fatalf("events = %#v", evs)
	}
	back, err := Decode(p)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(back.Events) != fmt.Sprint(b.Events) {
		t.Fatalf("round trip: %v, want %v", back.Events, b.Events)
	}
}

func TestDecodeTaggedSequence(t *testing.T) {
	// msgspec array_like events: ["BlockStored", hashes, parent, tokens, block_size, lora_id, medium, ...].
	p, err := msgpack.Marshal([]any{1.5, []any{
		[]any{"BlockStored", []any{int64(-1)}, nil, []any{1, 2}, 16, nil, "GPU", nil, "extra"},
		[]any{"BlockRemoved", []any{uint64(3)}, "CPU"},
	}, 0})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Decode(p)
	if err != nil {
		t.Fatal(err)
	}
	want := []Event{{Kind: BlockStored, Hashes: []uint64{math.MaxUint64}, Medium: "GPU"}, {Kind: BlockRemoved, Hashes: []uint64{3}, Medium: "CPU"}}
	if fmt.Sprint(b.Events) != fmt.Sprint(want) {
		t.Fatalf("%v, want %v", b.Events, want)
	}
}

func TestLayouts(t *testing.T) {
	sha := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, c := range []struct {
		layout, name string
		hash         uint64
		ok           bool
	}{
		{"flat", "00000000000000ff.bin", 0xff, true},
		{"flat", "00000000000000ff.bin.tmp.1.2.3", 0, false},
		{"vllm", "Llama-3.1-8B_abc_r0/000/00_g0/0123456789abcdef.bin", 0x0123456789abcdef, true},
		{"sglang", sha + "_Llama-3.1-8B_0_1.bin", 0x0123456789abcdef, true},
		{"sglang", sha + "_Llama-3.1-8B_0_1.bin.tmp.9.9.9", 0, false},
		{"lmcache", "Llama-3.1-8B@1@0@00000000000000a1@bfloat16.pt", 0xa1, true},
		{"nixl", "ab/abcdef0123456789_k", 0xabcdef0123456789, true},
		{"nixl", "ab/abcdef0123456789_x", 0, false},
		{`^kv/(?P<hash>[0-9a-f]+)\.blk$`, "kv/10.blk", 0x10, true},
		{`^kv/(?P<hash>[0-9a-f]+)\.blk$`, "kv/10.blk.tmp", 0, false},
	} {
		f, err := ParseLayout(c.layout)
		if err != nil {
			t.Fatal(err)
		}
		h, ok := f(c.name)
		if h != c.hash || ok != c.ok {
			t.Errorf("%s %s: %#x %v, want %#x %v", c.layout, c.name, h, ok, c.hash, c.ok)
		}
	}
	for _, bad := range []string{"vllm2", "(unclosed", "no-hash-group(.*)"} {
		if _, err := ParseLayout(bad); err == nil {
			t.Errorf("ParseLayout(%q): no error", bad)
		}
	}
}

func seqOf(b []byte) int64 { return int64(binary.BigEndian.Uint64(b)) }

func TestPublisherAndReplay(t *testing.T) {
	ctx := context.Background()
	p, err := Listen(ctx, Options{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0", Topic: "kv", Buffer: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	sub := zmq4.NewSub(ctx)
	defer sub.Close()
	if err := sub.Dial("tcp://" + p.Addr().String()); err != nil {
		t.Fatal(err)
	}
	if err := sub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		t.Fatal(err)
	}
	// PUB drops until the subscription has arrived: publish until one
	// message gets through, then six more.
	got := make(chan zmq4.Msg, 100)
	go func() {
		for {
			m, err := sub.Recv()
			if err != nil {
				return
			}
			got <- m
		}
	}()
	var first zmq4.Msg
	deadline := time.After(10 * time.Second)
wait:
	for {
		if _, err := p.Publish([]Event{{Kind: BlockStored, Hashes: []uint64{1}, Medium: "G2"}}); err != nil {
			t.Fatal(err)
		}
		select {
		case first = <-got:
			break wait
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatal("no message")
		}
	}
	if string(first.Frames[0]) != "kv" || len(first.Frames) != 3 || len(first.Frames[1]) != 8 {
		t.Fatalf("frames %q", first.Frames)
	}
	var last uint64
	for i := range 6 {
		last, _ = p.Publish([]Event{{Kind: BlockRemoved, Hashes: []uint64{uint64(i)}, Medium: "G2"}})
	}
	// Replay from last-2: three batches, then END_SEQ.
	dealer := zmq4.NewDealer(ctx)
	defer dealer.Close()
	if err := dealer.Dial("tcp://" + p.ReplayAddr().String()); err != nil {
		t.Fatal(err)
	}
	var sb [8]byte
	binary.BigEndian.PutUint64(sb[:], last-2)
	if err := dealer.SendMulti(zmq4.NewMsgFrom(nil, sb[:])); err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	for {
		m, err := dealer.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Frames) != 3 || len(m.Frames[0]) != 0 {
			t.Fatalf("replay frames %q", m.Frames)
		}
		if bytes.Equal(m.Frames[1], EndSeq) {
			break
		}
		if _, err := Decode(m.Frames[2]); err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, seqOf(m.Frames[1]))
	}
	want := []int64{int64(last - 2), int64(last - 1), int64(last)}
	if fmt.Sprint(seqs) != fmt.Sprint(want) {
		t.Fatalf("replayed %v, want %v", seqs, want)
	}
	// A start older than the buffer gets what is left (4 batches).
	binary.BigEndian.PutUint64(sb[:], 0)
	dealer.SendMulti(zmq4.NewMsgFrom(nil, sb[:]))
	n := 0
	for {
		m, err := dealer.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(m.Frames[1], EndSeq) {
			break
		}
		n++
	}
	if n != 4 {
		t.Fatalf("replay from 0: %d batches, want the buffer's 4", n)
	}
}

func TestListenBusy(t *testing.T) {
	ctx := context.Background()
	p, err := Listen(ctx, Options{Endpoint: "tcp://127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	if _, err := Listen(ctx, Options{Endpoint: "tcp://" + p.Addr().String()}); err == nil {
		t.Fatal("second Listen on the same port: no error")
	}
}

// Tracker fakes.
type fakeFS struct {
	names   map[tiering.ObjectID]string
	writing map[tiering.ObjectID]bool
	tiers   map[tiering.ObjectID]string
}

func (f *fakeFS) Path(id tiering.ObjectID) (string, string, bool) {
	n, ok := f.names[id]
	return "ns", n, ok
}
func (f *fakeFS) Writing(id tiering.ObjectID) bool { return f.writing[id] }
func (f *fakeFS) ServingTier(id tiering.ObjectID) (string, error) {
	t, ok := f.tiers[id]
	if !ok {
		return "", tiering.ErrNotExist
	}
	return t, nil
}
func (f *fakeFS) Objects() []tiering.ObjectInfo {
	var out []tiering.ObjectInfo
	for id := range f.tiers {
		out = append(out, tiering.ObjectInfo{ID: id, Namespace: "ns", Kind: "file"})
	}
	return out
}

type sinkRec struct{ batches [][]Event }

func (s *sinkRec) Publish(ev []Event) (uint64, error) {
	s.batches = append(s.batches, append([]Event(nil), ev...))
	return uint64(len(s.batches) - 1), nil
}

func (s *sinkRec) all() []Event {
	var out []Event
	for _, b := range s.batches {
		out = append(out, b...)
	}
	return out
}

func TestTracker(t *testing.T) {
	fs := &fakeFS{names: map[tiering.ObjectID]string{1: "0000000000000001.bin", 2: "x.tmp"},
		writing: map[tiering.ObjectID]bool{}, tiers: map[tiering.ObjectID]string{1: "G2", 2: "G2"}}
	flat, _ := ParseLayout("flat")
	sink := &sinkRec{}
	tr := NewTracker(TrackerOptions{Sink: sink, Names: fs, Tiers: fs, Layouts: map[string]HashFunc{"ns": flat}, Kind: "file"})
	// Run's start by hand: cleared, walk.
	tr.events = append(tr.events, Event{Kind: AllBlocksCleared})
	tr.flush()
	for _, o := range fs.Objects() {
		tr.Changed(o.ID)
	}
	tr.drain()
	// The temp file is renamed into place; a second file with the same
	// hash appears (counted once); file 1 moves to G3.
	fs.names[2] = "0000000000000002.bin"
	fs.tiers[3], fs.names[3] = "G2", "0000000000000001.bin"
	tr.Changed(2)
	tr.Changed(3)
	tr.drain()
	fs.tiers[1] = "G3"
	tr.sweepTick()
	tr.sweepTick()
	// File 3 is being rewritten; file 2 is lost.
	fs.writing[3] = true
	tr.Changed(3)
	delete(fs.names, 2)
	delete(fs.tiers, 2)
	tr.Changed(2)
	tr.drain()
	want := fmt.Sprint([]Event{{Kind: AllBlocksCleared},
		{Kind: BlockStored, Hashes: []uint64{1}, Medium: "G2"},
		{Kind: BlockStored, Hashes: []uint64{2}, Medium: "G2"},
		{Kind: BlockStored, Hashes: []uint64{1}, Medium: "G3"},
		{Kind: BlockRemoved, Hashes: []uint64{1}, Medium: "G2"},
		{Kind: BlockRemoved, Hashes: []uint64{2}, Medium: "G2"},
	})
	// The order inside a drain follows map order: compare as sets per step.
	got := sink.all()
	if len(fmt.Sprint(got)) != len(want) {
		t.Fatalf("events %v\nwant %v", got, want)
	}
	if sink.batches[0][0].Kind != AllBlocksCleared {
		t.Fatalf("first batch %v", sink.batches[0])
	}
	// Final state: hash 1 in G3 only (file 3 is open for writing).
	if fmt.Sprint(tr.counts) != fmt.Sprint(map[entry]uint32{{1, 2}: 1}) {
		t.Fatalf("counts %v", tr.counts)
	}
}
