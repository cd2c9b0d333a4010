package workloads

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// RunW1 replays SGLang's HiCacheFile backend (ENGINES.md W1) in dir/w1-hicache:
// Params.Ranks tensor-parallel ranks replay the same requests (prefixes of
// prefix-chained page hashes), each with a prefetch thread (batch_exists by
// stat, or by one readdir on odd requests, then one read() per hit) and a
// backup writer thread (temp `<final>.tmp.<pid>.<tid>.<uuid>` opened
// O_WRONLY|O_CREAT|O_TRUNC, sequential chunked writes, rename over the final
// name). About 20 % of pages carry no rank in their name (MLA-style), so
// several ranks write them at once. An LRU evictor unlinks pages above
// Params.CapBytes and a checker thread stats and reads final names while the
// writers run.
//
// Checks: no final name is ever seen short or with wrong bytes; one read()
// returns the whole page; every page is exactly one writer's version;
// readdir and stat agree with renames and unlinks (no ghost or missing
// entry); ENOENT on stat and open after unlink; no stray temp file; statvfs
// consistent and (Params.StatfsTracksUsage) moving with writes and unlinks.
// The error lists failed checks; Report counts operations.
func RunW1(ctx context.Context, dir string, p Params) (Report, error) {
	return runWorkload("W1", dir, "w1-hicache", p, func(b base) error {
		return (&w1{base: b}).run(ctx)
	})
}

type w1 struct {
	base
	convs  [][]string // conversation → chained page hashes (hex)
	shared map[string]bool
	reqs   [][2]int // (conversation, prefix length)
	cap    int64
}

// pending is a rank's set of pages queued for its backup writer.
type pending struct {
	mu    sync.Mutex
	m     map[*object]bool
	empty *sync.Cond // signalled when m becomes empty
}

func newPending() *pending {
	q := &pending{m: map[*object]bool{}}
	q.empty = sync.NewCond(&q.mu)
	return q
}

// drain waits until the writer has handled every queued page.
func (q *pending) drain() {
	q.mu.Lock()
	for len(q.m) > 0 {
		q.empty.Wait()
	}
	q.mu.Unlock()
}

func (q *pending) add(o *object) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.m[o] {
		return false
	}
	q.m[o] = true
	return true
}

func (q *pending) del(o *object) {
	q.mu.Lock()
	delete(q.m, o)
	if len(q.m) == 0 {
		q.empty.Broadcast()
	}
	q.mu.Unlock()
}

func (w *w1) plan() {
	p := w.r.p
	rng := rand.New(rand.NewSource(p.Seed))
	nconv := max(2, p.Objects/8)
	per := max(1, p.Objects/nconv)
	w.shared = map[string]bool{}
	private := 0
	for c := 0; c < nconv; c++ {
		prev := []byte(fmt.Sprintf("seed-%d-conv-%d", p.Seed, c))
		var pages []string
		for i := 0; i < per; i++ {
			var idx [8]byte
			binary.LittleEndian.PutUint64(idx[:], uint64(i))
			sum := sha256.Sum256(append(append([]byte{}, prev...), idx[:]...))
			prev = sum[:]
			h := hex.EncodeToString(sum[:])
			pages = append(pages, h)
			if sum[0]%5 == 0 {
				w.shared[h] = true
			} else {
				private++
			}
		}
		w.convs = append(w.convs, pages)
	}
	for i := 0; i < p.Requests; i++ {
		c := rng.Intn(nconv)
		w.reqs = append(w.reqs, [2]int{c, 1 + rng.Intn(len(w.convs[c]))})
	}
	total := int64(private*p.Ranks+len(w.shared)) * p.ObjectSize
	w.cap = p.CapBytes
	if w.cap == 0 {
		w.cap = total / 2
	}
}

// object returns the page object for rank (SGLang names: shared pages drop
// the rank and TP suffix).
func (w *w1) object(rank int, h string) *object {
	name := fmt.Sprintf("%s_Llama-3.1-8B_%d_%d.bin", h, rank, w.r.p.Ranks)
	if w.shared[h] {
		name = h + "_Llama-3.1-8B.bin"
	}
	return w.g.get(filepath.Join(w.root, name), name, w.r.p.ObjectSize)
}

func (w *w1) run(ctx context.Context) error {
	w.plan()
	r := w.r
	start, _ := r.statvfs(w.root, "W1 start")
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var ranks, bg sync.WaitGroup
	stop := make(chan struct{})
	for rank := 0; rank < r.p.Ranks; rank++ {
		q := make(chan *object, 4*r.p.Objects)
		pend := newPending()
		ranks.Add(2)
		go func() { defer ranks.Done(); w.writer(ctx, rank, q, pend) }()
		go func() { defer ranks.Done(); defer close(q); w.prefetcher(ctx, rank, q, pend) }()
	}
	bg.Add(2)
	go func() { defer bg.Done(); w.evictor(stop) }()
	go func() { defer bg.Done(); w.checker(stop) }()
	ranks.Wait()
	close(stop)
	bg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}

	buf := make([]byte, r.p.ObjectSize)
	held := r.finalAudit(w.g, w.root, buf, false)
	after, _ := r.statvfs(w.root, "W1 after writes")
	r.expectFreeMove(w.root, start, -held, "W1 statvfs after writing pages")

	// A restarted engine lists the directory and stats every file.
	names, err := r.readDir(w.root)
	r.check(err == nil, "startup listdir %s: %v", w.root, err)
	for _, n := range names {
		st, err := r.stat(filepath.Join(w.root, n))
		r.check(err == nil && st.Size == r.p.ObjectSize, "startup stat %s: size %d err %v", n, st.Size, err)
	}
	var freed int64
	for _, o := range w.g.present(w.root, false) {
		if r.unlinkObject(w.g, o, "W1 shutdown unlink") {
			freed += o.size
		}
	}
	r.expectFreeMove(w.root, after, freed, "W1 statvfs after unlinking pages")
	names, err = r.readDir(w.root)
	r.check(err == nil && len(names) == 0, "W1 directory not empty after unlinking everything: %v %v", names, err)
	return nil
}

// prefetcher is a rank's request loop: batch_exists, one read() per hit,
// misses queued for the backup writer.
func (w *w1) prefetcher(ctx context.Context, rank int, q chan<- *object, pend *pending) {
	r := w.r
	buf := make([]byte, r.p.ObjectSize)
	for i, req := range w.reqs {
		if ctx.Err() != nil {
			return
		}
		if i%2 == 1 {
			pend.drain() // requests arrive over time: let the backup writer catch up
		}
		hashes := w.convs[req[0]][:req[1]]
		objs := make([]*object, len(hashes))
		for j, h := range hashes {
			objs[j] = w.object(rank, h)
		}
		hits := 0
		if i%2 == 0 { // batch_exists by stat, in order
			for _, o := range objs {
				st, err := r.stat(o.path)
				if err != nil {
					r.check(isNotExist(err), "batch_exists stat %s: %v", o.path, err)
					break
				}
				if !r.check(st.Size == o.size, "batch_exists: final %s visible with size %d, want %d", o.path, st.Size, o.size) {
					break
				}
				hits++
			}
		} else { // variant B: one readdir of the whole directory per batch
			names, err := r.readDir(w.root)
			r.check(err == nil, "batch_exists readdir %s: %v", w.root, err)
			set := make(map[string]bool, len(names))
			for _, n := range names {
				set[n] = true
			}
			for _, o := range objs {
				if !set[filepath.Base(o.path)] {
					break
				}
				hits++
			}
		}
		for j, o := range objs {
			if j < hits {
				switch r.readObject(w.g, o, buf, false, fmt.Sprintf("rank %d prefetch", rank)) {
				case readOK:
					r.hits.Add(1)
					w.g.touch(o)
					continue
				case readWrong:
					continue
				}
			}
			r.misses.Add(1)
			if pend.add(o) {
				select {
				case q <- o:
				case <-ctx.Done():
					return
				}
			}
		}
	}
}

// writer is a rank's backup thread: temp file, chunked write, rename.
func (w *w1) writer(ctx context.Context, rank int, q <-chan *object, pend *pending) {
	r := w.r
	rng := rand.New(rand.NewSource(r.p.Seed + int64(rank)*7919))
	buf := make([]byte, r.p.ObjectSize)
	const chunk = 256 << 10
	for o := range q {
		if ctx.Err() != nil {
			pend.del(o)
			continue
		}
		gen := w.g.newGen(o)
		Fill(buf, o.key, gen, 0)
		tmp := fmt.Sprintf("%s.tmp.%d.%d.%016x", o.path, os.Getpid(), unix.Gettid(), rng.Uint64())
		fd, _, err := r.open(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC, 0o644, false)
		if !r.check(err == nil, "backup write: open %s: %v", tmp, err) {
			pend.del(o)
			continue
		}
		ok := true
		for off := 0; off < len(buf) && ok; off += chunk {
			ok = r.writeAt(fd, buf[off:min(off+chunk, len(buf))], -1, "backup write "+tmp)
		}
		ok = r.closeFD(fd, "backup write "+tmp) && ok
		if ok {
			w.publish(o, tmp)
		} else {
			r.op(1)
			_ = unix.Unlink(tmp)
		}
		pend.del(o)
	}
}

// publish renames tmp over o's final name and checks the result at once:
// the final name has the full size, the temp name is gone.
func (w *w1) publish(o *object, tmp string) {
	r := w.r
	o.pub.Lock()
	defer o.pub.Unlock()
	existed := w.g.isPresent(o)
	r.op(1)
	if err := unix.Rename(tmp, o.path); err != nil {
		r.failf("rename %s → %s: %v", tmp, o.path, err)
		return
	}
	w.g.setPresent(o, true)
	if existed {
		r.noteOnce("rename_over_existing", "exercised")
	}
	st, err := r.stat(o.path)
	r.check(err == nil && st.Size == o.size, "right after rename: stat %s: size %d err %v, want %d", o.path, st.Size, err, o.size)
	_, err = r.stat(tmp)
	r.check(isNotExist(err), "right after rename: temp %s still visible (err %v)", tmp, err)
}

// evictor is SGLang's optional LRU thread: statvfs, then unlink the least
// recently used pages while the pages held exceed the cap (down to 70 %).
func (w *w1) evictor(stop <-chan struct{}) {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		w.r.statvfs(w.root, "W1 evictor")
		held := w.g.heldBytes()
		if held <= w.cap {
			continue
		}
		for _, o := range w.g.present(w.root, false) {
			if held <= w.cap*7/10 {
				break
			}
			if w.r.unlinkObject(w.g, o, "W1 LRU evictor") {
				held -= o.size
			}
		}
	}
}

// checker lists the directory and stats (and every third time reads) each
// final name while the writers run: a final name must never be short or
// hold anything but one whole version.
func (w *w1) checker(stop <-chan struct{}) {
	r := w.r
	buf := make([]byte, r.p.ObjectSize)
	for round := 0; ; round++ {
		select {
		case <-stop:
			return
		default:
		}
		names, err := r.readDir(w.root)
		if !r.check(err == nil, "checker readdir %s: %v", w.root, err) {
			return
		}
		for i, n := range names {
			if base, _, isTmp := strings.Cut(n, ".tmp."); isTmp {
				r.check(w.g.lookup(filepath.Join(w.root, base)) != nil, "checker: temp file %s of an unknown page", n)
				continue
			}
			o := w.g.lookup(filepath.Join(w.root, n))
			if !r.check(o != nil, "checker: unknown name %s in %s", n, w.root) {
				continue
			}
			st, err := r.stat(o.path)
			if isNotExist(err) {
				continue // evicted since the readdir
			}
			if !r.check(err == nil && st.Size == o.size, "checker: final %s has size %d (err %v) while writers run, want %d",
				o.path, st.Size, err, o.size) {
				continue
			}
			if (i+round)%3 == 0 {
				r.readObject(w.g, o, buf, false, "concurrent checker")
			}
		}
	}
}
