package nbd

import (
	"encoding/binary"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/pojntfx/go-nbd/pkg/protocol"

	"github.com/ctxmem/ctxmemd/tiering"
)

// op is one transmission request and, once handled, its encoded reply:
// hdr, then body (READ data), then tail go on the wire in that order.
type op struct {
	req     protocol.TransmissionRequestHeader
	payload []byte // WRITE data (pooled)
	data    []byte // READ buffer (pooled); body aliases it
	cost    int64  // budget bytes held
	pre     uint32 // error decided while reading the request (0 = none)
	preMsg  string

	hdr, body, tail []byte
	small           [64]byte // backing store for hdr of most replies
}

func (s *Server) getOp() *op {
	if v := s.ops.Get(); v != nil {
		return v.(*op)
	}
	return &op{}
}

func (s *Server) putOp(r *op) {
	*r = op{}
	s.ops.Put(r)
}

// OpName names an NBD command type for metrics: "read", "write",
// "flush", "trim", "write_zeroes", "block_status" (proto.md
// "Request types"), or "other".
func OpName(typ uint16) string {
	switch typ {
	case cmdRead:
		return "read"
	case cmdWrite:
		return "write"
	case cmdFlush:
		return "flush"
	case cmdTrim:
		return "trim"
	case cmdWriteZeroes:
		return "write_zeroes"
	case cmdBlockStatus:
		return "block_status"
	}
	return "other"
}

// allowedFlags returns the command flags valid for a request type.
func (c *conn) allowedFlags(typ uint16) uint16 {
	switch typ {
	case cmdRead:
		if c.sess.structured {
			return cmdFlagFUA | cmdFlagDF
		}
		return cmdFlagFUA
	case cmdWrite, cmdFlush, cmdTrim:
		return cmdFlagFUA
	case cmdWriteZeroes:
		return cmdFlagFUA | cmdFlagNoHole
	case cmdBlockStatus:
		return cmdFlagFUA | cmdFlagReqOne
	}
	return 0
}

// handle runs r against the backend and encodes its reply into r.
func (c *conn) handle(r *op) {
	t0 := time.Now()
	errno, msg := c.exec(r)
	if o := c.srv.opts.ObserveLatency; o != nil {
		o(OpName(r.req.Type), time.Since(t0))
	}
	st := &c.srv.st
	st.requests.Add(1)
	if errno != 0 {
		st.errors.Add(1)
	}
	if r.hdr != nil {
		return // exec encoded a READ or BLOCK_STATUS reply itself
	}
	h := r.req.Handle
	switch {
	case errno == 0:
		r.hdr = appendSimpleReply(r.small[:0], 0, h)
	case c.sess.structured:
		r.hdr = appendErrorChunk(r.small[:0], h, errno, msg, false, 0)
	default:
		r.hdr = appendSimpleReply(r.small[:0], errno, h)
	}
}

// exec checks and executes r. It returns the NBD error value (0 on
// success) and a message for structured error chunks. READ and
// BLOCK_STATUS encode their own replies.
func (c *conn) exec(r *op) (uint32, string) {
	q := &r.req
	e := c.sess.exp
	if r.pre != 0 {
		return r.pre, r.preMsg
	}
	switch q.Type {
	case cmdRead, cmdWrite, cmdFlush, cmdTrim, cmdWriteZeroes, cmdBlockStatus:
	default:
		return c.fail(r, errInval, fmt.Sprintf("unknown command %d", q.Type))
	}
	if bad := q.CommandFlags &^ c.allowedFlags(q.Type); bad != 0 {
		return c.fail(r, errInval, fmt.Sprintf("command flags %#x not valid for command %d", bad, q.Type))
	}
	writes := q.Type == cmdWrite || q.Type == cmdTrim || q.Type == cmdWriteZeroes
	if writes && e.ReadOnly {
		return c.fail(r, errPerm, "export is read-only")
	}
	if q.Type == cmdFlush {
		if e.ReadOnly {
			return 0, ""
		}
		return c.errno(c.srv.be.Flush(c.opCtx, e.id), "flush")
	}
	if q.Type == cmdRead && q.Length > MaxPayload {
		return c.fail(r, errInval, fmt.Sprintf("read of %d bytes exceeds the maximum payload %d", q.Length, MaxPayload))
	}
	size := uint64(e.Size)
	if q.Offset > size || uint64(q.Length) > size-q.Offset {
		code := errInval
		if writes {
			code = errNoSpc // proto.md: writes past the end SHOULD fail ENOSPC
		}
		return c.fail(r, code, fmt.Sprintf("offset %d length %d beyond the export size %d", q.Offset, q.Length, size))
	}
	if m := uint64(e.MinBlockSize); c.sess.align && m > 1 && (q.Offset%m != 0 || uint64(q.Length)%m != 0) {
		return c.fail(r, errInval, fmt.Sprintf("offset %d length %d not aligned to the minimum block size %d", q.Offset, q.Length, m))
	}
	off, n := int64(q.Offset), int64(q.Length)
	be, ctx, id := c.srv.be, c.opCtx, e.id
	var err error
	switch q.Type {
	case cmdRead:
		return c.readCmd(r)
	case cmdBlockStatus:
		return c.blockStatus(r)
	case cmdWrite:
		if n > 0 {
			_, err = be.WriteAt(ctx, id, r.payload, off)
			if err == nil {
				c.srv.st.bytesWritten.Add(n)
			}
		}
	case cmdTrim:
		if n > 0 {
			err = be.Discard(ctx, id, off, n)
		}
	case cmdWriteZeroes:
		if q.CommandFlags&cmdFlagNoHole == 0 {
			if n > 0 {
				err = be.Discard(ctx, id, off, n)
			}
			break
		}
		// NO_HOLE: the range must stay allocated, so write real zeros.
		for pos, end := off, off+n; pos < end && err == nil; {
			k := min(int64(len(c.srv.zeros)), end-pos)
			_, err = be.WriteAt(ctx, id, c.srv.zeros[:k], pos)
			pos += k
		}
	}
	if err == nil && q.CommandFlags&cmdFlagFUA != 0 {
		err = be.Flush(ctx, id)
	}
	return c.errno(err, commandName(q.Type))
}

// fail returns code and msg, logging client errors at debug level.
func (c *conn) fail(r *op, code uint32, msg string) (uint32, string) {
	c.log.Debug("request refused", "handle", r.req.Handle, "errno", code, "msg", msg)
	return code, msg
}

// errno maps a backend error to an NBD error value: ENOSPC for a full
// store (and EFBIG/EDQUOT, as the spec asks), ESHUTDOWN when the request was
// cancelled by shutdown, EIO otherwise (lost objects and failing tiers
// included). Backend errors are logged.
func (c *conn) errno(err error, what string) (uint32, string) {
	if err == nil {
		return 0, ""
	}
	code := errIO
	switch tiering.Errno(err) {
	case syscall.ENOSPC, syscall.EFBIG, syscall.EDQUOT:
		code = errNoSpc
	case syscall.EINTR:
		if c.opCtx.Err() != nil {
			code = errShutdown
		}
	case syscall.EINVAL:
		code = errInval
	}
	c.log.Warn("backend error", "export", c.sess.exp.Name, "op", what, "errno", code, "err", err)
	return code, fmt.Sprintf("%s: %v", what, err)
}

// readCmd executes a READ and encodes its reply: one OFFSET_DATA chunk with
// the DONE flag (so NBD_CMD_FLAG_DF always holds), or a simple reply with
// the data. On a backend error the bytes read before it go out as a data
// chunk followed by an ERROR_OFFSET chunk at the first failed byte
// (structured), or an error with no payload (simple).
func (c *conn) readCmd(r *op) (uint32, string) {
	q := &r.req
	h, n := q.Handle, int(q.Length)
	structured := c.sess.structured
	if n == 0 {
		if structured {
			r.hdr = appendChunkHeader(r.small[:0], replyFlagDone, replyTypeNone, h, 0)
		} else {
			r.hdr = appendSimpleReply(r.small[:0], 0, h)
		}
		return 0, ""
	}
	r.data = c.srv.bufs.get(n)
	got, err := c.srv.be.ReadAt(c.opCtx, c.sess.exp.id, r.data, int64(q.Offset))
	if err == nil && got < n {
		clear(r.data[got:]) // the object ends early: cannot happen for a sized export
		got = n
	}
	if err == nil {
		c.srv.st.bytesRead.Add(int64(n))
		r.body = r.data
		if structured {
			r.hdr = appendChunkHeader(r.small[:0], replyFlagDone, replyTypeOffsetData, h, uint32(8+n))
			r.hdr = binary.BigEndian.AppendUint64(r.hdr, q.Offset)
		} else {
			r.hdr = appendSimpleReply(r.small[:0], 0, h)
		}
		return 0, ""
	}
	code, msg := c.errno(err, "read")
	switch {
	case !structured:
		r.hdr = appendSimpleReply(r.small[:0], code, h)
	case got > 0:
		r.hdr = appendChunkHeader(r.small[:0], 0, replyTypeOffsetData, h, uint32(8+got))
		r.hdr = binary.BigEndian.AppendUint64(r.hdr, q.Offset)
		r.body = r.data[:got]
		r.tail = appendErrorChunk(nil, h, code, msg, true, q.Offset+uint64(got))
	default:
		r.hdr = appendErrorChunk(r.small[:0], h, code, msg, true, q.Offset)
	}
	return code, msg
}

// maxExtents bounds the descriptors of one BLOCK_STATUS reply (the spec
// lets a server describe less than the requested range).
const maxExtents = 1024

// blockStatus answers BLOCK_STATUS for base:allocation: never-written or
// discarded blocks are NBD_STATE_HOLE|NBD_STATE_ZERO, others 0.
func (c *conn) blockStatus(r *op) (uint32, string) {
	q := &r.req
	if !c.sess.structured || !c.sess.metaAlloc {
		return c.fail(r, errInval, "no metadata context negotiated")
	}
	if q.Length == 0 {
		return c.fail(r, errInval, "zero-length block status")
	}
	e := c.sess.exp
	tiers, err := c.srv.be.BlockTiers(e.id)
	if err != nil {
		return c.errno(err, "block status")
	}
	limit := maxExtents
	if q.CommandFlags&cmdFlagReqOne != 0 {
		limit = 1
	}
	bs := uint64(e.bs)
	pos, end := q.Offset, q.Offset+uint64(q.Length)
	type extent struct{ n, flags uint32 }
	var ext []extent
	for pos < end {
		idx := pos / bs
		st := uint32(0)
		if idx >= uint64(len(tiers)) || tiers[idx] == tiering.TierHole {
			st = stateHole | stateZero
		}
		next := min((idx+1)*bs, end)
		if k := len(ext); k > 0 && ext[k-1].flags == st {
			ext[k-1].n += uint32(next - pos)
		} else {
			if k == limit {
				break
			}
			ext = append(ext, extent{uint32(next - pos), st})
		}
		pos = next
	}
	b := appendChunkHeader(r.small[:0], replyFlagDone, replyTypeBlockStatus, q.Handle, uint32(4+8*len(ext)))
	b = binary.BigEndian.AppendUint32(b, metaBaseAllocationID)
	for _, x := range ext {
		b = binary.BigEndian.AppendUint32(b, x.n)
		b = binary.BigEndian.AppendUint32(b, x.flags)
	}
	r.hdr = b
	return 0, ""
}

func commandName(t uint16) string {
	if n := OpName(t); n != "other" {
		return strings.ReplaceAll(n, "_", "-")
	}
	return fmt.Sprintf("command %d", t)
}
