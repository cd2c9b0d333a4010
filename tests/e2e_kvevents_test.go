package tests

// TestE2EKVEvents: KV events (kv_events, package kvevents) seen by a
// subscriber match what the mount holds, per medium, after a replay with
// tier moves, unlinks and a daemon restart.
//
//	go build -o /tmp/ctxmemd ./cmd/ctxmemd
//	CTXMEM_REQUIRE_TOOLS=1 CTXMEM_E2E=1 go test -count=1 -run TestE2EKVEvents -v ./tests/

import (
	"bytes"
	"context"
	binenc "encoding/binary"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"golang.org/x/sys/unix"

	"github.com/ctxmem/ctxmemd/internal/testenv"
	"github.com/ctxmem/ctxmemd/kvevents"
	"github.com/ctxmem/ctxmemd/tests/harness"
)

func freeTCP(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// kvView is a router's view: medium → set of hashes.
type kvView map[string]map[uint64]bool

func (v kvView) String() string {
	var parts []string
	for m, s := range v {
		if len(s) > 0 {
			parts = append(parts, fmt.Sprintf("%s:%d", m, len(s)))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

func (v kvView) equal(w kvView) bool {
	count := func(x kvView) int {
		n := 0
		for _, s := range x {
			n += len(s)
		}
		return n
	}
	if count(v) != count(w) {
		return false
	}
	for m, s := range v {
		for h := range s {
			if !w[m][h] {
				return false
			}
		}
	}
	return true
}

// kvSubscriber follows the PUB socket like a router: it applies batches in
// sequence order, fetching gaps from the replay socket.
type kvSubscriber struct {
	t       *testing.T
	replay  string
	sub     zmq4.Socket
	mu      sync.Mutex
	view    kvView
	next    uint64 // next expected sequence
	batches int
	// firstBatch is the first batch of sequence 0, decoded.
	firstBatch []kvevents.Event
	payload0   []byte
	err        error
	done       chan struct{}
}

func newKVSubscriber(t *testing.T, pub, replay string) *kvSubscriber {
	s := &kvSubscriber{t: t, replay: replay, view: kvView{}, done: make(chan struct{})}
	s.sub = zmq4.NewSub(context.Background(), zmq4.WithDialerRetry(50*time.Millisecond), zmq4.WithDialerMaxRetries(200))
	if err := s.sub.Dial(pub); err != nil {
		t.Fatal(err)
	}
	if err := s.sub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		t.Fatal(err)
	}
	go s.run()
	return s
}

func (s *kvSubscriber) close() { s.sub.Close(); <-s.done }

func (s *kvSubscriber) run() {
	defer close(s.done)
	// Catch up first, as a router that (re)connects does: a PUB socket
	// drops what it sent before this SUB joined, and after a restart the
	// whole set may have gone out by then, with no later message to show
	// the gap (the test then saw nothing: 1 run in 2 here).
	if err := s.fetch(0, catchUp); err != nil {
		s.fail(err)
		return
	}
	for {
		m, err := s.sub.Recv()
		if err != nil {
			return
		}
		if len(m.Frames) != 3 || len(m.Frames[1]) != 8 {
			s.fail(fmt.Errorf("message of %d frames", len(m.Frames)))
			return
		}
		seq := binenc.BigEndian.Uint64(m.Frames[1])
		s.mu.Lock()
		next := s.next
		s.mu.Unlock()
		if seq > next {
			if err := s.fetch(next, seq); err != nil {
				s.fail(err)
				return
			}
		}
		s.mu.Lock()
		if seq == s.next {
			s.applyLocked(seq, m.Frames[2])
		}
		s.mu.Unlock()
	}
}

// catchUp as fetch's to: everything the replay socket holds.
const catchUp = ^uint64(0)

// fetch replays [from, to) (to catchUp: all the replay socket holds).
func (s *kvSubscriber) fetch(from, to uint64) error {
	d := zmq4.NewDealer(context.Background())
	defer d.Close()
	if err := d.Dial(s.replay); err != nil {
		return err
	}
	var sb [8]byte
	binenc.BigEndian.PutUint64(sb[:], from)
	if err := d.SendMulti(zmq4.NewMsgFrom(nil, sb[:])); err != nil {
		return err
	}
	for {
		m, err := d.Recv()
		if err != nil {
			return err
		}
		if len(m.Frames) != 3 {
			return fmt.Errorf("replay answer of %d frames", len(m.Frames))
		}
		if bytes.Equal(m.Frames[1], kvevents.EndSeq) {
			break
		}
		seq := binenc.BigEndian.Uint64(m.Frames[1])
		s.mu.Lock()
		if seq == s.next && seq < to {
			s.applyLocked(seq, m.Frames[2])
		}
		s.mu.Unlock()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.next < to && to != catchUp {
		return fmt.Errorf("replay from %d ended at %d, want %d", from, s.next, to)
	}
	return nil
}

func (s *kvSubscriber) applyLocked(seq uint64, payload []byte) {
	b, err := kvevents.Decode(payload)
	if err != nil {
		s.err = err
		return
	}
	if seq == 0 {
		s.firstBatch = b.Events
		s.payload0 = append([]byte(nil), payload...)
	}
	for _, e := range b.Events {
		switch e.Kind {
		case kvevents.AllBlocksCleared:
			s.view = kvView{}
		case kvevents.BlockStored:
			if s.view[e.Medium] == nil {
				s.view[e.Medium] = map[uint64]bool{}
			}
			for _, h := range e.Hashes {
				s.view[e.Medium][h] = true
			}
		case kvevents.BlockRemoved:
			for _, h := range e.Hashes {
				if !s.view[e.Medium][h] {
					s.err = fmt.Errorf("seq %d: BlockRemoved %#x from %s, which does not hold it", seq, h, e.Medium)
				}
				delete(s.view[e.Medium], h)
			}
		}
	}
	s.next = seq + 1
	s.batches++
}

func (s *kvSubscriber) fail(err error) {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
}

func (s *kvSubscriber) snapshot() (kvView, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := kvView{}
	for m, set := range s.view {
		v[m] = map[uint64]bool{}
		for h := range set {
			v[m][h] = true
		}
	}
	return v, s.err
}

// tierRank orders tiers fastest first.
var tierRank = map[string]int{"G2": 1, "G3": 2, "G3.5": 3, "G4": 4}

// mountView walks the namespace: every file the layout names, in the
// slowest tier its user.ctxmem.tier xattr lists (the serving tier).
func mountView(t *testing.T, root, layout string) kvView {
	t.Helper()
	hash, err := kvevents.ParseLayout(layout)
	if err != nil {
		t.Fatal(err)
	}
	v := kvView{}
	buf := make([]byte, 4096)
	filepath.WalkDir(root, func(p string, de fs.DirEntry, err error) error {
		if err != nil || !de.Type().IsRegular() {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		h, ok := hash(rel)
		if !ok {
			return nil
		}
		n, err := unix.Getxattr(p, "user.ctxmem.tier", buf)
		if err != nil {
			return nil // gone meanwhile
		}
		medium := "G2"
		for _, run := range strings.Fields(string(buf[:n])) {
			name, _, _ := strings.Cut(run, "*")
			if tierRank[name] > tierRank[medium] {
				medium = name
			}
		}
		if v[medium] == nil {
			v[medium] = map[uint64]bool{}
		}
		v[medium][h] = true
		return nil
	})
	return v
}

// waitSame polls until the subscriber's view equals the mount's.
func waitSame(t *testing.T, s *kvSubscriber, root string) kvView {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		got, err := s.snapshot()
		if err != nil {
			t.Fatal(err)
		}
		want := mountView(t, root, "vllm")
		if got.equal(want) {
			return want
		}
		if time.Now().After(deadline) {
			t.Fatalf("subscriber view %v, mount %v", got, want)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func TestE2EKVEvents(t *testing.T) {
	pubAddr, replayAddr := "tcp://"+freeTCP(t), "tcp://"+freeTCP(t)
	opts := smallTiers
	opts.Extra = append(append([]string(nil), opts.Extra...), "--kv-events", pubAddr, "--kv-events-replay", replayAddr,
		"--kv-layout", "vllm", "--nats", "none")
	d := harness.Start(t, needE2E(t), opts)
	sub := newKVSubscriber(t, pubAddr, replayAddr)
	defer func() { sub.close() }()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	args := append(replayArgs(t, d, replayRequests(t, 400)), "--layout", "vllm")
	res, code, stderr, err := harness.Replay(ctx, d.Binary(), args...)
	if err != nil || code != harness.ExitOK || res.VerifyFailures != 0 {
		t.Fatalf("replay: exit %d, %+v, %v\nstderr: %s", code, res, err, stderr)
	}
	// Demotion is asynchronous: wait until blocks are below G2, then
	// until the subscriber agrees with the mount.
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, err := d.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if tierBlocks(st, "G3") > 0 || tierBlocks(st, "G4") > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no blocks below G2 after the replay: %s", st.Raw)
		}
		time.Sleep(300 * time.Millisecond)
	}
	view := waitSame(t, sub, d.Namespace())
	t.Logf("after replay: %v (%d batches)", view, sub.batches)
	if len(view["G2"]) == 0 || len(view["G3"])+len(view["G4"]) == 0 {
		t.Fatalf("want blocks in G2 and below: %v", view)
	}

	// Unlinks are removals.
	removed := 0
	filepath.WalkDir(d.Namespace(), func(p string, de fs.DirEntry, err error) error {
		if err == nil && de.Type().IsRegular() && removed < 25 {
			if os.Remove(p) == nil {
				removed++
			}
		}
		return nil
	})
	after := waitSame(t, sub, d.Namespace())
	t.Logf("after %d unlinks: %v", removed, after)

	// Restart: a new subscriber sees sequence 0 = AllBlocksCleared, then
	// the same set again.
	sub.close()
	d.Restart()
	sub = newKVSubscriber(t, pubAddr, replayAddr)
	again := waitSame(t, sub, d.Namespace())
	sub.mu.Lock()
	first, p0 := sub.firstBatch, sub.payload0
	sub.mu.Unlock()
	if len(first) == 0 || first[0].Kind != kvevents.AllBlocksCleared {
		t.Fatalf("batch 0 after the restart: %v, want AllBlocksCleared first", first)
	}
	if !again.equal(mountView(t, d.Namespace(), "vllm")) {
		t.Fatalf("after restart: %v", again)
	}
	t.Logf("after restart: %v", again)

	// The same payload decoded by Python's msgpack, as a vLLM-side tool would.
	// Debian's python3 first: a pyenv python3 earlier in PATH lacks
	// the Debian packages.
	var py string
	err = fmt.Errorf("no python3")
	for _, c := range []string{"/usr/bin/python3", "python3"} {
		if p, e := exec.LookPath(c); e == nil {
			if err = exec.Command(p, "-c", "import zmq, msgpack").Run(); err == nil {
				py = p
				break
			}
		}
	}
	if err != nil {
		testenv.Skip(t, "python3 with zmq and msgpack (apt-get install python3-zmq python3-msgpack): %v", err)
	}
	script := `
import sys, msgpack, zmq
b = msgpack.unpackb(sys.stdin.buffer.read())
assert isinstance(b, list) and len(b) == 3, b
ts, events, rank = b
assert isinstance(ts, float) and rank == 0, b
assert events[0] == {"type": "AllBlocksCleared"}, events[0]
# Live: subscribe and ask the replay socket for sequence 0.
ctx = zmq.Context()
d = ctx.socket(zmq.DEALER)
d.connect(sys.argv[1])
d.send_multipart([b"", (0).to_bytes(8, "big")])
seen = 0
while True:
    _, seq, payload = d.recv_multipart()
    if seq == (-1).to_bytes(8, "big", signed=True):
        break
    batch = msgpack.unpackb(payload)
    for e in batch[1]:
        assert e["type"] in ("BlockStored", "BlockRemoved", "AllBlocksCleared"), e
        if e["type"] != "AllBlocksCleared":
            assert all(isinstance(h, int) for h in e["block_hashes"]), e
            assert e["medium"] in ("G2", "G3", "G3.5", "G4"), e
    seen += 1
assert seen > 0
print("python: ok,", seen, "batches")
`
	cmd := exec.Command(py, "-c", script, replayAddr)
	cmd.Stdin = bytes.NewReader(p0)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python decode: %v\n%s", err, out)
	}
	t.Logf("%s", bytes.TrimSpace(out))
}
