package nbd

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/tiering"
)

// hookBackend wraps the real store and lets a test fail or hold calls at
// chosen offsets.
type hookBackend struct {
	Backend
	mu        sync.Mutex
	readFail  map[int64]int // ReadAt at off: fail after n bytes
	writeFail map[int64]bool
	gates     map[int64]chan struct{} // ReadAt at off waits until closed
	entered   chan int64              // offsets of gated reads that started
}

var errInjected = errors.New("injected device failure")

func newHook(be Backend) *hookBackend {
	return &hookBackend{Backend: be, readFail: map[int64]int{}, writeFail: map[int64]bool{},
		gates: map[int64]chan struct{}{}, entered: make(chan int64, 16)}
}

func (h *hookBackend) ReadAt(ctx context.Context, id tiering.ObjectID, p []byte, off int64) (int, error) {
	h.mu.Lock()
	gate := h.gates[off]
	n, fail := h.readFail[off]
	h.mu.Unlock()
	if gate != nil {
		h.entered <- off
		select {
		case <-gate:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	if fail {
		got, _ := h.Backend.ReadAt(ctx, id, p[:n], off)
		return got, errInjected
	}
	return h.Backend.ReadAt(ctx, id, p, off)
}

func (h *hookBackend) WriteAt(ctx context.Context, id tiering.ObjectID, p []byte, off int64) (int, error) {
	h.mu.Lock()
	fail := h.writeFail[off]
	h.mu.Unlock()
	if fail {
		return 0, errInjected
	}
	return h.Backend.WriteAt(ctx, id, p, off)
}

// structuredClient dials r and negotiates structured replies,
// base:allocation and GO with block sizes for export name.
func structuredClient(t *testing.T, r *running, name string) *rawClient {
	c := dialRaw(t, r.sock, clientFixedNewstyle|clientNoZeroes)
	if reps := c.opt(optStructuredReply, nil); reps[0].typ != repAck {
		t.Fatalf("STRUCTURED_REPLY: %#x", reps[0].typ)
	}
	if reps := c.opt(optSetMetaContext, metaData(name, metaBaseAllocation)); len(reps) != 2 {
		t.Fatalf("SET_META_CONTEXT: %+v", reps)
	}
	c.goExport(name, true)
	return c
}

// errorChunk checks that rep is a single structured error chunk of the
// given type and errno.
func errorChunk(t *testing.T, what string, rep reply, typ uint16, errno uint32) {
	t.Helper()
	if rep.errno != errno {
		t.Fatalf("%s: errno %d, want %d (%+v)", what, rep.errno, errno, rep)
	}
	last := rep.chunks[len(rep.chunks)-1]
	if last.typ != typ || last.flags&replyFlagDone == 0 {
		t.Fatalf("%s: final chunk type %#x flags %#x, want type %#x with DONE", what, last.typ, last.flags, typ)
	}
	mlen := binary.BigEndian.Uint16(last.payload[4:])
	if int(mlen) > len(last.payload)-6 || mlen == 0 {
		t.Fatalf("%s: error message length %d in a %d-byte payload", what, mlen, len(last.payload))
	}
}

// okRead checks that the connection still answers a 4 KiB read.
func okRead(t *testing.T, c *rawClient, what string) {
	t.Helper()
	rep := c.do(cmdRead, 0, 0, 4096, nil)
	if rep.errno != 0 {
		t.Fatalf("read after %s: errno %d", what, rep.errno)
	}
	rep.readData(t, 0, 4096)
}

func TestBadRequestsKeepTheStream(t *testing.T) {
	st := newStore(t, 64<<20)
	r := serve(t, st, st.dir, twoExports(), Options{})
	c := structuredClient(t, r, "rw")
	size := uint64(8 << 20)

	cases := []struct {
		name    string
		typ     uint16
		flags   uint16
		off     uint64
		length  uint32
		payload []byte
		errno   uint32
	}{
		{"unaligned read offset", cmdRead, 0, 1, 4096, nil, errInval},
		{"unaligned read length", cmdRead, 0, 0, 100, nil, errInval},
		{"unaligned write", cmdWrite, 0, 512, 100, make([]byte, 100), errInval},
		{"unaligned trim", cmdTrim, 0, 100, 512, nil, errInval},
		{"read past end", cmdRead, 0, size - 512, 1024, nil, errInval},
		{"read offset past end", cmdRead, 0, size + 512, 512, nil, errInval},
		{"read offset wraps", cmdRead, 0, ^uint64(0) - 511, 1024, nil, errInval},
		{"write past end", cmdWrite, 0, size - 512, 1024, make([]byte, 1024), errNoSpc},
		{"trim past end", cmdTrim, 0, size, 512, nil, errNoSpc},
		{"write zeroes past end", cmdWriteZeroes, 0, size - 512, 1024, nil, errNoSpc},
		{"block status past end", cmdBlockStatus, 0, size, 512, nil, errInval},
		{"block status of zero bytes", cmdBlockStatus, 0, 0, 0, nil, errInval},
		{"oversize read", cmdRead, 0, 0, MaxPayload + 512, nil, errInval},
		{"oversize write", cmdWrite, 0, 0, MaxPayload + 512, make([]byte, MaxPayload+512), errInval},
		{"unknown command with a length", 42, 0, 0, 4096, nil, errInval},
		{"NBD_CMD_CACHE (not advertised)", 5, 0, 0, 4096, nil, errInval},
		{"flag not valid for read", cmdRead, cmdFlagNoHole, 0, 4096, nil, errInval},
		{"unknown flag", cmdWrite, 1 << 9, 0, 512, make([]byte, 512), errInval},
	}
	for _, tc := range cases {
		rep := c.do(tc.typ, tc.flags, tc.off, tc.length, tc.payload)
		errorChunk(t, tc.name, rep, replyTypeError, tc.errno)
		okRead(t, c, tc.name)
	}
	// Nothing of the refused writes landed.
	rep := c.do(cmdRead, 0, 0, 1024, nil)
	if d := rep.readData(t, 0, 1024); !bytes.Equal(d, make([]byte, 1024)) {
		t.Fatal("a refused write changed the export")
	}
	if s := r.srv.Stats(); s.Errors != int64(len(cases)) {
		t.Errorf("Stats.Errors = %d, want %d", s.Errors, len(cases))
	}

	// NBD_CMD_DISC: the server closes after answering what was in flight.
	c.send(cmdRead, 0, 7, 0, 4096, nil)
	c.send(cmdDisc, 0, 8, 0, 0, nil)
	if rep := c.recv(); rep.handle != 7 || rep.errno != 0 {
		t.Fatalf("read before DISC: %+v", rep)
	}
	c.expectClosed()

	// A bad request magic cannot be skipped: hard disconnect.
	c = structuredClient(t, r, "rw")
	c.write(make([]byte, requestHeaderLen))
	c.expectClosed()
}

func TestReadOnlyExport(t *testing.T) {
	st := newStore(t, 64<<20)
	r := serve(t, st, st.dir, twoExports(), Options{})
	c := structuredClient(t, r, "ro")
	for _, tc := range []struct {
		name    string
		typ     uint16
		payload []byte
	}{{"write", cmdWrite, make([]byte, 4096)}, {"trim", cmdTrim, nil}, {"write zeroes", cmdWriteZeroes, nil}} {
		rep := c.do(tc.typ, 0, 0, 4096, tc.payload)
		errorChunk(t, tc.name, rep, replyTypeError, errPerm)
		okRead(t, c, tc.name)
	}
	if rep := c.do(cmdFlush, 0, 0, 0, nil); rep.errno != 0 {
		t.Fatalf("flush on a read-only export: %d", rep.errno)
	}
}

func TestCommands(t *testing.T) {
	st := newStore(t, 64<<20)
	r := serve(t, st, st.dir, twoExports(), Options{})
	id := r.srv.Exports()[0].Object
	c := structuredClient(t, r, "rw")
	const bs = 16 << 10

	// WRITE then READ (one OFFSET_DATA chunk with DONE), also with DF.
	data := pattern(7, 3*bs)
	if rep := c.do(cmdWrite, 0, bs, 3*bs, data); rep.errno != 0 || rep.chunks != nil {
		t.Fatalf("write: %+v", rep)
	}
	for _, fl := range []uint16{0, cmdFlagDF} {
		rep := c.do(cmdRead, fl, bs, 3*bs, nil)
		if len(rep.chunks) != 1 || rep.chunks[0].typ != replyTypeOffsetData || rep.chunks[0].flags != replyFlagDone {
			t.Fatalf("read flags %#x: chunks %+v", fl, rep.chunks)
		}
		if !bytes.Equal(rep.readData(t, bs, 3*bs), data) {
			t.Fatal("read back differs")
		}
	}
	// A zero-length read is answered with a NONE chunk.
	if rep := c.do(cmdRead, 0, 0, 0, nil); len(rep.chunks) != 1 || rep.chunks[0].typ != replyTypeNone {
		t.Fatalf("zero-length read: %+v", rep)
	}

	// FLUSH leaves nothing dirty; so does a FUA write.
	if rep := c.do(cmdFlush, 0, 0, 0, nil); rep.errno != 0 {
		t.Fatalf("flush: %d", rep.errno)
	}
	if info, _ := st.Stat(id); info.Dirty {
		t.Fatal("object dirty after FLUSH")
	}
	if rep := c.do(cmdWrite, cmdFlagFUA, 5*bs, 512, pattern(8, 512)); rep.errno != 0 {
		t.Fatalf("FUA write: %d", rep.errno)
	}
	if info, _ := st.Stat(id); info.Dirty {
		t.Fatal("object dirty after a FUA write")
	}

	// BLOCK_STATUS: hole, data (blocks 1-3), hole, data (block 5), hole.
	type ext struct{ n, flags uint32 }
	status := func(off uint64, length uint32, flags uint16) []ext {
		t.Helper()
		rep := c.do(cmdBlockStatus, flags, off, length, nil)
		if rep.errno != 0 || len(rep.chunks) != 1 || rep.chunks[0].typ != replyTypeBlockStatus {
			t.Fatalf("block status: %+v", rep)
		}
		p := rep.chunks[0].payload
		if binary.BigEndian.Uint32(p) != metaBaseAllocationID {
			t.Fatalf("context id %d", binary.BigEndian.Uint32(p))
		}
		var out []ext
		for p = p[4:]; len(p) >= 8; p = p[8:] {
			out = append(out, ext{binary.BigEndian.Uint32(p), binary.BigEndian.Uint32(p[4:])})
		}
		return out
	}
	hz := stateHole | stateZero
	want := []ext{{bs, hz}, {3 * bs, 0}, {bs, hz}, {bs, 0}, {8<<20 - 6*bs, hz}}
	if got := status(0, 8<<20, 0); !equalExt(got, want) {
		t.Fatalf("block status %v, want %v", got, want)
	}
	if got := status(bs+512, 4096, 0); !equalExt(got, []ext{{4096, 0}}) {
		t.Fatalf("block status inside a block: %v", got)
	}
	if got := status(0, 8<<20, cmdFlagReqOne); !equalExt(got, []ext{{bs, hz}}) {
		t.Fatalf("block status REQ_ONE: %v", got)
	}

	// TRIM of block 2 makes it a hole reading zeros; WRITE_ZEROES without
	// NO_HOLE punches block 3; with NO_HOLE block 5 stays allocated.
	if rep := c.do(cmdTrim, 0, 2*bs, bs, nil); rep.errno != 0 {
		t.Fatalf("trim: %d", rep.errno)
	}
	if rep := c.do(cmdWriteZeroes, 0, 3*bs, bs, nil); rep.errno != 0 {
		t.Fatalf("write zeroes: %d", rep.errno)
	}
	if rep := c.do(cmdWriteZeroes, cmdFlagNoHole|cmdFlagFUA, 5*bs, bs, nil); rep.errno != 0 {
		t.Fatalf("write zeroes NO_HOLE: %d", rep.errno)
	}
	want = []ext{{bs, hz}, {bs, 0}, {3 * bs, hz}, {bs, 0}, {8<<20 - 6*bs, hz}}
	if got := status(0, 8<<20, 0); !equalExt(got, want) {
		t.Fatalf("block status after trim/zero %v, want %v", got, want)
	}
	rep := c.do(cmdRead, 0, bs, 5*bs, nil)
	got := rep.readData(t, bs, 5*bs)
	exp := append(append([]byte{}, data[:bs]...), make([]byte, 4*bs)...)
	if !bytes.Equal(got, exp) {
		t.Fatal("contents after trim/write-zeroes differ")
	}
}

func equalExt[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestRepliesOutOfOrder(t *testing.T) {
	st := newStore(t, 64<<20)
	hook := newHook(st)
	gate := make(chan struct{})
	hook.gates[0] = gate
	r := serve(t, hook, st.dir, twoExports(), Options{})
	c := structuredClient(t, r, "rw")
	c.send(cmdRead, 0, 100, 0, 4096, nil) // held in the backend
	<-hook.entered
	for h := uint64(101); h <= 110; h++ {
		c.send(cmdRead, 0, h, 4096*h, 4096, nil)
	}
	seen := map[uint64]bool{}
	for i := 0; i < 10; i++ {
		rep := c.recv()
		if rep.handle == 100 || rep.errno != 0 {
			t.Fatalf("reply %d: %+v while handle 100 is held", i, rep)
		}
		seen[rep.handle] = true
	}
	close(gate)
	if rep := c.recv(); rep.handle != 100 || rep.errno != 0 {
		t.Fatalf("held reply: %+v", rep)
	}
	if len(seen) != 10 {
		t.Fatalf("handles seen %v", seen)
	}
}

func TestBackendFailureIsEIO(t *testing.T) {
	st := newStore(t, 64<<20)
	hook := newHook(st)
	hook.readFail[8192] = 1024  // 1 KiB read, then a failure
	hook.readFail[16384] = 0    // fails at once
	hook.writeFail[4096] = true // writes there fail
	r := serve(t, hook, st.dir, twoExports(), Options{})

	c := structuredClient(t, r, "rw")
	rep := c.do(cmdRead, 0, 8192, 4096, nil)
	errorChunk(t, "partial read", rep, replyTypeErrorOffset, errIO)
	if len(rep.chunks) != 2 || rep.chunks[0].typ != replyTypeOffsetData || len(rep.chunks[0].payload) != 8+1024 {
		t.Fatalf("partial read chunks: %+v", rep.chunks)
	}
	last := rep.chunks[1].payload
	if off := binary.BigEndian.Uint64(last[len(last)-8:]); off != 8192+1024 {
		t.Fatalf("error offset %d, want %d", off, 8192+1024)
	}
	rep = c.do(cmdRead, 0, 16384, 4096, nil)
	errorChunk(t, "failed read", rep, replyTypeErrorOffset, errIO)
	rep = c.do(cmdWrite, 0, 4096, 4096, make([]byte, 4096))
	errorChunk(t, "failed write", rep, replyTypeError, errIO)
	okRead(t, c, "backend failures")

	// Simple replies: an error header without data.
	c = dialRaw(t, r.sock, clientFixedNewstyle|clientNoZeroes)
	c.goExport("rw", false)
	if rep := c.do(cmdRead, 0, 8192, 4096, nil); rep.errno != errIO || rep.data != nil {
		t.Fatalf("simple failed read: %+v", rep)
	}
	if rep := c.do(cmdRead, 0, 0, 4096, nil); rep.errno != 0 || len(rep.data) != 4096 {
		t.Fatalf("simple read after failure: %+v", rep)
	}
}

func TestDisconnectMidRequestKeepsAcknowledgedWrites(t *testing.T) {
	st := newStore(t, 64<<20)
	r := serve(t, st, st.dir, twoExports(), Options{})
	a := pattern(11, 64<<10)
	c := structuredClient(t, r, "rw")
	if rep := c.do(cmdWrite, 0, 0, uint32(len(a)), a); rep.errno != 0 {
		t.Fatalf("write: %d", rep.errno)
	}
	// A write whose payload is cut short, then the client vanishes.
	hdr := make([]byte, 0, requestHeaderLen)
	hdr = binary.BigEndian.AppendUint32(hdr, 0x25609513)
	hdr = binary.BigEndian.AppendUint16(hdr, 0)
	hdr = binary.BigEndian.AppendUint16(hdr, cmdWrite)
	hdr = binary.BigEndian.AppendUint64(hdr, 9)
	hdr = binary.BigEndian.AppendUint64(hdr, 0)
	hdr = binary.BigEndian.AppendUint32(hdr, 1<<20)
	c.write(append(hdr, bytes.Repeat([]byte{0xEE}, 4096)...))
	c.nc.Close()

	c2 := structuredClient(t, r, "rw")
	rep := c2.do(cmdRead, 0, 0, uint32(len(a)), nil)
	if !bytes.Equal(rep.readData(t, 0, len(a)), a) {
		t.Fatal("acknowledged write lost or overwritten by a partial one")
	}
	rep = c2.do(cmdRead, 0, 1<<20-4096, 4096, nil)
	if !bytes.Equal(rep.readData(t, 1<<20-4096, 4096), make([]byte, 4096)) {
		t.Fatal("partial write applied")
	}
}

func TestShutdownAnswersInFlight(t *testing.T) {
	st := newStore(t, 64<<20)
	hook := newHook(st)
	gate := make(chan struct{})
	hook.gates[4096] = gate
	r := serve(t, hook, st.dir, twoExports(), Options{})
	c := structuredClient(t, r, "rw")
	c.send(cmdRead, 0, 5, 4096, 4096, nil)
	<-hook.entered
	stopped := make(chan struct{})
	go func() { r.stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("Serve returned with a request in flight")
	case <-time.After(100 * time.Millisecond):
	}
	close(gate)
	if rep := c.recv(); rep.handle != 5 || rep.errno != 0 {
		t.Fatalf("in-flight reply at shutdown: %+v", rep)
	}
	<-stopped
	c.expectClosed()
}

func TestShutdownGraceCancels(t *testing.T) {
	st := newStore(t, 64<<20)
	hook := newHook(st)
	hook.gates[4096] = make(chan struct{}) // never opened
	r := serve(t, hook, st.dir, twoExports(), Options{ShutdownGrace: 50 * time.Millisecond})
	c := structuredClient(t, r, "rw")
	c.send(cmdRead, 0, 5, 4096, 4096, nil)
	<-hook.entered
	r.stop() // returns once the grace period cancelled the stuck read
	// The cancelled read may still get its ESHUTDOWN reply out before the
	// socket closes; nothing else may come.
	_ = c.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	rest, err := io.ReadAll(c.nc)
	if err != nil {
		t.Fatalf("connection not closed: %v", err)
	}
	if len(rest) > 0 && (len(rest) < 24 || binary.BigEndian.Uint32(rest[20:]) != errShutdown) {
		t.Fatalf("after the grace period: % x", rest)
	}
}

func TestMultiConnFlush(t *testing.T) {
	st := newStore(t, 64<<20)
	r := serve(t, st, st.dir, twoExports(), Options{})
	id := r.srv.Exports()[0].Object
	w := structuredClient(t, r, "rw")
	f := structuredClient(t, r, "rw")
	d := pattern(3, 256<<10)
	if rep := w.do(cmdWrite, 0, 0, uint32(len(d)), d); rep.errno != 0 {
		t.Fatal(rep.errno)
	}
	if rep := f.do(cmdFlush, 0, 0, 0, nil); rep.errno != 0 {
		t.Fatal(rep.errno)
	}
	if info, _ := st.Stat(id); info.Dirty {
		t.Fatal("a FLUSH on another connection left the export dirty")
	}
	if got := f.do(cmdRead, 0, 0, uint32(len(d)), nil).readData(t, 0, len(d)); !bytes.Equal(got, d) {
		t.Fatal("write not visible on another connection")
	}
}
