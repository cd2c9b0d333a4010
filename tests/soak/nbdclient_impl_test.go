package soak

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// nbdClient is a deliberately small NBD client: fixed newstyle handshake
// with NBD_OPT_EXPORT_NAME, simple replies, one request in flight. One
// request at a time is what the soak wants: when a reply arrives, the soak
// knows exactly which write or flush the server acknowledged. Every
// request has a deadline, so a wedged server is reported as a hang instead
// of blocking the soak.
type nbdClient struct {
	c       net.Conn
	size    int64
	flags   uint16
	handle  uint64
	timeout time.Duration
}

const (
	nbdMagicInit    = 0x4e42444d41474943 // "NBDMAGIC"
	nbdMagicOpt     = 0x49484156454f5054 // "IHAVEOPT"
	nbdMagicRequest = 0x25609513
	nbdMagicReply   = 0x67446698

	nbdFlagFixedNewstyle = 1 << 0
	nbdFlagNoZeroes      = 1 << 1
	nbdOptExportName     = 1

	nbdCmdRead        = 0
	nbdCmdWrite       = 1
	nbdCmdDisc        = 2
	nbdCmdFlush       = 3
	nbdCmdTrim        = 4
	nbdCmdWriteZeroes = 6

	nbdCmdFlagFUA    = 1 << 0
	nbdCmdFlagNoHole = 1 << 1 // WRITE_ZEROES: the range must stay allocated

	// transmission flags (export info)
	nbdTFlagSendTrim        = 1 << 5
	nbdTFlagSendWriteZeroes = 1 << 6
)

// errNBDReply is an error value the server returned in a reply.
type errNBDReply struct {
	op    string
	errno uint32
}

func (e errNBDReply) Error() string { return fmt.Sprintf("nbd %s: server error %d", e.op, e.errno) }

// dialNBD connects to the unix socket sock and opens export name.
func dialNBD(sock, name string, timeout time.Duration) (*nbdClient, error) {
	c, err := net.DialTimeout("unix", sock, timeout)
	if err != nil {
		return nil, err
	}
	cl := &nbdClient{c: c, timeout: timeout}
	if err := cl.handshake(name); err != nil {
		c.Close()
		return nil, fmt.Errorf("nbd handshake: %w", err)
	}
	return cl, nil
}

func (cl *nbdClient) handshake(name string) error {
	_ = cl.c.SetDeadline(time.Now().Add(cl.timeout))
	var hello [18]byte
	if _, err := io.ReadFull(cl.c, hello[:]); err != nil {
		return err
	}
	if binary.BigEndian.Uint64(hello[0:]) != nbdMagicInit || binary.BigEndian.Uint64(hello[8:]) != nbdMagicOpt {
		return errors.New("not a fixed newstyle NBD server")
	}
	sflags := binary.BigEndian.Uint16(hello[16:])
	cflags := uint32(nbdFlagFixedNewstyle)
	if sflags&nbdFlagNoZeroes != 0 {
		cflags |= nbdFlagNoZeroes
	}
	b := binary.BigEndian.AppendUint32(nil, cflags)
	b = binary.BigEndian.AppendUint64(b, nbdMagicOpt)
	b = binary.BigEndian.AppendUint32(b, nbdOptExportName)
	b = binary.BigEndian.AppendUint32(b, uint32(len(name)))
	b = append(b, name...)
	if _, err := cl.c.Write(b); err != nil {
		return err
	}
	var info [10]byte
	if _, err := io.ReadFull(cl.c, info[:]); err != nil {
		return fmt.Errorf("export %q: %w", name, err)
	}
	cl.size = int64(binary.BigEndian.Uint64(info[0:]))
	cl.flags = binary.BigEndian.Uint16(info[8:])
	if cflags&nbdFlagNoZeroes == 0 {
		var pad [124]byte
		if _, err := io.ReadFull(cl.c, pad[:]); err != nil {
			return err
		}
	}
	return cl.c.SetDeadline(time.Time{})
}

// do sends one request (with payload for writes) and waits for its reply;
// for reads, the reply's data lands in buf.
func (cl *nbdClient) do(op string, typ, flags uint16, off uint64, length uint32, payload, buf []byte) error {
	cl.handle++
	_ = cl.c.SetDeadline(time.Now().Add(cl.timeout))
	req := make([]byte, 28, 28+len(payload))
	binary.BigEndian.PutUint32(req[0:], nbdMagicRequest)
	binary.BigEndian.PutUint16(req[4:], flags)
	binary.BigEndian.PutUint16(req[6:], typ)
	binary.BigEndian.PutUint64(req[8:], cl.handle)
	binary.BigEndian.PutUint64(req[16:], off)
	binary.BigEndian.PutUint32(req[24:], length)
	req = append(req, payload...)
	if _, err := cl.c.Write(req); err != nil {
		return fmt.Errorf("nbd %s send: %w", op, err)
	}
	var rep [16]byte
	if _, err := io.ReadFull(cl.c, rep[:]); err != nil {
		return fmt.Errorf("nbd %s reply: %w", op, err)
	}
	if binary.BigEndian.Uint32(rep[0:]) != nbdMagicReply {
		return fmt.Errorf("nbd %s: bad reply magic %#x", op, binary.BigEndian.Uint32(rep[0:]))
	}
	if h := binary.BigEndian.Uint64(rep[8:]); h != cl.handle {
		return fmt.Errorf("nbd %s: reply for handle %d, want %d", op, h, cl.handle)
	}
	if e := binary.BigEndian.Uint32(rep[4:]); e != 0 {
		return errNBDReply{op, e}
	}
	if typ == nbdCmdRead {
		if _, err := io.ReadFull(cl.c, buf[:length]); err != nil {
			return fmt.Errorf("nbd read data: %w", err)
		}
	}
	return nil
}

func (cl *nbdClient) ReadAt(buf []byte, off int64) error {
	return cl.do("read", nbdCmdRead, 0, uint64(off), uint32(len(buf)), nil, buf)
}

func (cl *nbdClient) WriteAt(p []byte, off int64, fua bool) error {
	var f uint16
	if fua {
		f = nbdCmdFlagFUA
	}
	return cl.do("write", nbdCmdWrite, f, uint64(off), uint32(len(p)), p, nil)
}

// Trim sends NBD_CMD_TRIM for [off, off+length) (no payload).
func (cl *nbdClient) Trim(off int64, length uint32, fua bool) error {
	if cl.flags&nbdTFlagSendTrim == 0 {
		return errors.New("nbd trim: the server does not advertise NBD_FLAG_SEND_TRIM")
	}
	var f uint16
	if fua {
		f = nbdCmdFlagFUA
	}
	return cl.do("trim", nbdCmdTrim, f, uint64(off), length, nil, nil)
}

// WriteZeroes sends NBD_CMD_WRITE_ZEROES for [off, off+length) (no
// payload); noHole asks the server to keep the range allocated.
func (cl *nbdClient) WriteZeroes(off int64, length uint32, fua, noHole bool) error {
	if cl.flags&nbdTFlagSendWriteZeroes == 0 {
		return errors.New("nbd write-zeroes: the server does not advertise NBD_FLAG_SEND_WRITE_ZEROES")
	}
	var f uint16
	if fua {
		f |= nbdCmdFlagFUA
	}
	if noHole {
		f |= nbdCmdFlagNoHole
	}
	return cl.do("write-zeroes", nbdCmdWriteZeroes, f, uint64(off), length, nil, nil)
}

func (cl *nbdClient) Flush() error { return cl.do("flush", nbdCmdFlush, 0, 0, 0, nil, nil) }

// Close sends NBD_CMD_DISC (best effort) and closes the socket.
func (cl *nbdClient) Close() {
	_ = cl.c.SetDeadline(time.Now().Add(time.Second))
	req := make([]byte, 28)
	binary.BigEndian.PutUint32(req[0:], nbdMagicRequest)
	binary.BigEndian.PutUint16(req[6:], nbdCmdDisc)
	_, _ = cl.c.Write(req)
	cl.c.Close()
}
