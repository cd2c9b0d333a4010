package fusefs

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxmem/ctxmemd/internal/testchild"
)

// tailRecord is the size of one appended record: not a multiple of the
// page size, so appends keep ending inside a page.
const tailRecord = 1000

// tailByte is the byte at offset off of the file the tail test writes.
func tailByte(off int64) byte { return byte(off*7 + off/4093) }

// TestTailReaderNeverShort (issue 11 item 5): while one process appends
// fixed-size records to a file, another that holds the file open and does
// fstat then pread must get exactly st_size bytes, all of them the written
// pattern. Runs with and without an fsync after every record.
func TestTailReaderNeverShort(t *testing.T) {
	for _, fsync := range []bool{false, true} {
		t.Run(fmt.Sprintf("fsync=%v", fsync), func(t *testing.T) {
			m := mount(t, nil, Options{})
			p := filepath.Join(m.ns(""), "tail")
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			records := 20000
			if fsync {
				records = 1500
			}
			// The appender is another process (this test binary again,
			// role "tail-append").
			child := testchild.Start(t, "tail-append", "CTXMEM_TAIL_FILE="+p,
				"CTXMEM_TAIL_RECORDS="+strconv.Itoa(records), "CTXMEM_TAIL_FSYNC="+strconv.FormatBool(fsync))
			// The appender opens the file first and waits; the reader
			// then opens it and holds it (a tail reader: see
			// fileNode.Open for the reader that opened first).
			child.Expect(t, "open", time.Minute)
			fd, err := unix.Open(p, unix.O_RDONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			child.Stdin.Write([]byte("go\n"))
			go io.Copy(io.Discard, child.Stdout)
			buf := make([]byte, records*tailRecord)
			iters, nonEmpty := 0, 0
			check := func() {
				var st unix.Stat_t
				if err := unix.Fstat(fd, &st); err != nil {
					t.Fatalf("fstat: %v", err)
				}
				size := st.Size
				// Read the last 64 KiB (the whole file every 256th time).
				off := max(0, size-64<<10)
				if iters%256 == 0 {
					off = 0
				}
				n, err := unix.Pread(fd, buf[:size-off], off)
				if err != nil {
					t.Fatalf("pread %d bytes at %d: %v", size-off, off, err)
				}
				if int64(n) != size-off {
					t.Fatalf("iteration %d: st_size %d, pread(%d bytes at %d) returned %d", iters, size, size-off, off, n)
				}
				for i := range n {
					if want := tailByte(off + int64(i)); buf[i] != want {
						t.Fatalf("iteration %d: byte %d is %#x, want %#x", iters, off+int64(i), buf[i], want)
					}
				}
				iters++
				if size > 0 {
					nonEmpty++
				}
			}
			for running := true; running; {
				select {
				case <-child.Done():
					if err := child.Wait(); err != nil {
						t.Fatalf("appender: %v", err)
					}
					running = false
				default:
				}
				check()
			}
			check()
			t.Logf("%d fstat+pread iterations (%d on a non-empty file)", iters, nonEmpty)
			if nonEmpty < 100 {
				t.Fatalf("only %d iterations overlapped the appender", nonEmpty)
			}
		})
	}
}

// tailAppend is the appender process of TestTailReaderNeverShort (role
// "tail-append", see TestMain).
func tailAppend(t testing.TB) {
	p := os.Getenv("CTXMEM_TAIL_FILE")
	records, _ := strconv.Atoi(os.Getenv("CTXMEM_TAIL_RECORDS"))
	fsync := os.Getenv("CTXMEM_TAIL_FSYNC") == "true"
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fmt.Println("open")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	rec := make([]byte, tailRecord)
	start := time.Now()
	for r := 0; r < records; r++ {
		for i := range rec {
			rec[i] = tailByte(int64(r)*tailRecord + int64(i))
		}
		if _, err := f.Write(rec); err != nil {
			t.Fatal(err)
		}
		if fsync {
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("%d records in %v", records, time.Since(start))
}
