package pool

import (
	"github.com/ctxmem/ctxmemd/internal/directio"

	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// Benchmarks: 256 KiB blocks through the pool ("pool-<mode>") against a
// plain pwrite/pread of 256 KiB ("raw-<mode>") on a second descriptor of
// the same file, opened in the same I/O mode, over the same byte region,
// as sub-benchmarks of one run. The pool file lives in b.TempDir() (under
// /tmp unless TMPDIR says otherwise); the mode in the name says whether
// O_DIRECT was in use. Compare the MB/s of the two sub-benchmarks:
//
//	go test -run '^$' -bench . -benchtime 2s ./fabric/pool
//
// A pool Put is one pwritev of header + payload, one pread of the whole
// record and a compare; a pool Get is one pread of the record, a CRC32C of
// the payload, one 4 KiB pread of the extent header and a copy.

const (
	benchBlock   = 256 * kib
	benchExtents = 8 // × DefaultExtentSize = 512 MiB cycled through
	benchHot     = 64 * mib
)

type benchEnv struct {
	p    *Pool
	raw  int   // second descriptor, same mode as p
	size int64 // bytes of the data region
}

// newBenchEnv formats a pool in a fresh directory and writes its whole
// data region once, so neither loop pays for allocating blocks.
func newBenchEnv(b *testing.B) *benchEnv {
	path := filepath.Join(b.TempDir(), "pool.img")
	p, err := func() (*Pool, error) {
		if _, err := Format(path, FormatOptions{Size: DataStart + benchExtents*DefaultExtentSize}); err != nil {
			return nil, err
		}
		return Open(path, OpenOptions{})
	}()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	fd, mode, err := openDevice(path, 0, p.Mode() == ModeBuffered, nil)
	if err != nil || mode != p.Mode() {
		b.Fatalf("raw open: %v, mode %v", err, mode)
	}
	b.Cleanup(func() { unix.Close(fd) })
	e := &benchEnv{p: p, raw: fd, size: benchExtents * DefaultExtentSize}
	buf := directio.AlignedAlloc(4 * mib)
	for off := int64(0); off < e.size; off += int64(len(buf)) {
		if err := directio.PwriteFull(fd, buf, DataStart+off); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("%v", p)
	return e
}

func benchData() []byte {
	d := directio.AlignedAlloc(benchBlock)
	for i := range d {
		d[i] = byte(i * 7)
	}
	return d
}

// putLoop returns a Put benchmark that reclaims the oldest extent (lowest
// epoch) whenever the pool is full, as the tiering core would.
func (e *benchEnv) putLoop(b *testing.B) func(*testing.B) {
	return func(b *testing.B) {
		ctx := context.Background()
		w := newWriter(b, e.p, NewMemLeases(benchExtents, MemLeaseOptions{}).Leaser("bench"), WriterOptions{Host: "bench"})
		data := benchData()
		b.SetBytes(benchBlock)
		for i := 0; b.Loop(); i++ {
			_, err := w.Put(ctx, key("bench", 1, uint32(i), 1), data)
			if errors.Is(err, ErrNoExtent) {
				b.StopTimer()
				ls := w.Leases()
				oldest := slices.MinFunc(ls, func(x, y Lease) int { return int(x.Epoch - y.Epoch) })
				if err := w.Reclaim(ctx, oldest.Extent); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				_, err = w.Put(ctx, key("bench", 1, uint32(i), 1), data)
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	}
}

func (e *benchEnv) rawPutLoop(b *testing.B) {
	data := benchData()
	b.SetBytes(benchBlock)
	var off int64
	for b.Loop() {
		if err := directio.PwriteFull(e.raw, data, DataStart+off); err != nil {
			b.Fatal(err)
		}
		off = (off + benchBlock) % e.size
	}
}

func BenchmarkPoolPut(b *testing.B) {
	e := newBenchEnv(b)
	m := e.p.Mode().String()
	b.Run("pool-"+m, e.putLoop(b))
	b.Run("raw-"+m, e.rawPutLoop)
}

func BenchmarkPoolGet(b *testing.B) {
	e := newBenchEnv(b)
	ctx := context.Background()
	w := newWriter(b, e.p, NewMemLeases(benchExtents, MemLeaseOptions{}).Leaser("bench"), WriterOptions{Host: "bench"})
	data := benchData()
	locs := make([]Location, benchHot/benchBlock)
	for i := range locs {
		var err error
		if locs[i], err = w.Put(ctx, key("bench", 2, uint32(i), 1), data); err != nil {
			b.Fatal(err)
		}
	}
	m := e.p.Mode().String()
	b.Run("pool-"+m, func(b *testing.B) {
		r := NewReader(e.p)
		dst := make([]byte, benchBlock)
		b.SetBytes(benchBlock)
		for i := 0; b.Loop(); i++ {
			j := i % len(locs)
			if _, err := r.Get(ctx, key("bench", 2, uint32(j), 1), locs[j], dst); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("raw-"+m, func(b *testing.B) {
		dst := directio.AlignedAlloc(benchBlock)
		b.SetBytes(benchBlock)
		for i := 0; b.Loop(); i++ {
			if err := directio.PreadFull(e.raw, dst, locs[i%len(locs)].Offset+headerSize); err != nil {
				b.Fatal(err)
			}
		}
	})
}
