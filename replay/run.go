package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/sys/unix"
)

// Defaults for Options.
const (
	DefaultBlockBytes  = 256 << 10
	DefaultConcurrency = 8
	// DefaultTokensPerBlock is the Mooncake trace's block: 512 tokens
	// (traces/README.md).
	DefaultTokensPerBlock = 512
	// DefaultFailureLogs is how many verification failures are logged in
	// detail (all are counted).
	DefaultFailureLogs = 5
	// RetryPoll is how often a miss re-stats its file while it waits for
	// a peer (Options.RetryMissing).
	RetryPoll = 10 * time.Millisecond
)

// Options configure Run.
type Options struct {
	// Mount is the directory to replay into: a one-host replay. Set Mount
	// or Mounts, not both; the directories must exist.
	Mount string
	// Mounts are the directories of a multi-host replay, one per host
	// (each a different ctxmemd daemon's mount with the same namespace
	// layout). Each request goes to one host (see Spread), which reads and
	// writes only its own mount: a block absent there is a miss there even
	// when another host has it. The same directory may be given several
	// times (hosts then share its files and in-flight writes).
	Mounts []string
	// Spread routes requests to hosts (default SpreadRR).
	Spread Spread
	// HashBlocks is how many leading block ids SpreadHash hashes
	// (default 1).
	HashBlocks int
	// RetryMissing, when > 0, makes a miss re-stat its file every
	// RetryPoll for up to this long before writing it; a file that
	// appears (a peer shared it) is read and verified and, if correct,
	// counted in Result.RetryHits as well as BlockHits. 0 (default) writes
	// at once.
	RetryMissing time.Duration
	// Layout names block files (default LayoutFlat).
	Layout Layout
	// BlockBytes is the size in bytes of every block file (default 256 KiB).
	BlockBytes int
	// TokensPerBlock is how many tokens one block holds (default
	// DefaultTokensPerBlock, the Mooncake trace's 512): the unit of
	// Result.TokensHit.
	TokensPerBlock int
	// PrefillUsPerToken is what computing one token's KV costs the engine
	// (µs of prefill per token; 0 = unknown, no time reported): the unit
	// of Result.RecomputeAvoidedS.
	PrefillUsPerToken float64
	// Concurrency is the number of requests in flight (default 8). The
	// blocks of one request are handled in order by one worker.
	Concurrency int
	// Speed scales trace time: 0 ignores timestamps (as fast as possible),
	// 1 is real time, 10 is ten times faster.
	Speed float64
	// Progress, when non-nil, receives a progress bar (requests done).
	Progress io.Writer
	// Logger receives details of the first FailureLogs verification
	// failures and write errors (nil: discarded).
	Logger *slog.Logger
	// FailureLogs caps detailed failure logs (default DefaultFailureLogs).
	FailureLogs int

	// afterMiss, when set (tests), is called with the host and block id
	// when a miss starts waiting under RetryMissing.
	afterMiss func(host int, id int64)
}

// Run replays reqs (in slice order, see ReadTrace) into opts.Mount, or
// into opts.Mounts with request i going to host opts.Spread.Host(i, …), and
// returns the counts, in total and per host. For each block, on the
// request's host: if its file exists it is a hit candidate — the tier xattr is read, then the file is opened, read whole,
// closed and checked byte by byte (a read error, short or long file, or
// wrong byte is a verification failure); if it does not exist, or vanishes
// before it is opened, it is a miss and (after waiting up to
// opts.RetryMissing for it to appear) is written through a unique temp file
// renamed into place. A block another in-flight request is writing to the
// same directory is waited for and then read, so on a store that keeps
// everything the hit count does not depend on Concurrency. The bytes of a
// block depend only on its id (Fill), so a file one host shares with
// another verifies there.
//
// Run returns an error for bad options, and ctx.Err() (with the partial
// result) when ctx ends first.
func Run(ctx context.Context, reqs []Request, opts Options) (Result, error) {
	mounts := opts.Mounts
	switch {
	case opts.Mount != "" && len(mounts) > 0:
		return Result{}, errors.New("replay: set Mount or Mounts, not both")
	case opts.Mount != "":
		mounts = []string{opts.Mount}
	case len(mounts) == 0:
		return Result{}, errors.New("replay: no mount directory")
	}
	hosts, err := openHosts(mounts)
	if err != nil {
		return Result{}, err
	}
	if opts.Spread == "" {
		opts.Spread = SpreadRR
	}
	if _, err := ParseSpread(string(opts.Spread)); err != nil {
		return Result{}, err
	}
	if opts.HashBlocks == 0 {
		opts.HashBlocks = 1
	}
	if opts.HashBlocks < 0 {
		return Result{}, fmt.Errorf("replay: hash blocks %d is negative", opts.HashBlocks)
	}
	if opts.RetryMissing < 0 {
		return Result{}, fmt.Errorf("replay: retry-missing %v is negative", opts.RetryMissing)
	}
	if opts.Layout == "" {
		opts.Layout = LayoutFlat
	}
	if _, err := ParseLayout(string(opts.Layout)); err != nil {
		return Result{}, err
	}
	if opts.BlockBytes == 0 {
		opts.BlockBytes = DefaultBlockBytes
	}
	if opts.BlockBytes < 0 || opts.BlockBytes > 1<<30 {
		return Result{}, fmt.Errorf("replay: block size %d out of range (1 B–1 GiB)", opts.BlockBytes)
	}
	if opts.TokensPerBlock == 0 {
		opts.TokensPerBlock = DefaultTokensPerBlock
	}
	if opts.TokensPerBlock < 0 || opts.PrefillUsPerToken < 0 {
		return Result{}, fmt.Errorf("replay: tokens per block %d and prefill cost %g µs/token must not be negative",
			opts.TokensPerBlock, opts.PrefillUsPerToken)
	}
	if opts.Concurrency == 0 {
		opts.Concurrency = DefaultConcurrency
	}
	if opts.Concurrency < 0 {
		return Result{}, fmt.Errorf("replay: concurrency %d is negative", opts.Concurrency)
	}
	if opts.Speed < 0 {
		return Result{}, fmt.Errorf("replay: speed %g is negative", opts.Speed)
	}
	if opts.FailureLogs == 0 {
		opts.FailureLogs = DefaultFailureLogs
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}

	r := &runner{opts: opts, hosts: hosts, inflight: map[claimKey]chan struct{}{}, seen: map[claimKey]struct{}{}}
	if opts.Progress != nil {
		r.bar = progressbar.NewOptions(len(reqs),
			progressbar.OptionSetWriter(opts.Progress),
			progressbar.OptionSetDescription("replay"),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString("req"),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)
	}

	start := time.Now()
	work := make(chan int)
	workers := make([]*worker, opts.Concurrency)
	var wg sync.WaitGroup
	for i := range workers {
		w := &worker{r: r, id: i, rbuf: make([]byte, opts.BlockBytes+1), wbuf: make([]byte, opts.BlockBytes),
			cnt: make([]counts, len(hosts)), tiers: map[string]int64{}, xbuf: make([]byte, 256)}
		workers[i] = w
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				w.request(ctx, opts.Spread.Host(i, &reqs[i], len(hosts), opts.HashBlocks), &reqs[i])
				if r.bar != nil {
					_ = r.bar.Add(1)
				}
			}
		}()
	}
	err = dispatch(ctx, reqs, opts.Speed, start, work)
	close(work)
	wg.Wait()
	if r.bar != nil {
		_ = r.bar.Finish()
	}

	res := Result{HitsByTier: map[string]int64{}, BlockBytes: opts.BlockBytes, Layout: string(opts.Layout),
		TokensPerBlock: opts.TokensPerBlock, PrefillUsPerToken: opts.PrefillUsPerToken,
		Mount: strings.Join(mounts, ","), Spread: string(opts.Spread), HashBlocks: opts.HashBlocks, RetryMissingS: opts.RetryMissing.Seconds(),
		Hosts: make([]HostResult, len(hosts))}
	for _, t := range countedTiers() {
		res.HitsByTier[t] = 0
	}
	var lat []int64
	var total counts
	for h := range hosts {
		var c counts
		for _, w := range workers {
			c.add(w.cnt[h])
		}
		res.Hosts[h] = c.host(h, hosts[h].mount)
		total.add(c)
	}
	res.setTotals(total)
	for _, w := range workers {
		for t, n := range w.tiers {
			res.HitsByTier[t] += n
		}
		lat = append(lat, w.lat...)
	}
	res.finish(lat, time.Since(start))
	if err == nil {
		err = ctx.Err()
	}
	return res, err
}

// dispatch sends request indexes to work, pacing them by timestamp when
// speed > 0. It returns ctx.Err() when ctx ends first.
func dispatch(ctx context.Context, reqs []Request, speed float64, start time.Time, work chan<- int) error {
	var t0 int64
	if len(reqs) > 0 {
		t0 = reqs[0].Timestamp
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for i := range reqs {
		if speed > 0 {
			due := start.Add(time.Duration(float64(reqs[i].Timestamp-t0) * float64(time.Millisecond) / speed))
			if d := time.Until(due); d > 0 {
				timer.Reset(d)
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-timer.C:
				}
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case work <- i:
		}
	}
	return nil
}

// runner is the state shared by the workers of one Run.
type runner struct {
	opts     Options
	hosts    []host
	bar      *progressbar.ProgressBar
	mu       sync.Mutex
	inflight map[claimKey]chan struct{} // closed when the block's writer is done
	seen     map[claimKey]struct{}      // block files this run read or wrote
	dirs     sync.Map                   // directories known to exist
	logged   atomic.Int64
	tmpSeq   atomic.Int64
}

// claimKey names one block file: its id in one directory (host.dom).
type claimKey struct {
	dom int
	id  int64
}

// claim registers the caller as the writer of block file k. It returns
// (nil, true) when the caller now owns the write, or (ch, false) where ch
// closes when the current writer is done.
func (r *runner) claim(k claimKey) (<-chan struct{}, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ch, ok := r.inflight[k]; ok {
		return ch, false
	}
	r.inflight[k] = make(chan struct{})
	return nil, true
}

// known reports whether this run has read or written block file k.
func (r *runner) known(k claimKey) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.seen[k]
	return ok
}

// remember records that block file k exists; forget, that it may not.
func (r *runner) remember(k claimKey) {
	r.mu.Lock()
	r.seen[k] = struct{}{}
	r.mu.Unlock()
}

func (r *runner) forget(k claimKey) {
	r.mu.Lock()
	delete(r.seen, k)
	r.mu.Unlock()
}

func (r *runner) release(k claimKey) {
	r.mu.Lock()
	ch := r.inflight[k]
	delete(r.inflight, k)
	r.mu.Unlock()
	close(ch)
}

// logf logs one failure in detail while under the cap.
func (r *runner) logf(msg string, args ...any) {
	if r.logged.Add(1) <= int64(r.opts.FailureLogs) {
		r.opts.Logger.Error(msg, args...)
	}
}

// worker handles whole requests; its counters are merged at the end.
type worker struct {
	r          *runner
	id         int
	rbuf, wbuf []byte
	xbuf       []byte
	cnt        []counts         // by host
	tiers      map[string]int64 // hits by tier, all hosts
	lat        []int64          // read latencies, ns
}

// request replays q on host h.
func (w *worker) request(ctx context.Context, h int, q *Request) {
	c := &w.cnt[h]
	c.requests++
	allHit := true
	for _, id := range q.HashIDs {
		if ctx.Err() != nil {
			return
		}
		c.blocks++
		if !w.block(ctx, h, id) {
			allHit = false
		} else if allHit {
			c.prefixHits++ // still inside the request's leading run of hits
		}
	}
	if allHit {
		c.requestHits++
	}
}

// readOutcome is the result of trying to read a block.
type readOutcome int

const (
	readHit readOutcome = iota
	readFailed
	readVanished
)

// block replays one block reference on host h and reports whether it was
// a hit. It looks the file up once per reference, as an engine does, so
// the mount counts the same hits and misses the replay does (package
// hitratio): a block this run has seen is stat'ed at once; one it has not
// is stat'ed under its claim, so a block two workers want at once is
// looked up by one of them while the other waits and then finds it.
func (w *worker) block(ctx context.Context, h int, id int64) bool {
	path := filepath.Join(w.r.hosts[h].mount, w.r.opts.Layout.RelPath(id))
	key := claimKey{dom: w.r.hosts[h].dom, id: id}
	waited := false
	looked := false // a stat in this reference found the file missing
	for attempt := 0; ; attempt++ {
		if attempt < 3 && w.r.known(key) {
			if _, err := os.Stat(path); err == nil {
				switch w.read(h, path, id) {
				case readHit:
					return true
				case readFailed:
					return false
				}
			}
			// Gone (the daemon dropped it) or vanished between stat and
			// open: a miss.
			w.r.forget(key)
			looked = true
		}
		wait, mine := w.r.claim(key)
		if !mine {
			select {
			case <-wait:
			case <-ctx.Done():
				return false
			}
			continue
		}
		if attempt < 3 && !looked {
			if _, err := os.Stat(path); err == nil {
				// There already: from an earlier run, another host, or a
				// writer that finished just before our claim.
				w.r.remember(key)
				if out := w.read(h, path, id); out != readVanished {
					w.r.release(key)
					return out == readHit
				}
				w.r.forget(key)
			}
			looked = true
		}
		if w.r.opts.RetryMissing > 0 && !waited {
			waited = true
			found := w.awaitPeer(ctx, h, path, id)
			if ctx.Err() != nil {
				w.r.release(key)
				return false
			}
			if found {
				out := w.read(h, path, id)
				if out != readVanished {
					w.r.release(key)
					if out == readHit {
						w.cnt[h].retryHits++
					}
					return out == readHit
				}
			}
		}
		if w.write(h, path, id) {
			w.r.remember(key)
		}
		w.r.release(key)
		return false
	}
}

// awaitPeer re-stats path every RetryPoll for up to opts.RetryMissing and
// reports whether the file appeared; it returns false at once when ctx
// ends. The time spent is added to host h's retry wait.
func (w *worker) awaitPeer(ctx context.Context, h int, path string, id int64) bool {
	if f := w.r.opts.afterMiss; f != nil {
		f(h, id)
	}
	t0 := time.Now()
	defer func() { w.cnt[h].retryWaitNs += time.Since(t0).Nanoseconds() }()
	deadline := t0.Add(w.r.opts.RetryMissing)
	tick := time.NewTicker(RetryPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
		if _, err := os.Stat(path); err == nil {
			return true
		}
		if !time.Now().Before(deadline) {
			return false
		}
	}
}

// read handles a block whose file exists on host h.
func (w *worker) read(h int, path string, id int64) readOutcome {
	tier, err := fileTier(path, w.xbuf)
	if errors.Is(err, fs.ErrNotExist) {
		return readVanished
	}
	if err != nil {
		tier = TierUnknown
	}
	n, err := w.readFile(path)
	if errors.Is(err, fs.ErrNotExist) && n < 0 {
		return readVanished
	}
	bb := w.r.opts.BlockBytes
	switch {
	case err != nil:
		// An error is not a wrong byte: nothing was served (a lost file's
		// read gets EIO; a dead daemon's mount ENOTCONN).
		w.r.logf("replay: read error", "path", path, "block", id, "offset", max(n, 0), "err", err)
		w.cnt[h].readErrors++
		return readFailed
	case n < bb:
		w.r.logf("replay: verification failure: short file", "path", path, "block", id, "bytes", n, "want", bb)
	case n > bb:
		w.r.logf("replay: verification failure: file longer than a block", "path", path, "block", id, "want", bb)
	default:
		if off := Verify(id, w.rbuf[:bb]); off >= 0 {
			w.r.logf("replay: verification failure: wrong byte", "path", path, "block", id, "offset", off,
				"got", w.rbuf[off], "want", Expected(id, off))
		} else {
			w.cnt[h].hits++
			w.cnt[h].bytesRead += int64(bb)
			w.tiers[tier]++
			return readHit
		}
	}
	w.cnt[h].verifyFailures++
	return readFailed
}

// readFile opens, reads (into rbuf, up to BlockBytes+1 bytes) and closes
// path, recording the latency. n is -1 when open failed.
func (w *worker) readFile(path string) (int, error) {
	t0 := time.Now()
	f, err := os.Open(path)
	if err != nil {
		return -1, err
	}
	n := 0
	for n < len(w.rbuf) {
		m, err := f.Read(w.rbuf[n:])
		n += m
		if err == io.EOF {
			break
		}
		if err != nil {
			f.Close()
			return n, err
		}
	}
	err = f.Close()
	w.lat = append(w.lat, time.Since(t0).Nanoseconds())
	return n, err
}

// write stores a missing block on host h through a unique temp file and
// rename, and reports whether it did. Directories are made top down and
// the rename is one rename(2) (os.Rename stats the new name first), so
// the mount sees no lookup of a missing name beyond the one stat that
// found the block missing (package hitratio).
func (w *worker) write(h int, path string, id int64) bool {
	w.cnt[h].misses++
	dir := filepath.Dir(path)
	if _, ok := w.r.dirs.Load(dir); !ok {
		if err := mkdirs(w.r.hosts[h].mount, dir); err != nil {
			w.writeErr(h, path, id, err)
			return false
		}
		w.r.dirs.Store(dir, true)
	}
	tmp := path + ".tmp." + strconv.Itoa(os.Getpid()) + "." + strconv.Itoa(w.id) + "." + strconv.FormatInt(w.r.tmpSeq.Add(1), 10)
	Fill(id, w.wbuf)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_TRUNC, 0o644)
	if errors.Is(err, fs.ErrNotExist) { // directory removed behind our back
		if err = mkdirs(w.r.hosts[h].mount, dir); err == nil {
			f, err = os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_TRUNC, 0o644)
		}
	}
	if err != nil {
		w.writeErr(h, path, id, err)
		return false
	}
	_, err = f.Write(w.wbuf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		w.writeErr(h, path, id, err)
		return false
	}
	w.cnt[h].bytesWritten += int64(len(w.wbuf))
	return true
}

// mkdirs makes dir and its missing parents below base (which exists), top
// down: an existing one answers EEXIST from the kernel's cached entry,
// and a missing one costs the LOOKUP the kernel makes before MKDIR only.
func mkdirs(base, dir string) error {
	rel, err := filepath.Rel(base, dir)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return os.MkdirAll(dir, 0o755)
	}
	p := base
	for _, c := range strings.Split(rel, string(filepath.Separator)) {
		p = filepath.Join(p, c)
		if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	return nil
}

func (w *worker) writeErr(h int, path string, id int64, err error) {
	w.cnt[h].writeErrors++
	w.r.logf("replay: write error", "path", path, "block", id, "err", err)
}
