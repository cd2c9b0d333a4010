package fusefs

import (
	"bytes"
	"path/filepath"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ctxmem/ctxmemd/internal/testenv"
)

// iocb and ioEvent mirror struct iocb and struct io_event of
// <linux/aio_abi.h> (little-endian layout).
type iocb struct {
	data      uint64
	key       uint32
	rwFlags   uint32
	opcode    uint16
	reqprio   int16
	fd        uint32
	buf       uint64
	nbytes    uint64
	offset    int64
	reserved2 uint64
	flags     uint32
	resfd     uint32
}

type ioEvent struct {
	data, obj uint64
	res, res2 int64
}

const (
	iocbCmdPread  = 0
	iocbCmdPwrite = 1
)

// aio submits the iocbs in one io_submit and waits for all of them.
func aio(t *testing.T, ctx uintptr, cbs []iocb) []ioEvent {
	t.Helper()
	ptrs := make([]*iocb, len(cbs))
	for i := range cbs {
		ptrs[i] = &cbs[i]
	}
	n, _, e := unix.Syscall(unix.SYS_IO_SUBMIT, ctx, uintptr(len(ptrs)), uintptr(unsafe.Pointer(&ptrs[0])))
	if e != 0 || int(n) != len(ptrs) {
		t.Fatalf("io_submit: %d, %v", n, e)
	}
	evs := make([]ioEvent, len(cbs))
	got := 0
	for got < len(evs) {
		n, _, e := unix.Syscall6(unix.SYS_IO_GETEVENTS, ctx, 1, uintptr(len(evs)-got), uintptr(unsafe.Pointer(&evs[got])), 0, 0)
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			t.Fatalf("io_getevents: %v", e)
		}
		got += int(n)
	}
	return evs
}

// TestLinuxAIODirect is the NIXL POSIX plugin pattern: O_DIRECT files
// written and read with io_submit batches of 4 MiB requests; every event
// must report the full length and the data must round-trip.
func TestLinuxAIODirect(t *testing.T) {
	m := mount(t, nil, Options{})
	var ctx uintptr
	if _, _, e := unix.Syscall(unix.SYS_IO_SETUP, 64, uintptr(unsafe.Pointer(&ctx)), 0); e != 0 {
		testenv.Skip(t, "io_setup: %v", e)
	}
	defer unix.Syscall(unix.SYS_IO_DESTROY, ctx, 0, 0)
	const n, size = 8, 4 << 20
	fds := make([]int, n)
	bufs := make([][]byte, n)
	cbs := make([]iocb, n)
	for i := range fds {
		fd, err := syscall.Open(filepath.Join(m.ns(""), "key"+string(rune('a'+i))+"_k"), syscall.O_RDWR|syscall.O_CREAT|syscall.O_DIRECT, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer syscall.Close(fd)
		fds[i] = fd
		bufs[i] = alignedBuf(size)
		copy(bufs[i], pattern(byte(i), size))
		cbs[i] = iocb{data: uint64(i), opcode: iocbCmdPwrite, fd: uint32(fd),
			buf: uint64(uintptr(unsafe.Pointer(&bufs[i][0]))), nbytes: size}
	}
	for _, ev := range aio(t, ctx, cbs) {
		if ev.res != size {
			t.Fatalf("aio pwrite %d: res %d, want %d", ev.data, ev.res, size)
		}
	}
	out := make([][]byte, n)
	for i := range cbs {
		out[i] = alignedBuf(size)
		cbs[i].opcode = iocbCmdPread
		cbs[i].buf = uint64(uintptr(unsafe.Pointer(&out[i][0])))
	}
	for _, ev := range aio(t, ctx, cbs) {
		if ev.res != size {
			t.Fatalf("aio pread %d: res %d, want %d", ev.data, ev.res, size)
		}
	}
	for i := range out {
		if !bytes.Equal(out[i], bufs[i]) {
			t.Fatalf("file %d: data mismatch", i)
		}
	}
}
