package tiering

import (
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// pageSize is the allocation granule of G2 buffers and the O_DIRECT
// alignment every tier may rely on (bytes).
const pageSize = 4096

// bufPool hands out G2 block buffers. Buffers are anonymous private
// mappings outside the Go heap, so the bytes G2 accounts for are the bytes
// the process holds: RSS = G2 used bytes + the Go heap (metadata), with no
// garbage-collector headroom on block data. Buffers are page aligned, so
// tiers can do O_DIRECT I/O straight into them.
//
// Sizes are rounded up to a power-of-two number of pages; freed buffers
// are kept on per-size free lists, at most 16 MiB in all (maxFree), so
// steady-state eviction and promotion do not call mmap/munmap per block.
type bufPool struct {
	mu        sync.Mutex
	free      map[int][][]byte // size class (bytes) → free buffers
	freeBytes int              // bytes held in free lists
	maxFree   int              // bound on freeBytes
}

func newBufPool() *bufPool {
	return &bufPool{free: make(map[int][][]byte), maxFree: 16 << 20}
}

// classSize returns the allocation size for n bytes: the smallest power of
// two number of pages that holds n.
func classSize(n int) int {
	c := pageSize
	for c < n {
		c <<= 1
	}
	return c
}

// get returns a zeroed buffer of at least n bytes (len = classSize(n)).
func (p *bufPool) get(n int) ([]byte, error) {
	c := classSize(n)
	p.mu.Lock()
	if l := p.free[c]; len(l) > 0 {
		b := l[len(l)-1]
		p.free[c] = l[:len(l)-1]
		p.freeBytes -= c
		p.mu.Unlock()
		clear(b)
		return b, nil
	}
	p.mu.Unlock()
	b, err := unix.Mmap(-1, 0, c, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("g2: mmap %d bytes: %w", c, err)
	}
	return b, nil
}

// put returns b to the pool (or unmaps it when the class's list is full).
func (p *bufPool) put(b []byte) {
	if b == nil {
		return
	}
	c := len(b)
	p.mu.Lock()
	if p.freeBytes+c <= p.maxFree {
		p.free[c] = append(p.free[c], b)
		p.freeBytes += c
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	_ = unix.Munmap(b)
}

// release unmaps every pooled buffer.
func (p *bufPool) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c, l := range p.free {
		for _, b := range l {
			_ = unix.Munmap(b)
		}
		delete(p.free, c)
	}
	p.freeBytes = 0
}
