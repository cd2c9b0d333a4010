package nbd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/pojntfx/go-nbd/pkg/protocol"
)

// Option haggling (proto.md "Handshake", fixed newstyle, plus the INFO,
// STRUCTURED_REPLY and metadata-context extensions that are now part of
// the specification).

const (
	// maxOptionData is the largest option payload parsed (bytes); larger
	// ones are read, dropped and answered NBD_REP_ERR_TOO_BIG.
	maxOptionData = 64 << 10
	// maxOptionDiscard is the largest option payload dropped to keep the
	// stream; past it the connection is closed.
	maxOptionDiscard = 16 << 20
	// maxOptions bounds the options of one handshake (a client looping in
	// option haggling is cut off).
	maxOptions = 4096
)

// errAbort ends a handshake the client aborted (NBD_OPT_ABORT).
var errAbort = errors.New("client aborted negotiation")

// session is what a handshake negotiated for the transmission phase.
type session struct {
	exp        *export
	structured bool // NBD_OPT_STRUCTURED_REPLY acknowledged
	metaAlloc  bool // base:allocation selected for exp
	align      bool // client asked for NBD_INFO_BLOCK_SIZE: enforce alignment
}

// handshake runs the fixed newstyle negotiation on c and returns the
// session the client chose, errAbort, or an I/O or protocol error (the
// caller closes the connection).
func (c *conn) handshake() (*session, error) {
	w := c.bw
	var hello [18]byte
	binary.BigEndian.PutUint64(hello[0:], protocol.NEGOTIATION_MAGIC_OLDSTYLE) // "NBDMAGIC"
	binary.BigEndian.PutUint64(hello[8:], protocol.NEGOTIATION_MAGIC_OPTION)   // "IHAVEOPT"
	binary.BigEndian.PutUint16(hello[16:], flagFixedNewstyle|flagNoZeroes)
	if _, err := w.Write(hello[:]); err != nil {
		return nil, err
	}
	if err := w.Flush(); err != nil {
		return nil, err
	}
	var cf [4]byte
	if _, err := io.ReadFull(c.br, cf[:]); err != nil {
		return nil, err
	}
	clientFlags := binary.BigEndian.Uint32(cf[:])
	if clientFlags&^(clientFixedNewstyle|clientNoZeroes) != 0 {
		return nil, fmt.Errorf("unknown client flags %#x", clientFlags)
	}
	noZeroes := clientFlags&clientNoZeroes != 0

	var (
		structured bool
		metaFor    string // export name base:allocation was selected for
		metaSel    bool
	)
	for n := 0; n < maxOptions; n++ {
		var oh [optionHeaderLen]byte
		if _, err := io.ReadFull(c.br, oh[:]); err != nil {
			return nil, err
		}
		if binary.BigEndian.Uint64(oh[0:]) != protocol.NEGOTIATION_MAGIC_OPTION {
			return nil, errors.New("bad option magic")
		}
		opt := binary.BigEndian.Uint32(oh[8:])
		length := binary.BigEndian.Uint32(oh[12:])
		if length > maxOptionData {
			if opt == optExportName || length > maxOptionDiscard {
				return nil, fmt.Errorf("option %d: %d bytes of data", opt, length)
			}
			if _, err := c.br.Discard(int(length)); err != nil {
				return nil, err
			}
			if err := c.optReply(opt, repErrTooBig, []byte("option data too large")); err != nil {
				return nil, err
			}
			continue
		}
		data := make([]byte, length)
		if _, err := io.ReadFull(c.br, data); err != nil {
			return nil, err
		}

		switch opt {
		case optExportName:
			e := c.srv.lookup(string(data))
			if e == nil {
				// The spec leaves no way to refuse but closing.
				return nil, fmt.Errorf("NBD_OPT_EXPORT_NAME: unknown export %q", data)
			}
			var b []byte
			b = binary.BigEndian.AppendUint64(b, uint64(e.Size))
			b = binary.BigEndian.AppendUint16(b, e.flags(structured))
			if !noZeroes {
				b = append(b, make([]byte, 124)...)
			}
			if _, err := w.Write(b); err != nil {
				return nil, err
			}
			if err := w.Flush(); err != nil {
				return nil, err
			}
			return &session{exp: e, structured: structured, metaAlloc: metaSel && metaFor == e.Name}, nil

		case optAbort:
			_ = c.optReply(opt, repAck, nil) // the client may already be gone
			return nil, errAbort

		case optList:
			if len(data) != 0 {
				if err := c.optReply(opt, repErrInvalid, []byte("NBD_OPT_LIST takes no data")); err != nil {
					return nil, err
				}
				continue
			}
			for _, e := range c.srv.exports {
				b := binary.BigEndian.AppendUint32(nil, uint32(len(e.Name)))
				b = append(b, e.Name...)
				if err := c.optReplyNoFlush(opt, repServer, b); err != nil {
					return nil, err
				}
			}
			if err := c.optReply(opt, repAck, nil); err != nil {
				return nil, err
			}

		case optInfo, optGo:
			sess, err := c.infoOrGo(opt, data, structured, metaFor, metaSel)
			if err != nil {
				return nil, err
			}
			if sess != nil {
				return sess, nil
			}

		case optStructuredReply:
			if len(data) != 0 {
				if err := c.optReply(opt, repErrInvalid, []byte("NBD_OPT_STRUCTURED_REPLY takes no data")); err != nil {
					return nil, err
				}
				continue
			}
			structured = true
			if err := c.optReply(opt, repAck, nil); err != nil {
				return nil, err
			}

		case optListMetaContext, optSetMetaContext:
			name, sel, ok, err := c.metaContext(opt, data, structured)
			if err != nil {
				return nil, err
			}
			if ok && opt == optSetMetaContext {
				metaFor, metaSel = name, sel
			}

		case optStartTLS:
			if err := c.optReply(opt, repErrUnsup, []byte("TLS is not supported; use a unix socket or loopback")); err != nil {
				return nil, err
			}

		default:
			if err := c.optReply(opt, repErrUnsup, nil); err != nil {
				return nil, err
			}
		}
	}
	return nil, fmt.Errorf("more than %d options", maxOptions)
}

// infoOrGo answers NBD_OPT_INFO and NBD_OPT_GO. For a successful GO it
// returns the session; for INFO, or a GO answered with an error, it
// returns nil, nil and haggling goes on.
func (c *conn) infoOrGo(opt uint32, data []byte, structured bool, metaFor string, metaSel bool) (*session, error) {
	// Data: u32 name length, name, u16 number of info requests, u16 each.
	if len(data) < 6 {
		return nil, c.optReply(opt, repErrInvalid, []byte("option data too short"))
	}
	nlen := binary.BigEndian.Uint32(data)
	if uint64(nlen) > uint64(len(data)-6) {
		return nil, c.optReply(opt, repErrInvalid, []byte("export name length exceeds option data"))
	}
	name := string(data[4 : 4+nlen])
	rest := data[4+nlen:]
	nreq := int(binary.BigEndian.Uint16(rest))
	if len(rest) != 2+2*nreq {
		return nil, c.optReply(opt, repErrInvalid, []byte("information request count does not match option length"))
	}
	var wantName, wantDesc, wantBlock bool
	for i := 0; i < nreq; i++ {
		switch binary.BigEndian.Uint16(rest[2+2*i:]) {
		case infoName:
			wantName = true
		case infoDescription:
			wantDesc = true
		case infoBlockSize:
			wantBlock = true
		}
	}
	e := c.srv.lookup(name)
	if e == nil {
		return nil, c.optReply(opt, repErrUnknown, []byte(fmt.Sprintf("unknown export %q", name)))
	}
	b := binary.BigEndian.AppendUint16(nil, infoExport)
	b = binary.BigEndian.AppendUint64(b, uint64(e.Size))
	b = binary.BigEndian.AppendUint16(b, e.flags(structured))
	if err := c.optReplyNoFlush(opt, repInfo, b); err != nil {
		return nil, err
	}
	if wantName {
		b = binary.BigEndian.AppendUint16(nil, infoName)
		if err := c.optReplyNoFlush(opt, repInfo, append(b, e.Name...)); err != nil {
			return nil, err
		}
	}
	if wantDesc && e.Description != "" {
		b = binary.BigEndian.AppendUint16(nil, infoDescription)
		if err := c.optReplyNoFlush(opt, repInfo, append(b, e.Description...)); err != nil {
			return nil, err
		}
	}
	// Block sizes are sent whether asked for or not (the spec allows it);
	// they are enforced only for clients that asked.
	b = binary.BigEndian.AppendUint16(nil, infoBlockSize)
	b = binary.BigEndian.AppendUint32(b, uint32(e.MinBlockSize))
	b = binary.BigEndian.AppendUint32(b, e.preferredBlockSize())
	b = binary.BigEndian.AppendUint32(b, MaxPayload)
	if err := c.optReplyNoFlush(opt, repInfo, b); err != nil {
		return nil, err
	}
	if err := c.optReply(opt, repAck, nil); err != nil {
		return nil, err
	}
	if opt == optInfo {
		return nil, nil
	}
	return &session{exp: e, structured: structured, metaAlloc: metaSel && metaFor == e.Name, align: wantBlock}, nil
}

// metaContext answers NBD_OPT_LIST_META_CONTEXT and SET_META_CONTEXT. For
// a valid request it returns the export name and whether base:allocation
// is selected, with ok set; ok is false when an error reply was sent.
func (c *conn) metaContext(opt uint32, data []byte, structured bool) (name string, sel, ok bool, err error) {
	if !structured {
		return "", false, false, c.optReply(opt, repErrInvalid, []byte("negotiate structured replies first"))
	}
	// Data: u32 name length, name, u32 query count, then u32 length +
	// query string for each.
	bad := func(msg string) (string, bool, bool, error) {
		return "", false, false, c.optReply(opt, repErrInvalid, []byte(msg))
	}
	if len(data) < 8 {
		return bad("option data too short")
	}
	nlen := binary.BigEndian.Uint32(data)
	if uint64(nlen) > uint64(len(data)-8) {
		return bad("export name length exceeds option data")
	}
	name = string(data[4 : 4+nlen])
	rest := data[4+nlen:]
	nq := binary.BigEndian.Uint32(rest)
	rest = rest[4:]
	var queries []string
	for i := uint32(0); i < nq; i++ {
		if len(rest) < 4 {
			return bad("query count exceeds option data")
		}
		ql := binary.BigEndian.Uint32(rest)
		if uint64(ql) > uint64(len(rest)-4) {
			return bad("query length exceeds option data")
		}
		queries = append(queries, string(rest[4:4+ql]))
		rest = rest[4+ql:]
	}
	if len(rest) != 0 {
		return bad("trailing bytes after the queries")
	}
	if c.srv.lookup(name) == nil {
		return "", false, false, c.optReply(opt, repErrUnknown, []byte(fmt.Sprintf("unknown export %q", name)))
	}
	match := opt == optListMetaContext && nq == 0
	for _, q := range queries {
		if q == metaBaseAllocation || (opt == optListMetaContext && q == "base:") {
			match = true
		}
	}
	if match {
		id := metaBaseAllocationID
		if opt == optListMetaContext {
			id = 0 // reserved in list replies
		}
		b := binary.BigEndian.AppendUint32(nil, id)
		if err := c.optReplyNoFlush(opt, repMetaContext, append(b, metaBaseAllocation...)); err != nil {
			return "", false, false, err
		}
	}
	if err := c.optReply(opt, repAck, nil); err != nil {
		return "", false, false, err
	}
	return name, match, true, nil
}

// optReply sends one option reply and flushes.
func (c *conn) optReply(opt, typ uint32, data []byte) error {
	if err := c.optReplyNoFlush(opt, typ, data); err != nil {
		return err
	}
	return c.bw.Flush()
}

func (c *conn) optReplyNoFlush(opt, typ uint32, data []byte) error {
	b := appendOptionReply(make([]byte, 0, optionReplyLen+len(data)), opt, typ, uint32(len(data)))
	_, err := c.bw.Write(append(b, data...))
	return err
}
