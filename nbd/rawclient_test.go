package nbd

import (
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/pojntfx/go-nbd/pkg/protocol"
)

// rawClient speaks the NBD protocol byte by byte, so tests can send what
// well-behaved clients never send and check every field of the answers.
type rawClient struct {
	t      testing.TB
	nc     net.Conn
	size   uint64
	flags  uint16
	blocks [3]uint32 // min, preferred, max from NBD_INFO_BLOCK_SIZE
	reads  map[uint64]uint32
}

type optReply struct {
	opt, typ uint32
	data     []byte
}

// chunk is one structured reply chunk.
type chunk struct {
	flags, typ uint16
	payload    []byte
}

// reply is a whole reply: simple (chunks nil) or structured.
type reply struct {
	handle uint64
	errno  uint32 // simple reply error, or the first error chunk's
	data   []byte // simple READ data
	chunks []chunk
}

// dialRaw connects and completes the greeting with the given client flags.
func dialRaw(t testing.TB, sock string, clientFlags uint32) *rawClient {
	t.Helper()
	nc, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(60 * time.Second))
	c := &rawClient{t: t, nc: nc, reads: map[uint64]uint32{}}
	var hello [18]byte
	c.readFull(hello[:])
	if binary.BigEndian.Uint64(hello[0:]) != protocol.NEGOTIATION_MAGIC_OLDSTYLE ||
		binary.BigEndian.Uint64(hello[8:]) != protocol.NEGOTIATION_MAGIC_OPTION {
		t.Fatalf("bad greeting % x", hello)
	}
	if f := binary.BigEndian.Uint16(hello[16:]); f != flagFixedNewstyle|flagNoZeroes {
		t.Fatalf("handshake flags %#x", f)
	}
	c.write(binary.BigEndian.AppendUint32(nil, clientFlags))
	return c
}

func (c *rawClient) readFull(b []byte) {
	c.t.Helper()
	if _, err := io.ReadFull(c.nc, b); err != nil {
		c.t.Fatalf("read: %v", err)
	}
}

func (c *rawClient) write(b []byte) {
	c.t.Helper()
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

func (c *rawClient) sendOpt(opt uint32, data []byte) {
	c.t.Helper()
	b := binary.BigEndian.AppendUint64(nil, protocol.NEGOTIATION_MAGIC_OPTION)
	b = binary.BigEndian.AppendUint32(b, opt)
	b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
	c.write(append(b, data...))
}

func (c *rawClient) readOpt() optReply {
	c.t.Helper()
	var h [20]byte
	c.readFull(h[:])
	if binary.BigEndian.Uint64(h[0:]) != protocol.NEGOTIATION_MAGIC_REPLY {
		c.t.Fatalf("bad option reply magic % x", h)
	}
	r := optReply{opt: binary.BigEndian.Uint32(h[8:]), typ: binary.BigEndian.Uint32(h[12:])}
	r.data = make([]byte, binary.BigEndian.Uint32(h[16:]))
	c.readFull(r.data)
	return r
}

// opt sends an option and returns its replies up to the final one (an ACK
// or an error).
func (c *rawClient) opt(opt uint32, data []byte) []optReply {
	c.t.Helper()
	c.sendOpt(opt, data)
	var out []optReply
	for {
		r := c.readOpt()
		if r.opt != opt {
			c.t.Fatalf("reply for option %d, want %d", r.opt, opt)
		}
		out = append(out, r)
		if r.typ == repAck || r.typ&(1<<31) != 0 {
			return out
		}
	}
}

func infoData(name string, reqs ...uint16) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(name)))
	b = append(b, name...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(reqs)))
	for _, r := range reqs {
		b = binary.BigEndian.AppendUint16(b, r)
	}
	return b
}

func metaData(name string, queries ...string) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(name)))
	b = append(b, name...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(queries)))
	for _, q := range queries {
		b = binary.BigEndian.AppendUint32(b, uint32(len(q)))
		b = append(b, q...)
	}
	return b
}

// goExport sends NBD_OPT_GO (asking for block sizes when askBlock) and
// checks it succeeds, recording the size, flags and block sizes.
func (c *rawClient) goExport(name string, askBlock bool) {
	c.t.Helper()
	var reqs []uint16
	if askBlock {
		reqs = append(reqs, infoBlockSize)
	}
	for _, r := range c.opt(optGo, infoData(name, reqs...)) {
		switch r.typ {
		case repInfo:
			c.parseInfo(r.data)
		case repAck:
		default:
			c.t.Fatalf("NBD_OPT_GO %q: reply type %#x %q", name, r.typ, r.data)
		}
	}
}

func (c *rawClient) parseInfo(d []byte) {
	switch binary.BigEndian.Uint16(d) {
	case infoExport:
		c.size = binary.BigEndian.Uint64(d[2:])
		c.flags = binary.BigEndian.Uint16(d[10:])
	case infoBlockSize:
		for i := range c.blocks {
			c.blocks[i] = binary.BigEndian.Uint32(d[2+4*i:])
		}
	}
}

// send writes one request header (and payload).
func (c *rawClient) send(typ, flags uint16, handle, off uint64, length uint32, payload []byte) {
	c.t.Helper()
	b := make([]byte, 0, requestHeaderLen+len(payload))
	b = binary.BigEndian.AppendUint32(b, protocol.TRANSMISSION_MAGIC_REQUEST)
	b = binary.BigEndian.AppendUint16(b, flags)
	b = binary.BigEndian.AppendUint16(b, typ)
	b = binary.BigEndian.AppendUint64(b, handle)
	b = binary.BigEndian.AppendUint64(b, off)
	b = binary.BigEndian.AppendUint32(b, length)
	if typ == cmdRead {
		c.reads[handle] = length
	}
	c.write(append(b, payload...))
}

// recv reads one whole reply (all chunks of a structured one).
func (c *rawClient) recv() reply {
	c.t.Helper()
	var m [4]byte
	c.readFull(m[:])
	switch binary.BigEndian.Uint32(m[:]) {
	case protocol.TRANSMISSION_MAGIC_REPLY:
		var h [12]byte
		c.readFull(h[:])
		r := reply{errno: binary.BigEndian.Uint32(h[0:]), handle: binary.BigEndian.Uint64(h[4:])}
		if n, ok := c.reads[r.handle]; ok && r.errno == 0 {
			r.data = make([]byte, n)
			c.readFull(r.data)
		}
		delete(c.reads, r.handle)
		return r
	case structuredReplyMagic:
		var r reply
		for first := true; ; first = false {
			if !first {
				c.readFull(m[:])
				if binary.BigEndian.Uint32(m[:]) != structuredReplyMagic {
					c.t.Fatalf("chunk magic % x", m)
				}
			}
			var h [16]byte
			c.readFull(h[:])
			ch := chunk{flags: binary.BigEndian.Uint16(h[0:]), typ: binary.BigEndian.Uint16(h[2:])}
			handle := binary.BigEndian.Uint64(h[4:])
			if !first && handle != r.handle {
				c.t.Fatalf("chunks of handles %d and %d interleaved", r.handle, handle)
			}
			r.handle = handle
			ch.payload = make([]byte, binary.BigEndian.Uint32(h[12:]))
			c.readFull(ch.payload)
			if ch.typ&(1<<15) != 0 && r.errno == 0 {
				r.errno = binary.BigEndian.Uint32(ch.payload)
			}
			r.chunks = append(r.chunks, ch)
			if ch.flags&replyFlagDone != 0 {
				delete(c.reads, r.handle)
				return r
			}
		}
	}
	c.t.Fatalf("bad reply magic % x", m)
	return reply{}
}

// readData returns the bytes of a successful structured READ reply,
// checking that its data chunks cover [off, off+n) exactly.
func (r reply) readData(t testing.TB, off uint64, n int) []byte {
	t.Helper()
	if r.chunks == nil {
		return r.data
	}
	out := make([]byte, n)
	covered := 0
	for _, ch := range r.chunks {
		switch ch.typ {
		case replyTypeOffsetData:
			o := binary.BigEndian.Uint64(ch.payload)
			covered += copy(out[o-off:], ch.payload[8:])
		case replyTypeNone:
		default:
			t.Fatalf("unexpected chunk type %#x in a read reply", ch.typ)
		}
	}
	if covered != n {
		t.Fatalf("read reply covers %d of %d bytes", covered, n)
	}
	return out
}

// do sends one request and returns its reply (no other request in flight).
func (c *rawClient) do(typ, flags uint16, off uint64, length uint32, payload []byte) reply {
	c.t.Helper()
	c.send(typ, flags, 1, off, length, payload)
	r := c.recv()
	if r.handle != 1 {
		c.t.Fatalf("reply handle %d, want 1", r.handle)
	}
	return r
}

// expectClosed checks that the server closed the connection.
func (c *rawClient) expectClosed() {
	c.t.Helper()
	_ = c.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	var b [1]byte
	if n, err := c.nc.Read(b[:]); err == nil {
		c.t.Fatalf("connection still open (read %d bytes)", n)
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		c.t.Fatalf("connection still open after 20 s")
	}
}
