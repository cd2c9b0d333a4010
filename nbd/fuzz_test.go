package nbd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/pojntfx/go-nbd/pkg/protocol"

	"github.com/ctxmem/ctxmemd/internal/fuzzkit"
	"github.com/ctxmem/ctxmemd/tiering"
)

// Fuzz targets for the two parsers of client bytes: the option haggling
// of the handshake (handshake.go) and the transmission request header with
// its checks (wire.go decodeRequest, ops.go exec). Both run the server's
// own code on an in-memory connection and a recording backend.

// fuzzExports are the exports of the fuzzed server: a writable one with
// 512-byte minimum blocks and a read-only one with 4 KiB minimum blocks.
var fuzzExports = []Export{
	{Name: "disk", Size: 1 << 20, BlockSize: 64 << 10, MinBlockSize: 512, Description: "a disk"},
	{Name: "ro", Size: 256 << 10, BlockSize: 4 << 10, MinBlockSize: 4096, ReadOnly: true},
}

// access is one backend call the server made.
type access struct {
	what    string
	id      tiering.ObjectID
	off, n  int64
	written bool // changes the object
}

// recBackend records the calls and serves zeros; blocks of odd index are
// holes.
type recBackend struct{ calls []access }

func (b *recBackend) CreateWith(string, int, tiering.CreateOptions) (tiering.ObjectID, error) {
	return 0, errors.New("no")
}
func (b *recBackend) Stat(tiering.ObjectID) (tiering.ObjectInfo, error) {
	return tiering.ObjectInfo{}, errors.New("no")
}
func (b *recBackend) Objects() []tiering.ObjectInfo                  { return nil }
func (b *recBackend) Delete(context.Context, tiering.ObjectID) error { return errors.New("no") }
func (b *recBackend) Truncate(context.Context, tiering.ObjectID, int64) error {
	return errors.New("no")
}
func (b *recBackend) ReadAt(_ context.Context, id tiering.ObjectID, p []byte, off int64) (int, error) {
	b.calls = append(b.calls, access{"read", id, off, int64(len(p)), false})
	clear(p)
	return len(p), nil
}
func (b *recBackend) WriteAt(_ context.Context, id tiering.ObjectID, p []byte, off int64) (int, error) {
	b.calls = append(b.calls, access{"write", id, off, int64(len(p)), true})
	return len(p), nil
}
func (b *recBackend) Flush(_ context.Context, id tiering.ObjectID) error {
	b.calls = append(b.calls, access{"flush", id, 0, 0, false})
	return nil
}
func (b *recBackend) Discard(_ context.Context, id tiering.ObjectID, off, n int64) error {
	b.calls = append(b.calls, access{"discard", id, off, n, true})
	return nil
}
func (b *recBackend) BlockTiers(id tiering.ObjectID) ([]string, error) {
	b.calls = append(b.calls, access{"tiers", id, 0, 0, false})
	e := fuzzExports[id-1]
	t := make([]string, e.Size/int64(e.BlockSize))
	for i := range t {
		t[i] = "g2"
		if i%2 == 1 {
			t[i] = tiering.TierHole
		}
	}
	return t, nil
}

func fuzzServer(be Backend) *Server {
	s := &Server{be: be, opts: Options{Workers: 1, MaxInFlightBytes: 128 << 20}, log: slog.New(slog.DiscardHandler),
		byName: map[string]*export{}, bufs: newBufPool(), zeros: make([]byte, 64<<10)}
	for i, e := range fuzzExports {
		x := &export{Export: e, id: tiering.ObjectID(i + 1), bs: e.BlockSize}
		s.exports = append(s.exports, x)
		s.byName[e.Name] = x
	}
	return s
}

func fuzzConn(s *Server, in []byte, out io.Writer) *conn {
	ctx, cancel := context.WithCancel(context.Background())
	return &conn{srv: s, br: bufio.NewReader(bytes.NewReader(in)), bw: bufio.NewWriter(out),
		log: s.log, opCtx: ctx, opCancel: cancel, stopping: make(chan struct{}), done: make(chan struct{}),
		mem: newBudget(s.opts.MaxInFlightBytes)}
}

// clientOpt frames one option as a client sends it.
func clientOpt(opt uint32, data []byte) []byte {
	b := binary.BigEndian.AppendUint64(nil, protocol.NEGOTIATION_MAGIC_OPTION)
	b = binary.BigEndian.AppendUint32(b, opt)
	b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
	return append(b, data...)
}

func clientStream(flags uint32, opts ...[]byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, flags)
	for _, o := range opts {
		b = append(b, o...)
	}
	return b
}

// FuzzHandshake feeds a client's byte stream to the server's option
// haggling and checks the server's answers against the protocol
// (proto.md "Option haggling"):
//   - it never panics, ends (within the input), and allocates at most one
//     option's data bound beyond the input;
//   - the server's output is the greeting and then only well-formed option
//     replies, each for the option being answered, in order; every option
//     read gets exactly one final reply (ACK or an error), except the one
//     the connection ends on; data over the parsed bound is answered
//     NBD_REP_ERR_TOO_BIG;
//   - a session is returned only for NBD_OPT_GO (acknowledged) or
//     NBD_OPT_EXPORT_NAME (answered with the export's size and flags), for
//     a configured export, and base:allocation only with structured
//     replies.
func FuzzHandshake(f *testing.F) {
	nz := clientFixedNewstyle | clientNoZeroes
	fuzzkit.Seed(f,
		fuzzkit.C("go", clientStream(nz, clientOpt(optGo, infoData("disk", infoBlockSize, infoName, infoDescription)))),
		fuzzkit.C("structured-meta-go", clientStream(nz, clientOpt(optStructuredReply, nil),
			clientOpt(optListMetaContext, metaData("disk")), clientOpt(optSetMetaContext, metaData("disk", metaBaseAllocation)),
			clientOpt(optInfo, infoData("ro")), clientOpt(optGo, infoData("disk")))),
		fuzzkit.C("list-exportname", clientStream(clientFixedNewstyle, clientOpt(optList, nil), clientOpt(optExportName, []byte("ro")))),
		fuzzkit.C("default-export", clientStream(nz, clientOpt(optExportName, nil))),
		fuzzkit.C("abort", clientStream(nz, clientOpt(optStartTLS, nil), clientOpt(99, []byte("x")), clientOpt(optAbort, nil))),
		fuzzkit.C("errors", clientStream(nz, clientOpt(optList, []byte{1}), clientOpt(optGo, []byte{0, 0, 0, 9}),
			clientOpt(optSetMetaContext, metaData("disk")), clientOpt(optGo, infoData("nope")),
			clientOpt(optStructuredReply, nil), clientOpt(optSetMetaContext, metaData("nope", "x")), clientOpt(optGo, []byte{0, 0, 0, 0, 0, 5}))),
		fuzzkit.C("toobig", append(clientStream(nz, clientOpt(optInfo, nil)[:12], binary.BigEndian.AppendUint32(nil, maxOptionData+1)), make([]byte, maxOptionData+1)...)),
		fuzzkit.C("badflags", clientStream(1<<5)),
		fuzzkit.C("badmagic", clientStream(nz, []byte("IHAVEOPX\x00\x00\x00\x07\x00\x00\x00\x00"))),
	)
	f.Fuzz(func(t *testing.T, in []byte) {
		be := &recBackend{}
		s := fuzzServer(be)
		var out bytes.Buffer
		c := fuzzConn(s, in, &out)
		var sess *session
		var err error
		fuzzkit.AllocAtMost(t, 1<<20+4*uint64(len(in)), "handshake", func() { sess, err = c.handshake() })
		if (sess == nil) == (err == nil) {
			t.Fatalf("handshake returned session %v and error %v", sess, err)
		}
		if err != nil && err.Error() == "" {
			t.Fatal("empty error")
		}
		if len(be.calls) != 0 {
			t.Fatalf("the handshake called the backend: %v", be.calls)
		}
		checkHaggling(t, in, out.Bytes(), sess, err)
	})
}

// checkHaggling replays the client's options against the server's replies.
func checkHaggling(t *testing.T, in, out []byte, sess *session, herr error) {
	t.Helper()
	be := binary.BigEndian
	if len(out) < 18 || be.Uint64(out) != protocol.NEGOTIATION_MAGIC_OLDSTYLE || be.Uint64(out[8:]) != protocol.NEGOTIATION_MAGIC_OPTION {
		t.Fatalf("no greeting: %x", out)
	}
	out = out[18:]
	if len(in) < 4 {
		if len(out) != 0 || sess != nil {
			t.Fatal("answered a client that sent no flags")
		}
		return
	}
	flags := be.Uint32(in)
	if flags&^(clientFixedNewstyle|clientNoZeroes) != 0 {
		// Unknown client flags: the spec says close, answering nothing.
		if len(out) != 0 || sess != nil || herr == nil {
			t.Fatalf("client flags %#x: replies %x, session %+v, error %v", flags, out, sess, herr)
		}
		return
	}
	noZeroes := flags&clientNoZeroes != 0
	in = in[4:]
	var structured, ended bool
	for !ended {
		if len(in) < optionHeaderLen {
			ended = true
			break
		}
		if be.Uint64(in) != protocol.NEGOTIATION_MAGIC_OPTION {
			break
		}
		opt, n := be.Uint32(in[8:]), be.Uint32(in[12:])
		in = in[optionHeaderLen:]
		if n > maxOptionData {
			if opt == optExportName || n > maxOptionDiscard || uint64(n) > uint64(len(in)) {
				ended = true
				break
			}
			in = in[n:]
			typ, _ := nextReply(t, &out, opt)
			if typ != repErrTooBig {
				t.Fatalf("option %d with %d bytes answered %#x, want NBD_REP_ERR_TOO_BIG", opt, n, typ)
			}
			continue
		}
		if uint64(n) > uint64(len(in)) {
			ended = true
			break
		}
		data := in[:n]
		in = in[n:]
		if opt == optExportName {
			e := fuzzServer(nil).lookup(string(data))
			if e == nil {
				break
			}
			want := 10
			if !noZeroes {
				want += 124
			}
			if len(out) != want || int64(be.Uint64(out)) != e.Size || be.Uint16(out[8:]) != e.flags(structured) {
				t.Fatalf("NBD_OPT_EXPORT_NAME answered %x", out)
			}
			if sess == nil || sess.exp.Name != e.Name {
				t.Fatalf("NBD_OPT_EXPORT_NAME %q gave session %+v", data, sess)
			}
			return
		}
		// Replies up to the final one, all for this option.
		for {
			if len(out) == 0 {
				// The connection ended while answering (abort, or an
				// error after partial replies cannot happen: buffered).
				if opt == optAbort {
					t.Fatal("NBD_OPT_ABORT not acknowledged")
				}
				ended = true
				break
			}
			typ, rdata := nextReply(t, &out, opt)
			if typ == repAck || typ&(1<<31) != 0 {
				if opt == optStructuredReply && typ == repAck {
					structured = true
				}
				if opt == optAbort {
					if typ != repAck || !errors.Is(herr, errAbort) || len(out) != 0 {
						t.Fatalf("NBD_OPT_ABORT: reply %#x, error %v, %d bytes more", typ, herr, len(out))
					}
					return
				}
				if opt == optGo && typ == repAck {
					name := string(data[4 : 4+be.Uint32(data)])
					if sess == nil || sess.exp.Name != fuzzServer(nil).lookup(name).Name || sess.structured != structured || len(out) != 0 {
						t.Fatalf("NBD_OPT_GO %q acknowledged, session %+v, %d bytes more", name, sess, len(out))
					}
					if sess.metaAlloc && !sess.structured {
						t.Fatal("base:allocation without structured replies")
					}
					return
				}
				break
			}
			switch {
			case typ == repServer && opt == optList:
			case typ == repInfo && (opt == optInfo || opt == optGo):
				if len(rdata) < 2 {
					t.Fatalf("NBD_REP_INFO of %d bytes", len(rdata))
				}
			case typ == repMetaContext && (opt == optListMetaContext || opt == optSetMetaContext):
				if string(rdata[4:]) != metaBaseAllocation {
					t.Fatalf("meta context reply %q", rdata)
				}
			default:
				t.Fatalf("option %d: reply type %#x", opt, typ)
			}
		}
	}
	if len(out) != 0 {
		t.Fatalf("%d bytes of replies past the last option read: %x", len(out), out)
	}
	if sess != nil {
		t.Fatalf("session %+v without NBD_OPT_GO or NBD_OPT_EXPORT_NAME", sess)
	}
}

// nextReply takes one option reply for opt off out.
func nextReply(t *testing.T, out *[]byte, opt uint32) (uint32, []byte) {
	t.Helper()
	b := *out
	be := binary.BigEndian
	if len(b) < optionReplyLen || be.Uint64(b) != protocol.NEGOTIATION_MAGIC_REPLY {
		t.Fatalf("not an option reply: %x", b)
	}
	if got := be.Uint32(b[8:]); got != opt {
		t.Fatalf("reply for option %d while answering %d", got, opt)
	}
	n := be.Uint32(b[16:])
	if uint64(n) > uint64(len(b)-optionReplyLen) {
		t.Fatalf("reply of %d bytes, %d sent", n, len(b)-optionReplyLen)
	}
	*out = b[optionReplyLen+int(n):]
	return be.Uint32(b[12:]), b[optionReplyLen : optionReplyLen+int(n)]
}

// FuzzRequest decodes a transmission request header (and a WRITE's
// payload) as the reader does and executes it on a session negotiated as
// the arguments say, against a recording backend. Properties:
//   - no request reaches the backend outside its export, with a write on
//     a read-only export, or misaligned for a client that asked for block
//     sizes; the backend sees no request the server answers as refused;
//   - a request the spec says must fail (unknown command, invalid flags,
//     past the end, over the maximum payload) gets a non-zero error;
//   - the reply is well formed: right magic, the request's handle, and a
//     structured chunk length matching what follows it.
func FuzzRequest(f *testing.F) {
	req := func(flags, typ uint16, handle, off uint64, n uint32) []byte {
		b := binary.BigEndian.AppendUint32(nil, protocol.TRANSMISSION_MAGIC_REQUEST)
		b = binary.BigEndian.AppendUint16(b, flags)
		b = binary.BigEndian.AppendUint16(b, typ)
		b = binary.BigEndian.AppendUint64(b, handle)
		b = binary.BigEndian.AppendUint64(b, off)
		return binary.BigEndian.AppendUint32(b, n)
	}
	fuzzkit.Seed(f,
		fuzzkit.C("read", req(0, cmdRead, 1, 4096, 4096), false, true, false, false),
		fuzzkit.C("write-fua", append(req(cmdFlagFUA, cmdWrite, 2, 512, 512), make([]byte, 512)...), false, true, true, false),
		fuzzkit.C("write-ro", append(req(0, cmdWrite, 3, 0, 4096), make([]byte, 4096)...), true, false, false, false),
		fuzzkit.C("trim", req(0, cmdTrim, 4, 0, 1<<20), false, false, false, false),
		fuzzkit.C("zeroes-nohole", req(cmdFlagNoHole, cmdWriteZeroes, 5, 65536, 100000), false, true, false, false),
		fuzzkit.C("status", req(cmdFlagReqOne, cmdBlockStatus, 6, 0, 1<<20), false, true, false, true),
		fuzzkit.C("flush", req(0, cmdFlush, 7, 0, 0), true, true, true, true),
		fuzzkit.C("past-end", req(0, cmdRead, 8, 1<<20, 1), false, true, false, false),
		fuzzkit.C("misaligned", req(0, cmdRead, 9, 1, 511), false, false, true, false),
		fuzzkit.C("toolong-write", req(0, cmdWrite, 10, 0, MaxPayload+1), false, false, false, false),
		fuzzkit.C("unknown", req(1<<15, 99, 11, 0, 0), false, false, false, false),
		fuzzkit.C("wrap", req(0, cmdTrim, 12, 1<<64-512, 1024), false, true, false, true),
	)
	f.Fuzz(func(t *testing.T, in []byte, readOnly, structured, align, metaAlloc bool) {
		if len(in) < requestHeaderLen {
			return
		}
		be := &recBackend{}
		s := fuzzServer(be)
		e := s.exports[0]
		if readOnly {
			e = s.exports[1]
		}
		var out bytes.Buffer
		c := fuzzConn(s, in[requestHeaderLen:], &out)
		c.sess = &session{exp: e, structured: structured, metaAlloc: metaAlloc && structured, align: align}
		r := s.getOp()
		decodeRequest(in, &r.req)
		q := r.req
		if q.RequestMagic != protocol.TRANSMISSION_MAGIC_REQUEST || q.Type == cmdDisc {
			return // the reader closes the connection: nothing to execute
		}
		if q.Type == cmdWrite && q.Length > 256<<10 && q.Length <= MaxPayload {
			return // the payload buffer would be allocated before reading: too slow to fuzz
		}
		if err := c.readPayload(r); err != nil {
			return // a WRITE cut short is not executed
		}
		c.handle(r)

		size, m := uint64(e.Size), uint64(e.MinBlockSize)
		for _, a := range be.calls {
			if a.id != e.id {
				t.Fatalf("%s on object %d, the export is %d", a.what, a.id, e.id)
			}
			if a.off < 0 || a.n < 0 || uint64(a.off) > size || uint64(a.n) > size-uint64(a.off) {
				t.Fatalf("%s [%d, +%d) outside the export of %d bytes (request %+v)", a.what, a.off, a.n, size, q)
			}
			if a.written && e.ReadOnly {
				t.Fatalf("%s on a read-only export", a.what)
			}
			if align && a.n > 0 && (uint64(a.off)%m != 0 || uint64(q.Offset)%m != 0 || uint64(q.Length)%m != 0) {
				t.Fatalf("misaligned %s [%d, +%d) for a client that asked for block sizes", a.what, a.off, a.n)
			}
		}
		errno := replyErrno(t, r, q, structured)
		known := q.Type <= cmdBlockStatus && q.Type != cmdDisc && q.Type != 5
		mustFail := !known || q.CommandFlags&^c.allowedFlags(q.Type) != 0 ||
			q.Type != cmdFlush && (q.Offset > size || uint64(q.Length) > size-q.Offset) ||
			(q.Type == cmdRead || q.Type == cmdWrite) && q.Length > MaxPayload ||
			q.Type == cmdBlockStatus && (q.Length == 0 || !c.sess.metaAlloc)
		if mustFail && errno == 0 {
			t.Fatalf("request %+v succeeded", q)
		}
		if errno != 0 {
			for _, a := range be.calls {
				if a.written {
					t.Fatalf("refused request %+v reached the backend: %v", q, be.calls)
				}
			}
		}
		c.release(r)
		if c.mem.used != 0 {
			t.Fatalf("%d budget bytes still held", c.mem.used)
		}
	})
}

// replyErrno checks the encoded reply of r and returns its error value.
func replyErrno(t *testing.T, r *op, q protocol.TransmissionRequestHeader, structured bool) uint32 {
	t.Helper()
	be := binary.BigEndian
	h := r.hdr
	if !structured || q.Type != cmdRead && q.Type != cmdBlockStatus && len(h) == simpleReplyLen {
		if len(h) != simpleReplyLen || be.Uint32(h) != protocol.TRANSMISSION_MAGIC_REPLY || be.Uint64(h[8:]) != q.Handle {
			t.Fatalf("simple reply %x for %+v", h, q)
		}
		errno := be.Uint32(h[4:])
		if q.Type == cmdRead && errno == 0 && len(r.body) != int(q.Length) {
			t.Fatalf("read of %d bytes answered with %d", q.Length, len(r.body))
		}
		return errno
	}
	if len(h) < structuredHeaderLen || be.Uint32(h) != structuredReplyMagic || be.Uint64(h[8:]) != q.Handle {
		t.Fatalf("structured reply %x for %+v", h, q)
	}
	typ, n := be.Uint16(h[6:]), be.Uint32(h[16:])
	if got := len(h) - structuredHeaderLen + len(r.body); typ != replyTypeError && typ != replyTypeErrorOffset && uint32(got) != n {
		t.Fatalf("chunk type %d declares %d bytes, carries %d", typ, n, got)
	}
	switch typ {
	case replyTypeError, replyTypeErrorOffset:
		if len(h) != structuredHeaderLen+int(n) {
			t.Fatalf("error chunk declares %d bytes, carries %d", n, len(h)-structuredHeaderLen)
		}
		if ml := be.Uint16(h[structuredHeaderLen+4:]); int(ml)+6 > int(n) {
			t.Fatalf("error message of %d bytes in a %d-byte chunk", ml, n)
		}
		return be.Uint32(h[structuredHeaderLen:])
	case replyTypeNone, replyTypeOffsetData, replyTypeBlockStatus:
		if be.Uint16(h[4:])&replyFlagDone == 0 {
			t.Fatal("single chunk without NBD_REPLY_FLAG_DONE")
		}
		return 0
	}
	t.Fatalf("chunk type %d", typ)
	return 0
}
