package nbd

import (
	"math/bits"
	"sync"
)

// bufPool recycles payload buffers (WRITE data, READ results) in
// power-of-two size classes from 4 KiB to MaxPayload, so steady traffic
// does not allocate per request.
type bufPool struct {
	classes [bufClasses]sync.Pool // class i holds *[]byte of cap minBuf<<i
}

const (
	minBufShift = 12               // 4 KiB
	bufClasses  = 26 - minBufShift // up to 32 MiB (1<<25) inclusive
)

func newBufPool() *bufPool { return &bufPool{} }

// class returns the size class holding n bytes (n <= MaxPayload).
func bufClass(n int) int {
	if n <= 1<<minBufShift {
		return 0
	}
	return bits.Len(uint(n-1)) - minBufShift
}

// get returns a buffer of length n (contents undefined).
func (p *bufPool) get(n int) []byte {
	c := bufClass(n)
	if v := p.classes[c].Get(); v != nil {
		return (*v.(*[]byte))[:n]
	}
	return make([]byte, n, 1<<(c+minBufShift))
}

// put recycles b (from get).
func (p *bufPool) put(b []byte) {
	if cap(b) < 1<<minBufShift || cap(b) > MaxPayload {
		return
	}
	c := bufClass(cap(b))
	if cap(b) != 1<<(c+minBufShift) {
		return
	}
	b = b[:0]
	p.classes[c].Put(&b)
}

// budget bounds the bytes held by one connection's requests in flight.
// acquire waits while the bound would be exceeded (a request larger than
// the bound still gets in alone).
type budget struct {
	mu    sync.Mutex
	used  int64
	limit int64
	waits int           // acquirers blocked on wake
	wake  chan struct{} // closed and replaced on release when waits > 0
}

func newBudget(limit int64) *budget {
	return &budget{limit: limit, wake: make(chan struct{})}
}

// tryAcquire takes n bytes if that needs no waiting.
func (b *budget) tryAcquire(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used == 0 || b.used+n <= b.limit {
		b.used += n
		return true
	}
	return false
}

// acquire takes n bytes; it returns false if stop is closed first.
func (b *budget) acquire(n int64, stop <-chan struct{}) bool {
	for {
		b.mu.Lock()
		if b.used == 0 || b.used+n <= b.limit {
			b.used += n
			b.mu.Unlock()
			return true
		}
		ch := b.wake
		b.waits++
		b.mu.Unlock()
		select {
		case <-ch:
		case <-stop:
		}
		b.mu.Lock()
		b.waits--
		b.mu.Unlock()
		select {
		case <-stop:
			return false
		default:
		}
	}
}

// release returns n bytes.
func (b *budget) release(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	if b.waits > 0 {
		close(b.wake)
		b.wake = make(chan struct{})
	}
	b.mu.Unlock()
}
