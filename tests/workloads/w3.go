package workloads

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// RunW3 replays the vLLM FS tier / llm-d file connector (ENGINES.md W3) in
// dir/w3-fstier: a `<model>_<12hex>/config.json`, and per rank a tree
// `<model>_<12hex>_r<rank>/<hhh>/<hh>_g0/<hash>.bin`. Each rank's
// Params.Workers threads look keys up with stat; a hit is loaded with
// O_RDONLY|O_DIRECT and readv (even requests) or, like llm-d, fstat + lseek
// to size−len + one read of the tail (odd requests), then utimensat sets
// atime only (mtime UTIME_OMIT); a miss is stored with mkdir -p, a temp
// `dest_<rand>.tmp` opened O_CREAT|O_EXCL|O_TRUNC|O_WRONLY|O_DIRECT, one
// write and a rename. An evictor samples statvfs, crawls the rank trees in
// parallel and unlinks the files with the oldest atime while usage exceeds
// 85 % of Params.CapBytes, down to 70 %. Each rank starts with a one-page
// O_DIRECT probe file.
//
// Checks: O_EXCL on a live temp fails with EEXIST; a rename is visible to
// another thread's stat at once (full size) and the temp name is gone;
// atime is set exactly while mtime stays unchanged; racing mkdir -p calls
// all succeed; reads racing unlinks return whole data or ENOENT; reads of
// complete files are never short; no stray temp file; statvfs consistent
// (and moving, with Params.StatfsTracksUsage).
func RunW3(ctx context.Context, dir string, p Params) (Report, error) {
	return runWorkload("W3", dir, "w3-fstier", p, func(b base) error {
		return (&w3{base: b}).run(ctx)
	})
}

type w3 struct {
	base
	model string // "<model>_<12hex>"
	cap   int64
	// witness asks another goroutine to stat a path right after a rename.
	witness chan w3witness
}

type w3witness struct {
	o     *object
	reply chan struct{}
}

type w3config struct {
	Model     string `json:"model"`
	BlockSize int64  `json:"block_size"`
	Ranks     int    `json:"ranks"`
}

func (w *w3) rankDir(rank int) string {
	return filepath.Join(w.root, fmt.Sprintf("%s_r%d", w.model, rank))
}

// object returns key i of rank: the path fans out over 3×2 directories so
// that threads race to create them.
func (w *w3) object(rank, i int) *object {
	h := KeyHash(fmt.Sprint("w3", w.r.p.Seed, rank, i))
	name := fmt.Sprintf("%016x.bin", h)
	path := filepath.Join(w.rankDir(rank), fmt.Sprintf("%03x", h%3), fmt.Sprintf("%02x_g0", (h>>8)%2), name)
	return w.g.get(path, path, w.r.p.ObjectSize)
}

func (w *w3) run(ctx context.Context) error {
	r := w.r
	p := r.p
	w.model = fmt.Sprintf("Llama-3.1-8B_%012x", KeyHash(fmt.Sprint("model", p.Seed))&0xffffffffffff)
	w.cap = p.CapBytes
	if w.cap == 0 {
		w.cap = int64(p.Ranks*p.Objects) * p.ObjectSize / 2
	}
	start, _ := r.statvfs(w.root, "W3 start")
	if err := w.writeConfig(); err != nil {
		return err
	}
	w.mkdirRace()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w.witness = make(chan w3witness)
	stop := make(chan struct{})
	var bg, ranks sync.WaitGroup
	bg.Add(2)
	go func() { defer bg.Done(); w.witnessLoop(stop) }()
	go func() { defer bg.Done(); w.evictor(stop) }()
	for rank := 0; rank < p.Ranks; rank++ {
		ranks.Add(1)
		go func() { defer ranks.Done(); w.rank(ctx, rank) }()
	}
	ranks.Wait()
	close(stop)
	bg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}

	// No stray temp files; each leaf directory matches the registry.
	var leaves []string
	err := filepath.WalkDir(w.root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		r.op(1)
		if strings.HasSuffix(path, ".tmp") {
			r.failf("stray temp file %s after all stores finished", path)
		}
		if d.IsDir() && strings.HasSuffix(path, "_g0") {
			leaves = append(leaves, path)
		}
		return nil
	})
	r.check(err == nil, "walk %s: %v", w.root, err)
	buf, free, err := alignedBuf(int(p.ObjectSize))
	if err != nil {
		return err
	}
	defer free()
	var held int64
	for _, l := range leaves {
		held += r.finalAudit(w.g, l, buf, true)
	}
	after, _ := r.statvfs(w.root, "W3 after stores")
	r.expectFreeMove(w.root, start, -held, "W3 statvfs after stores")
	w.atimeCheck()

	var freed int64
	for _, o := range w.g.present("", false) {
		if r.unlinkObject(w.g, o, "W3 shutdown unlink") {
			freed += o.size
		}
	}
	r.expectFreeMove(w.root, after, freed, "W3 statvfs after unlinks")
	return nil
}

// writeConfig stores config.json by temp + rename and reads it back.
func (w *w3) writeConfig() error {
	r := w.r
	dir := filepath.Join(w.root, w.model)
	if !r.mkdirAll(dir) {
		return fmt.Errorf("cannot create %s", dir)
	}
	want := w3config{Model: w.model, BlockSize: r.p.ObjectSize, Ranks: r.p.Ranks}
	data, _ := json.Marshal(want)
	tmp := filepath.Join(dir, fmt.Sprintf("config_%d.json.tmp", os.Getpid()))
	fd, _, err := r.open(tmp, unix.O_CREAT|unix.O_EXCL|unix.O_TRUNC|unix.O_WRONLY, 0o644, false)
	if err != nil {
		return fmt.Errorf("create %s: %w", tmp, err)
	}
	r.writeAt(fd, data, -1, "config.json")
	r.closeFD(fd, "config.json")
	r.op(1)
	if err := unix.Rename(tmp, filepath.Join(dir, "config.json")); err != nil {
		return fmt.Errorf("rename config.json: %w", err)
	}
	r.op(2)
	got, err := os.ReadFile(filepath.Join(dir, "config.json"))
	var cfg w3config
	if r.check(err == nil, "read config.json: %v", err) {
		r.check(json.Unmarshal(got, &cfg) == nil && cfg == want, "config.json reads back %q, want %q", got, data)
	}
	return nil
}

// mkdirRace has every worker of every rank create the same fresh deep path
// at once: all must succeed (EEXIST tolerated on a directory).
func (w *w3) mkdirRace() {
	path := filepath.Join(w.root, "mkdir-race", "a", "b", "c", "d")
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := 0; i < w.r.p.Ranks*w.r.p.Workers; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); <-gate; w.r.mkdirAll(path) }()
	}
	close(gate)
	wg.Wait()
	st, err := w.r.stat(path)
	w.r.check(err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR, "mkdir -p race: %s not a directory afterwards (%v)", path, err)
}

// probe is the connector's startup check: create, O_DIRECT-write, read back
// and unlink one page file.
func (w *w3) probe(rank int, page []byte) {
	r := w.r
	dir := w.rankDir(rank)
	if !r.mkdirAll(dir) {
		return
	}
	path := filepath.Join(dir, fmt.Sprintf(".probe_%d", rank))
	fd, _, err := r.open(path, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644, true)
	if !r.check(err == nil, "startup probe: create %s: %v", path, err) {
		return
	}
	Fill(page, path, 1, 0)
	r.writeAt(fd, page, 0, "startup probe "+path)
	r.closeFD(fd, "startup probe")
	fd, _, err = r.open(path, unix.O_RDONLY, 0, true)
	if r.check(err == nil, "startup probe: reopen %s: %v", path, err) {
		clear(page)
		n, err := r.readAt(fd, page, 0)
		r.check(err == nil && n == len(page) && Verify(page, path, 1, 0) < 0, "startup probe: read back %d bytes err %v, bytes ok=%v",
			n, err, Verify(page, path, 1, 0) < 0)
		r.closeFD(fd, "startup probe")
	}
	r.op(1)
	r.check(unix.Unlink(path) == nil, "startup probe: unlink %s", path)
	r.expectGone(path, "startup probe")
}

// rank runs Params.Workers threads over the rank's request stream.
func (w *w3) rank(ctx context.Context, rank int) {
	r := w.r
	page, free, err := alignedBuf(pageSize)
	if err != nil {
		r.failf("probe buffer: %v", err)
		return
	}
	w.probe(rank, page)
	free()
	reqs := make(chan int)
	var wg sync.WaitGroup
	for t := 0; t < r.p.Workers; t++ {
		wg.Add(1)
		go func() { defer wg.Done(); w.worker(ctx, rank, t, reqs) }()
	}
	rng := rand.New(rand.NewSource(r.p.Seed*17 + int64(rank)))
	for i := 0; i < r.p.Requests && ctx.Err() == nil; i++ {
		k := rng.Intn(r.p.Objects)
		if rng.Intn(2) == 0 {
			k = rng.Intn(max(1, r.p.Objects/3)) // a hot third gets half the requests
		}
		reqs <- k
	}
	close(reqs)
	wg.Wait()
}

func (w *w3) worker(ctx context.Context, rank, thread int, reqs <-chan int) {
	r := w.r
	buf, free, err := alignedBuf(int(r.p.ObjectSize))
	if err != nil {
		r.failf("worker buffer: %v", err)
		return
	}
	defer free()
	rng := rand.New(rand.NewSource(r.p.Seed*101 + int64(rank*1000+thread)))
	n := 0
	for k := range reqs {
		if ctx.Err() != nil {
			continue
		}
		n++
		o := w.object(rank, k)
		st, err := r.stat(o.path)
		if err == nil {
			if r.check(st.Size == o.size, "lookup: %s has size %d, want %d", o.path, st.Size, o.size) && w.load(o, buf, n%2 == 0) {
				r.hits.Add(1)
				continue
			}
		} else {
			r.check(isNotExist(err), "lookup stat %s: %v", o.path, err)
		}
		r.misses.Add(1)
		w.store(o, buf, rng, n%3 == 0)
	}
}

// load reads a hit (readv of the whole file, or llm-d's tail read) and
// touches its atime. It returns false when the file vanished (evicted).
func (w *w3) load(o *object, buf []byte, readv bool) bool {
	r := w.r
	fd, _, err := r.open(o.path, unix.O_RDONLY, 0, true)
	if isNotExist(err) {
		return false
	}
	if !r.check(err == nil, "load: open %s: %v", o.path, err) {
		return false
	}
	defer r.closeFD(fd, "load "+o.path)
	gens := w.g.gensOf(o)
	if readv {
		q := o.size / 4 / pageSize * pageSize
		iov := [][]byte{buf[:q], buf[q : 2*q], buf[2*q : 3*q], buf[3*q : o.size]}
		r.op(1)
		n, err := unix.Readv(fd, iov)
		if !r.check(err == nil && int64(n) == o.size, "load: readv %s returned %d of %d bytes, err %v", o.path, n, o.size, err) {
			return true
		}
		r.read.Add(int64(n))
		_, why := matchGen(buf[:o.size], o.key, 0, gens)
		r.check(why == "", "load: readv %s: wrong bytes: %s", o.path, why)
	} else {
		var st unix.Stat_t
		r.op(1)
		if err := unix.Fstat(fd, &st); !r.check(err == nil && st.Size == o.size, "load: fstat %s size %d err %v", o.path, st.Size, err) {
			return true
		}
		tail := max(pageSize, o.size/2/pageSize*pageSize)
		r.op(1)
		if _, err := unix.Seek(fd, st.Size-tail, 0); !r.check(err == nil, "load: lseek %s: %v", o.path, err) {
			return true
		}
		n, err := r.readAt(fd, buf[:tail], -1)
		if !r.check(err == nil && int64(n) == tail, "load: tail read of %s returned %d of %d bytes, err %v", o.path, n, tail, err) {
			return true
		}
		r.read.Add(int64(n))
		_, why := matchGen(buf[:tail], o.key, st.Size-tail, gens)
		r.check(why == "", "load: tail of %s: wrong bytes: %s", o.path, why)
	}
	now := time.Now()
	r.op(1)
	err = unix.UtimesNanoAt(unix.AT_FDCWD, o.path, []unix.Timespec{unix.NsecToTimespec(now.UnixNano()), {Nsec: unix.UTIME_OMIT}}, 0)
	r.check(err == nil || isNotExist(err), "utimensat(atime=now, mtime=omit) %s: %v", o.path, err)
	w.g.touch(o)
	return true
}

// store writes o through an O_EXCL temp file and renames it into place.
func (w *w3) store(o *object, buf []byte, rng *rand.Rand, exclProbe bool) {
	r := w.r
	dir := filepath.Dir(o.path)
	if !r.mkdirAll(dir) {
		return
	}
	tmp := filepath.Join(dir, fmt.Sprintf("dest_%016x.tmp", rng.Uint64()))
	fd, _, err := r.open(tmp, unix.O_CREAT|unix.O_EXCL|unix.O_TRUNC|unix.O_WRONLY, 0o644, true)
	if !r.check(err == nil, "store: create %s: %v", tmp, err) {
		return
	}
	if exclProbe {
		fd2, _, err := r.open(tmp, unix.O_CREAT|unix.O_EXCL|unix.O_TRUNC|unix.O_WRONLY, 0o644, false)
		if err == nil {
			unix.Close(fd2)
		}
		r.check(errnoOf(err) == unix.EEXIST, "O_EXCL open of live temp %s: err %v, want EEXIST", tmp, err)
	}
	gen := w.g.newGen(o)
	Fill(buf[:o.size], o.key, gen, 0)
	ok := r.writeAt(fd, buf[:o.size], -1, "store "+tmp)
	ok = r.closeFD(fd, "store "+tmp) && ok
	if !ok {
		r.op(1)
		_ = unix.Unlink(tmp)
		return
	}
	o.pub.Lock()
	defer o.pub.Unlock()
	r.op(1)
	if err := unix.Rename(tmp, o.path); !r.check(err == nil, "store: rename %s → %s: %v", tmp, o.path, err) {
		return
	}
	w.g.setPresent(o, true)
	reply := make(chan struct{})
	w.witness <- w3witness{o: o, reply: reply}
	<-reply
	_, err = r.stat(tmp)
	r.check(isNotExist(err), "store: temp %s still visible after rename (err %v)", tmp, err)
}

// witnessLoop stats freshly renamed files from another thread.
func (w *w3) witnessLoop(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case req := <-w.witness:
			st, err := w.r.stat(req.o.path)
			w.r.check(err == nil && st.Size == req.o.size, "rename not visible to another thread at once: stat %s size %d err %v",
				req.o.path, st.Size, err)
			close(req.reply)
		}
	}
}

// w3file is one crawled file.
type w3file struct {
	path  string
	size  int64
	atime int64
}

// evictor is the FS tier's external atime evictor.
func (w *w3) evictor(stop <-chan struct{}) {
	r := w.r
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if s, ok := r.statvfs(w.root, "W3 evictor"); ok && s.blocks > 0 {
			r.note("statvfs_used_pct_last", "%.1f", 100*float64(s.blocks-s.bfree)/float64(s.blocks))
		}
		files := w.crawl()
		var used int64
		for _, f := range files {
			used += f.size
		}
		if used <= w.cap*85/100 {
			continue
		}
		sort.Slice(files, func(i, j int) bool { return files[i].atime < files[j].atime })
		for _, f := range files {
			if used <= w.cap*70/100 {
				break
			}
			if o := w.g.lookup(f.path); o != nil && r.unlinkObject(w.g, o, "W3 atime evictor") {
				used -= f.size
			}
		}
	}
}

// crawl walks the rank trees in parallel (one goroutine per rank) and
// returns every final .bin file with its size and atime.
func (w *w3) crawl() []w3file {
	r := w.r
	var mu sync.Mutex
	var out []w3file
	var wg sync.WaitGroup
	for rank := 0; rank < r.p.Ranks; rank++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = filepath.WalkDir(w.rankDir(rank), func(path string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() || !strings.HasSuffix(path, ".bin") {
					return nil // entries vanish under a concurrent evictor or rename
				}
				st, err := r.stat(path)
				if err != nil {
					return nil
				}
				mu.Lock()
				out = append(out, w3file{path: path, size: st.Size, atime: st.Atim.Nano()})
				mu.Unlock()
				return nil
			})
		}()
	}
	wg.Wait()
	return out
}

// atimeCheck sets atime alone, explicitly and then to UTIME_NOW, on a few
// quiescent files: atime must take the value and mtime must not move.
func (w *w3) atimeCheck() {
	r := w.r
	objs := w.g.present("", false)
	for _, o := range objs[:min(len(objs), 8)] {
		st0, err := r.stat(o.path)
		if !r.check(err == nil, "atime check: stat %s: %v", o.path, err) {
			continue
		}
		old := unix.NsecToTimespec(st0.Mtim.Nano() - int64(time.Hour) + 123456789)
		r.op(1)
		err = unix.UtimesNanoAt(unix.AT_FDCWD, o.path, []unix.Timespec{old, {Nsec: unix.UTIME_OMIT}}, 0)
		if !r.check(err == nil, "utimensat(atime=%v, mtime=omit) %s: %v", old, o.path, err) {
			continue
		}
		st1, err := r.stat(o.path)
		r.check(err == nil && st1.Atim == old && st1.Mtim == st0.Mtim,
			"after utimensat(atime only) %s: atime %v (want %v), mtime %v (want unchanged %v), err %v",
			o.path, st1.Atim, old, st1.Mtim, st0.Mtim, err)
		r.op(1)
		err = unix.UtimesNanoAt(unix.AT_FDCWD, o.path, []unix.Timespec{{Nsec: unix.UTIME_NOW}, {Nsec: unix.UTIME_OMIT}}, 0)
		st2, serr := r.stat(o.path)
		r.check(err == nil && serr == nil && st2.Atim.Nano() > old.Nano() && st2.Mtim == st0.Mtim,
			"after utimensat(atime=UTIME_NOW, mtime=omit) %s: atime %v (want later than %v), mtime %v (want %v), err %v/%v",
			o.path, st2.Atim, old, st2.Mtim, st0.Mtim, err, serr)
	}
}
