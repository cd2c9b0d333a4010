package fusefs

import (
	"log/slog"
	"sync"

	"github.com/ctxmem/ctxmemd/catalog"
	"github.com/ctxmem/ctxmemd/tiering"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// notifier runs tree changes that do not come from the kernel (objects
// the store lost) and tells the kernel about them, on one goroutine it
// owns. Backend.OnLost only queues: the store may call it while holding
// its own locks or from inside a call made by a FUSE request, and kernel
// notifications can block on a directory lock held by a request in
// progress, so neither may run on the caller's goroutine.
type notifier struct {
	mu    sync.Mutex
	queue []func()
	srv   *fuse.Server // nil until the mount serves
	wake  chan struct{}
	stop  chan struct{}
	done  chan struct{}
}

func newNotifier() *notifier {
	n := &notifier{wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go n.run()
	return n
}

// post queues fn to run on the notifier goroutine.
func (q *notifier) post(fn func()) {
	q.mu.Lock()
	q.queue = append(q.queue, fn)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *notifier) setServer(s *fuse.Server) {
	q.mu.Lock()
	q.srv = s
	q.mu.Unlock()
}

func (q *notifier) server() *fuse.Server {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.srv
}

// close runs what is queued, then stops the goroutine. Kernel
// notifications are dropped from then on.
func (q *notifier) close() {
	q.setServer(nil)
	close(q.stop)
	<-q.done
}

func (q *notifier) run() {
	defer close(q.done)
	for {
		q.mu.Lock()
		batch := q.queue
		q.queue = nil
		q.mu.Unlock()
		for _, fn := range batch {
			fn()
		}
		if len(batch) > 0 {
			continue
		}
		select {
		case <-q.wake:
		case <-q.stop:
			q.mu.Lock()
			batch := q.queue
			q.queue = nil
			q.mu.Unlock()
			for _, fn := range batch {
				fn()
			}
			return
		}
	}
}

// onLost is registered with Backend.OnLost.
func (f *fsys) onLost(id tiering.ObjectID) {
	f.notes.post(func() { f.removeLost(id) })
}

// removeLost removes every name of the file whose object id the store
// lost, releases its quota, and tells the kernel: the names are dropped
// from the dentry cache (the next lookup is ENOENT) and the file's pages
// are dropped from the page cache (readers holding it open get EIO).
func (f *fsys) removeLost(id tiering.ObjectID) {
	f.removeFile(id, whyLost)
}

const whyLost = "object lost"

// removeFile removes every name of the file whose object is id, marks it
// lost (open handles get EIO), releases its quota and tells the kernel.
// It reports whether the file was there.
func (f *fsys) removeFile(id tiering.ObjectID, why string) bool {
	t := &f.t
	t.mu.Lock()
	n := t.byObj[id]
	if n == nil || n.gone {
		t.mu.Unlock()
		return false
	}
	delete(t.byObj, id)
	delete(t.orphans, n)
	links := n.links
	n.links = nil
	n.gone = true
	n.mu.Lock()
	uncount(n)
	n.mu.Unlock()
	n.updateNlink()
	ops := []catalog.Op{catalog.DelNode(n.ino)}
	ts := now()
	for _, l := range links {
		l.parent.dir.Remove(l.name)
		touchTimes(l.parent, ts)
		f.j.Touch(l.parent)
		ops = append(ops, catalog.DelDirent(l.parent.ino, l.name))
	}
	if err := f.j.Apply(ops...); err != nil {
		f.log.Error("fusefs: log removal of a lost file", "err", err)
	}
	t.mu.Unlock()
	f.changed(id)

	n.mu.Lock()
	n.lost = true
	res := n.reserved
	n.setReserved(0)
	// n.size stays: a held descriptor must read EIO from the daemon, and
	// with a size of 0 the kernel would answer its reads with end of file
	// (0 bytes of a file that had bytes) without asking.
	n.mu.Unlock()
	n.ns.Adjust(-res)
	lvl := slog.LevelDebug
	if why == whyLost {
		lvl = slog.LevelWarn
	}
	f.log.Log(f.ctx, lvl, "fusefs: file removed", "why", why, "object", id, "ino", n.ino, "names", len(links))

	srv := f.notes.server()
	if srv == nil {
		return true
	}
	for _, l := range links {
		srv.DeleteNotify(l.parent.ino, n.ino, l.name)
	}
	srv.InodeNotify(n.ino, 0, -1)
	return true
}
