package workloads

import (
	"context"
	"fmt"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Linux native AIO through raw system calls (io_setup(2), io_submit(2),
// io_getevents(2), io_destroy(2)); the structures follow
// include/uapi/linux/aio_abi.h for a little-endian 64-bit kernel, which is
// what libaio (used by NIXL's POSIX plugin and fio) passes.

const (
	iocbCmdPread  = 0  // IOCB_CMD_PREAD
	iocbCmdPwrite = 1  // IOCB_CMD_PWRITE
	aioMaxBatch   = 64 // NIXL submits at most 64 iocbs per io_submit
)

// iocb mirrors struct iocb (64 bytes).
type iocb struct {
	data      uint64 // aio_data: returned in io_event.data
	key       uint32 // aio_key (kernel use)
	rwFlags   int32  // aio_rw_flags (RWF_*)
	opcode    uint16 // aio_lio_opcode
	reqprio   int16  // aio_reqprio
	fildes    uint32 // aio_fildes
	buf       uint64 // aio_buf: user buffer address
	nbytes    uint64 // aio_nbytes
	offset    int64  // aio_offset
	reserved2 uint64
	flags     uint32 // aio_flags (IOCB_FLAG_*)
	resfd     uint32
}

// ioEvent mirrors struct io_event (32 bytes).
type ioEvent struct {
	data uint64 // iocb.data of the completed request
	obj  uint64 // address of the iocb
	res  int64  // bytes transferred, or -errno
	res2 int64
}

var _ [64]byte = [unsafe.Sizeof(iocb{})]byte{}
var _ [32]byte = [unsafe.Sizeof(ioEvent{})]byte{}

// aioCtx is an aio_context_t from io_setup.
type aioCtx uintptr

// newAIO creates an AIO context for up to depth in-flight requests.
func newAIO(depth int) (aioCtx, error) {
	var c aioCtx
	if _, _, e := unix.Syscall(unix.SYS_IO_SETUP, uintptr(depth), uintptr(unsafe.Pointer(&c)), 0); e != 0 {
		return 0, fmt.Errorf("io_setup(%d): %w", depth, e)
	}
	return c, nil
}

// destroy releases the context (io_destroy waits for in-flight requests).
func (c aioCtx) destroy() { _, _, _ = unix.Syscall(unix.SYS_IO_DESTROY, uintptr(c), 0, 0) }

// aioOp is one request: read or write buf (which must stay mapped until
// completion: use alignedBuf memory) at off of fd. res receives the kernel's
// result: bytes transferred or -errno.
type aioOp struct {
	write bool
	fd    int
	buf   []byte
	off   int64
	res   int64
}

// do runs ops through the context the way NIXL's POSIX plugin does:
// io_submit in groups of at most 64 iocbs, then io_getevents with a zero
// timeout polled until every submitted request has completed. It fills
// ops[i].res and returns the number of io_submit/io_getevents calls made, or
// an error when a call itself fails (not when a request does).
func (c aioCtx) do(ctx context.Context, ops []aioOp) (int, error) {
	calls := 0
	cbs := make([]iocb, len(ops))
	ptrs := make([]*iocb, len(ops))
	for i := range ops {
		op := uint16(iocbCmdPread)
		if ops[i].write {
			op = iocbCmdPwrite
		}
		cbs[i] = iocb{data: uint64(i), opcode: op, fildes: uint32(ops[i].fd),
			buf: uint64(uintptr(unsafe.Pointer(unsafe.SliceData(ops[i].buf)))), nbytes: uint64(len(ops[i].buf)), offset: ops[i].off}
		ptrs[i] = &cbs[i]
	}
	events := make([]ioEvent, aioMaxBatch)
	zero := unix.Timespec{}
	for start := 0; start < len(ops); {
		end := min(start+aioMaxBatch, len(ops))
		n, _, e := unix.Syscall(unix.SYS_IO_SUBMIT, uintptr(c), uintptr(end-start), uintptr(unsafe.Pointer(&ptrs[start])))
		calls++
		if e != 0 {
			if e == unix.EAGAIN || e == unix.EINTR {
				continue
			}
			return calls, fmt.Errorf("io_submit(%d iocbs): %w", end-start, e)
		}
		submitted := int(n)
		for done := 0; done < submitted; {
			if err := ctx.Err(); err != nil {
				return calls, err
			}
			got, _, e := unix.Syscall6(unix.SYS_IO_GETEVENTS, uintptr(c), 0, uintptr(len(events)),
				uintptr(unsafe.Pointer(&events[0])), uintptr(unsafe.Pointer(&zero)), 0)
			calls++
			if e != 0 {
				if e == unix.EINTR {
					continue
				}
				return calls, fmt.Errorf("io_getevents: %w", e)
			}
			for _, ev := range events[:got] {
				ops[ev.data].res = ev.res
			}
			done += int(got)
			if got == 0 {
				runtime.Gosched()
				time.Sleep(20 * time.Microsecond)
			}
		}
		start += submitted
	}
	runtime.KeepAlive(cbs)
	runtime.KeepAlive(ptrs)
	return calls, nil
}
