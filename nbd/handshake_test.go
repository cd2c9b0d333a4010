package nbd

import (
	"encoding/binary"
	"strings"
	"testing"
)

func twoExports() []Export {
	return []Export{
		{Name: "rw", Size: 8 << 20, BlockSize: 16 << 10, Description: "read-write disk"},
		{Name: "ro", Size: 4 << 20, ReadOnly: true, MinBlockSize: 1},
	}
}

func TestHandshakeOptions(t *testing.T) {
	st := newStore(t, 64<<20)
	r := serve(t, st, st.dir, twoExports(), Options{})
	c := dialRaw(t, r.sock, clientFixedNewstyle|clientNoZeroes)

	// LIST: one SERVER reply per export, in configuration order, then ACK.
	reps := c.opt(optList, nil)
	var names []string
	for _, rep := range reps[:len(reps)-1] {
		if rep.typ != repServer {
			t.Fatalf("LIST reply type %#x", rep.typ)
		}
		n := binary.BigEndian.Uint32(rep.data)
		names = append(names, string(rep.data[4:4+n]))
	}
	if got := strings.Join(names, ","); got != "rw,ro" || reps[len(reps)-1].typ != repAck {
		t.Fatalf("LIST = %q (final %#x)", got, reps[len(reps)-1].typ)
	}
	if reps := c.opt(optList, []byte("x")); reps[0].typ != repErrInvalid {
		t.Fatalf("LIST with data: %#x, want ERR_INVALID", reps[0].typ)
	}

	// INFO for an unknown export, malformed INFO, unknown option, TLS.
	if reps := c.opt(optInfo, infoData("nope")); reps[0].typ != repErrUnknown {
		t.Fatalf("INFO unknown export: %#x", reps[0].typ)
	}
	bad := infoData("rw", infoName)
	if reps := c.opt(optInfo, bad[:len(bad)-1]); reps[0].typ != repErrInvalid {
		t.Fatalf("truncated INFO: %#x", reps[0].typ)
	}
	if reps := c.opt(optInfo, binary.BigEndian.AppendUint32(nil, 1000)); reps[0].typ != repErrInvalid {
		t.Fatalf("INFO name length past data: %#x", reps[0].typ)
	}
	if reps := c.opt(99, []byte("whatever")); reps[0].typ != repErrUnsup {
		t.Fatalf("unknown option: %#x", reps[0].typ)
	}
	if reps := c.opt(optStartTLS, nil); reps[0].typ != repErrUnsup {
		t.Fatalf("STARTTLS: %#x", reps[0].typ)
	}
	// Oversized option data is read and dropped; the stream stays usable.
	if reps := c.opt(99, make([]byte, maxOptionData+1)); reps[0].typ != repErrTooBig {
		t.Fatalf("huge option: %#x", reps[0].typ)
	}

	// Meta contexts need structured replies first.
	if reps := c.opt(optSetMetaContext, metaData("rw", metaBaseAllocation)); reps[0].typ != repErrInvalid {
		t.Fatalf("SET_META_CONTEXT before STRUCTURED_REPLY: %#x", reps[0].typ)
	}
	if reps := c.opt(optStructuredReply, []byte{1}); reps[0].typ != repErrInvalid {
		t.Fatalf("STRUCTURED_REPLY with data: %#x", reps[0].typ)
	}
	if reps := c.opt(optStructuredReply, nil); reps[0].typ != repAck {
		t.Fatalf("STRUCTURED_REPLY: %#x", reps[0].typ)
	}
	reps = c.opt(optListMetaContext, metaData("rw"))
	if len(reps) != 2 || reps[0].typ != repMetaContext || string(reps[0].data[4:]) != metaBaseAllocation {
		t.Fatalf("LIST_META_CONTEXT: %+v", reps)
	}
	if reps := c.opt(optListMetaContext, metaData("rw", "x-other:thing")); len(reps) != 1 || reps[0].typ != repAck {
		t.Fatalf("LIST_META_CONTEXT unknown namespace: %+v", reps)
	}
	if reps := c.opt(optSetMetaContext, metaData("nope", metaBaseAllocation)); reps[0].typ != repErrUnknown {
		t.Fatalf("SET_META_CONTEXT unknown export: %#x", reps[0].typ)
	}
	reps = c.opt(optSetMetaContext, metaData("rw", metaBaseAllocation))
	if len(reps) != 2 || reps[0].typ != repMetaContext || binary.BigEndian.Uint32(reps[0].data) != metaBaseAllocationID {
		t.Fatalf("SET_META_CONTEXT: %+v", reps)
	}

	// INFO reports size, flags, name, description and block sizes.
	reps = c.opt(optInfo, infoData("rw", infoName, infoDescription, infoBlockSize))
	got := map[uint16][]byte{}
	for _, rep := range reps[:len(reps)-1] {
		got[binary.BigEndian.Uint16(rep.data)] = rep.data[2:]
	}
	if sz := binary.BigEndian.Uint64(got[infoExport]); sz != 8<<20 {
		t.Errorf("INFO size %d", sz)
	}
	wantFlags := tflagHasFlags | tflagSendFlush | tflagSendFUA | tflagSendTrim | tflagSendWriteZeroes | tflagSendDF | tflagCanMultiConn
	if f := binary.BigEndian.Uint16(got[infoExport][8:]); f != wantFlags {
		t.Errorf("INFO flags %#x, want %#x", f, wantFlags)
	}
	if string(got[infoName]) != "rw" || string(got[infoDescription]) != "read-write disk" {
		t.Errorf("INFO name %q description %q", got[infoName], got[infoDescription])
	}
	bs := got[infoBlockSize]
	if min, pref, max := binary.BigEndian.Uint32(bs), binary.BigEndian.Uint32(bs[4:]), binary.BigEndian.Uint32(bs[8:]); min != 512 || pref != 16<<10 || max != MaxPayload {
		t.Errorf("block sizes %d/%d/%d", min, pref, max)
	}

	// GO to the read-only export: READ_ONLY set, no write features.
	c.goExport("ro", true)
	if want := tflagHasFlags | tflagReadOnly | tflagSendFlush | tflagSendDF | tflagCanMultiConn; c.flags != want {
		t.Fatalf("ro flags %#x, want %#x", c.flags, want)
	}
	if c.blocks[0] != 1 || c.size != 4<<20 {
		t.Fatalf("ro min block %d size %d", c.blocks[0], c.size)
	}
	// The meta context was selected for "rw", not "ro": BLOCK_STATUS fails.
	if rep := c.do(cmdBlockStatus, 0, 0, 4096, nil); rep.errno != errInval {
		t.Fatalf("BLOCK_STATUS without a context for this export: errno %d", rep.errno)
	}
	if rep := c.do(cmdRead, 0, 0, 4096, nil); rep.errno != 0 {
		t.Fatalf("read after failed BLOCK_STATUS: errno %d", rep.errno)
	}
}

func TestHandshakeExportNameAndAbort(t *testing.T) {
	st := newStore(t, 64<<20)
	r := serve(t, st, st.dir, twoExports(), Options{})

	// NBD_OPT_EXPORT_NAME without NO_ZEROES: size, flags, 124 zero bytes.
	c := dialRaw(t, r.sock, clientFixedNewstyle)
	c.sendOpt(optExportName, []byte("rw"))
	var b [8 + 2 + 124]byte
	c.readFull(b[:])
	if binary.BigEndian.Uint64(b[:]) != 8<<20 || strings.Trim(string(b[10:]), "\x00") != "" {
		t.Fatalf("EXPORT_NAME reply % x", b[:10])
	}
	if f := binary.BigEndian.Uint16(b[8:]); f&tflagSendDF != 0 || f&tflagSendFlush == 0 {
		t.Fatalf("EXPORT_NAME flags %#x (no structured replies negotiated: no DF)", f)
	}
	// Simple replies; no alignment enforced (the client never asked).
	data := pattern(1, 100)
	if rep := c.do(cmdWrite, 0, 3, 100, data); rep.errno != 0 {
		t.Fatalf("unaligned write: %d", rep.errno)
	}
	if rep := c.do(cmdRead, 0, 3, 100, nil); rep.errno != 0 || string(rep.data) != string(data) {
		t.Fatalf("read back: errno %d", rep.errno)
	}
	// A read error with simple replies: an error header and no payload.
	if rep := c.do(cmdRead, 0, 8<<20, 1, nil); rep.errno != errInval || rep.data != nil {
		t.Fatalf("read past end: %+v", rep)
	}
	if rep := c.do(cmdRead, 0, 0, 1, nil); rep.errno != 0 || len(rep.data) != 1 {
		t.Fatalf("read after error: %+v", rep)
	}

	// The empty name selects the first export; unknown names close.
	c = dialRaw(t, r.sock, clientFixedNewstyle|clientNoZeroes)
	c.sendOpt(optExportName, nil)
	var s [10]byte
	c.readFull(s[:])
	if binary.BigEndian.Uint64(s[:]) != 8<<20 {
		t.Fatalf("default export size %d", binary.BigEndian.Uint64(s[:]))
	}
	c = dialRaw(t, r.sock, clientFixedNewstyle|clientNoZeroes)
	c.sendOpt(optExportName, []byte("nope"))
	c.expectClosed()

	// ABORT is acknowledged, then the server closes.
	c = dialRaw(t, r.sock, clientFixedNewstyle)
	if reps := c.opt(optAbort, nil); reps[0].typ != repAck {
		t.Fatalf("ABORT: %#x", reps[0].typ)
	}
	c.expectClosed()

	// Unknown client flags and bad option magic close the connection.
	c = dialRaw(t, r.sock, 1<<7)
	c.expectClosed()
	c = dialRaw(t, r.sock, clientFixedNewstyle)
	c.write(make([]byte, 16))
	c.expectClosed()

	// A client that does not set FIXED_NEWSTYLE (like go-nbd's) may GO.
	c = dialRaw(t, r.sock, 0)
	c.goExport("rw", false)
	if c.size != 8<<20 {
		t.Fatalf("GO without fixed-newstyle flag: size %d", c.size)
	}
}
