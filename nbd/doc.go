// Package nbd is ctxmemd's NBD block-device front end: it serves exports
// whose bytes are objects of the tiering core (of durability class
// tiering.DurabilityDevice, labelled tiering.KindNBD), over the
// NBD protocol as proto.md of the NetworkBlockDevice project defines it,
// to userspace clients (libnbd's nbdinfo/nbdcopy/nbdsh, qemu, fio) and to
// the kernel (/dev/nbdN, see Attach).
//
// # Using it
//
//	srv, err := nbd.NewServer(ctx, store, []nbd.Export{{Name: "default", Size: 1 << 30}},
//		nbd.Options{StateDir: dataDir})
//	ln, err := nbd.Listen("unix:///run/ctxmemd/nbd.sock") // or tcp://127.0.0.1:10809
//	err = srv.Serve(ctx, ln) // until ctx ends; once per listener
//
// NewServer binds each export to its object (the name → object id map is
// StateFile in Options.StateDir, kept by package catalog), so a restart
// serves the same bytes.
//
// # Protocol
//
// Handshake: fixed newstyle (clients without the fixed-newstyle flag are
// served too), NBD_OPT_EXPORT_NAME, GO, INFO (export size and flags, name,
// description, block sizes: minimum Export.MinBlockSize, preferred the
// object's block size, maximum MaxPayload), LIST, ABORT, STRUCTURED_REPLY,
// LIST_META_CONTEXT and SET_META_CONTEXT for "base:allocation". STARTTLS and
// extended headers are answered NBD_REP_ERR_UNSUP.
//
// Transmission: READ, WRITE, FLUSH, TRIM, WRITE_ZEROES (NO_HOLE writes real
// zeros; otherwise the range is discarded and reads as a hole), BLOCK_STATUS
// for base:allocation (never-written or discarded blocks are HOLE|ZERO),
// DISC; the FUA flag on any command; DF on READ (a READ is always one data
// chunk). Flags advertised: HAS_FLAGS, SEND_FLUSH, SEND_FUA, SEND_TRIM,
// SEND_WRITE_ZEROES, SEND_DF (with structured replies), CAN_MULTI_CONN,
// READ_ONLY for read-only exports (which advertise no write features).
//
// Many requests run at once per connection and replies go out as they
// complete (see transmit.go for how requests are run and reply.go for how
// replies are written). Every connection to an export shares the one
// object, so a FLUSH (or FUA) on any connection covers writes answered on
// all of them: that is what CAN_MULTI_CONN promises.
//
// # Durability
//
// A reply to WRITE means the bytes are in G2 (DRAM) and visible to every
// connection. FLUSH and FUA return once the tiering core has written every
// dirty block of the export below G2 (G3, else G4) and recorded the object
// clean, so acknowledged flushes survive a kill -9 of the daemon (and a
// power cut where G3 syncs). Writes not yet flushed when the daemon dies
// may be lost.
//
// # Errors
//
// Bad input never breaks the stream or the daemon: a request past the end
// of the export gets EINVAL (ENOSPC for WRITE, TRIM and WRITE_ZEROES, as the
// spec asks); offsets or lengths not aligned to the minimum block size get
// EINVAL when the client asked for block sizes; READ or WRITE longer than
// MaxPayload gets EINVAL (a WRITE's payload is read and dropped, exactly
// its length; commands without payload read nothing more); writes to a
// read-only export get EPERM; an unknown command or flag gets EINVAL; a
// backend failure gets EIO (ENOSPC for a full store) in the reply. With
// structured replies errors are NBD_REPLY_TYPE_ERROR chunks with a message,
// or ERROR_OFFSET for READ (after the bytes read before the failure). Only
// a bad request magic (the stream cannot be resynchronised) closes the
// connection. A client that disconnects mid-request loses only that
// request: a WRITE whose payload was cut short is not applied.
package nbd
