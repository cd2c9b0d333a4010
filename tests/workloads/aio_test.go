package workloads

import (
	"context"
	"math"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestAIOWritesAndReadsMoreThanOneSubmitGroup runs 100 requests (two
// io_submit groups) through raw AIO and checks results and bytes.
func TestAIOWritesAndReadsMoreThanOneSubmitGroup(t *testing.T) {
	const n, size = 100, 8192
	path := filepath.Join(t.TempDir(), "aio")
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	mem, free, err := alignedBuf(n * size)
	if err != nil {
		t.Fatal(err)
	}
	defer free()
	c, err := newAIO(n)
	if err != nil {
		t.Fatal(err)
	}
	defer c.destroy()
	ops := make([]aioOp, n)
	for i := range ops {
		b := mem[i*size : (i+1)*size]
		Fill(b, "aio", 1, int64(i*size))
		ops[i] = aioOp{write: true, fd: fd, buf: b, off: int64(i * size), res: math.MinInt64}
	}
	calls, err := c.do(context.Background(), ops)
	if err != nil || calls < 3 {
		t.Fatalf("write: %v after %d calls (want >= 2 submits + getevents)", err, calls)
	}
	for i := range ops {
		if ops[i].res != size {
			t.Fatalf("write %d: res %d", i, ops[i].res)
		}
		clear(ops[i].buf)
		ops[i].write, ops[i].res = false, math.MinInt64
	}
	if _, err := c.do(context.Background(), ops); err != nil {
		t.Fatal(err)
	}
	for i := range ops {
		if ops[i].res != size || Verify(ops[i].buf, "aio", 1, int64(i*size)) != -1 {
			t.Fatalf("read %d: res %d, bytes ok=%v", i, ops[i].res, Verify(ops[i].buf, "aio", 1, int64(i*size)) == -1)
		}
	}
	// A bad descriptor is reported per request, as -EBADF.
	bad := []aioOp{{fd: 1 << 20, buf: mem[:size], res: math.MinInt64}}
	if _, err := c.do(context.Background(), bad); err == nil && bad[0].res != -int64(unix.EBADF) {
		t.Fatalf("bad fd: err %v res %d", err, bad[0].res)
	}
}
