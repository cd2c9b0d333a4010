package fusefs

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/ctxmem/ctxmemd/tiering"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// importObject creates an object holding data in be, as a Remote's Import
// does for a shared file of namespace ns (kind "" means ObjectKind).
func importObject(be *fakeBackend, ns string, data []byte, kind string) (tiering.ObjectID, error) {
	if kind == "" {
		kind = ObjectKind
	}
	id, err := be.Create(ns, DefaultBlockSize, kind)
	if err != nil {
		return 0, err
	}
	if len(data) > 0 {
		if _, err := be.WriteAt(context.Background(), id, data, 0); err != nil {
			return 0, err
		}
	}
	return id, nil
}

// fakeRemote shares the files of its map ("ns/path" → bytes).
type fakeRemote struct {
	be *fakeBackend

	mu      sync.Mutex
	shared  map[string][]byte
	kind    string // object kind Import creates ("" = ObjectKind)
	fail    error  // returned by Import
	imports map[string]int
	ids     []tiering.ObjectID // every object Import created
	missed  map[string]int
	calls   []string // "op ns/path", every call
	entered chan string
	gate    chan struct{} // Import waits for it to close
}

func newFakeRemote(be *fakeBackend) *fakeRemote {
	return &fakeRemote{be: be, shared: map[string][]byte{}, imports: map[string]int{}, missed: map[string]int{}}
}

func (r *fakeRemote) share(key string, data []byte) {
	r.mu.Lock()
	r.shared[key] = data
	r.mu.Unlock()
}

func (r *fakeRemote) Import(ctx context.Context, ns, path string) (tiering.ObjectID, int64, bool, error) {
	key := ns + "/" + path
	r.mu.Lock()
	r.calls = append(r.calls, "import "+key)
	data, ok := r.shared[key]
	kind, fail, entered, gate := r.kind, r.fail, r.entered, r.gate
	r.mu.Unlock()
	if entered != nil {
		entered <- key
	}
	if gate != nil {
		<-gate
	}
	if fail != nil {
		return 0, 0, false, fail
	}
	if !ok {
		return 0, 0, false, nil
	}
	id, err := importObject(r.be, ns, data, kind)
	if err != nil {
		return 0, 0, false, err
	}
	r.mu.Lock()
	r.imports[key]++
	r.ids = append(r.ids, id)
	r.mu.Unlock()
	return id, int64(len(data)), true, nil
}

func (r *fakeRemote) HasDir(ns, path string) bool {
	prefix := ns + "/" + path + "/"
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, "hasdir "+ns+"/"+path)
	for k := range r.shared {
		if strings.HasPrefix(k, prefix) {
			return true
		}
	}
	return false
}

func (r *fakeRemote) Missed(ns, path string) {
	r.mu.Lock()
	r.missed[ns+"/"+path]++
	r.calls = append(r.calls, "missed "+ns+"/"+path)
	r.mu.Unlock()
}

func (r *fakeRemote) nImports(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.imports[key]
}

func (r *fakeRemote) nMissed(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.missed[key]
}

func (r *fakeRemote) importedIDs() []tiering.ObjectID {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ids)
}

var _ Remote = (*fakeRemote)(nil)

// remoteMount mounts a fake backend shared through a fake remote, with
// namespace "m" (uid 1000, gid 1001, mode 0750) and any extra namespaces.
func remoteMount(t *testing.T, extra ...Namespace) (*testMount, *fakeRemote) {
	t.Helper()
	be := newFakeBackend()
	r := newFakeRemote(be)
	nss := append([]Namespace{{Name: "m", UID: 1000, GID: 1001, Mode: 0o750}}, extra...)
	return mount(t, be, Options{Namespaces: nss, Remote: r}), r
}

func statT(t *testing.T, p string) *syscall.Stat_t {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatalf("stat %s: %v", p, err)
	}
	return fi.Sys().(*syscall.Stat_t)
}

// TestRemoteImportNested: a shared nested file appears on stat (its
// directory synthesized first) and on open, reads back the object's
// bytes, and stays after a restart without being imported again.
func TestRemoteImportNested(t *testing.T) {
	m, r := remoteMount(t)
	blk0, blk1 := pattern(1, 300000), pattern(2, 5000)
	r.share("m/s1/blk0", blk0)
	r.share("m/s2/sub/blk1", blk1)
	d := m.ns("m")

	st := statT(t, d+"/s1/blk0")
	if st.Mode != syscall.S_IFREG|0o644 || st.Uid != 1000 || st.Gid != 1001 || st.Size != int64(len(blk0)) || st.Nlink != 1 {
		t.Fatalf("imported file: mode %o uid %d gid %d size %d nlink %d", st.Mode, st.Uid, st.Gid, st.Size, st.Nlink)
	}
	if dst := statT(t, d+"/s1"); dst.Mode != syscall.S_IFDIR|0o750 || dst.Uid != 1000 || dst.Gid != 1001 {
		t.Fatalf("synthesized dir: mode %o uid %d gid %d", dst.Mode, dst.Uid, dst.Gid)
	}
	if got, err := os.ReadFile(d + "/s1/blk0"); err != nil || !bytes.Equal(got, blk0) {
		t.Fatalf("read imported file: %d bytes, %v", len(got), err)
	}
	// Open first (no stat before): two directories, then the file.
	if got, err := os.ReadFile(d + "/s2/sub/blk1"); err != nil || !bytes.Equal(got, blk1) {
		t.Fatalf("open+read imported file: %d bytes, %v", len(got), err)
	}
	ids := r.importedIDs()
	if len(ids) != 2 || m.obj(d+"/s1/blk0") != ids[0] || m.obj(d+"/s2/sub/blk1") != ids[1] {
		t.Fatalf("imported objects %v, tree has %d and %d", ids, m.obj(d+"/s1/blk0"), m.obj(d+"/s2/sub/blk1"))
	}
	if used := m.srv.fsys.nss[0].Used(); used != int64(len(blk0)+len(blk1)) {
		t.Errorf("namespace usage %d, want %d", used, len(blk0)+len(blk1))
	}
	// An imported file is an ordinary local file: writable, its name and
	// directory survive a restart.
	if err := os.WriteFile(d+"/s1/local", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := statT(t, d+"/s1/blk0")
	m.restart()
	ents, err := os.ReadDir(d + "/s1")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"blk0", "local"}) {
		t.Fatalf("s1 after restart: %v", names)
	}
	after := statT(t, d+"/s1/blk0")
	if after.Ino != before.Ino || after.Size != before.Size || after.Mode != before.Mode || after.Uid != before.Uid {
		t.Errorf("after restart: %+v, before %+v", after, before)
	}
	if got, err := os.ReadFile(d + "/s2/sub/blk1"); err != nil || !bytes.Equal(got, blk1) {
		t.Fatalf("read after restart: %d bytes, %v", len(got), err)
	}
	if r.nImports("m/s1/blk0") != 1 || r.nImports("m/s2/sub/blk1") != 1 {
		t.Errorf("imports %v, want one each", r.imports)
	}
	if used := m.srv.fsys.nss[0].Used(); used != int64(len(blk0)+len(blk1)+1) {
		t.Errorf("namespace usage after restart %d, want %d", used, len(blk0)+len(blk1)+1)
	}
}

// TestRemoteMissThenShared: a name neither local nor shared is ENOENT and
// reported once per lookup (the kernel caches no negative entry); once it
// is shared, the next lookup finds it without a remount.
func TestRemoteMissThenShared(t *testing.T) {
	m, r := remoteMount(t)
	d := m.ns("m")
	for i := 1; i <= 3; i++ {
		if _, err := os.Stat(d + "/x"); !errors.Is(err, syscall.ENOENT) {
			t.Fatalf("stat of an unshared name: %v, want ENOENT", err)
		}
		if n := r.nMissed("m/x"); n != i {
			t.Fatalf("after %d lookups Missed was called %d times", i, n)
		}
	}
	if _, err := os.Stat(d + "/late/f"); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("stat under an unshared dir: %v", err)
	}
	if r.nMissed("m/late") != 1 || r.nMissed("m/late/f") != 0 {
		t.Fatalf("missed %v", r.missed)
	}

	r.share("m/x", []byte("hello"))
	r.share("m/late/f", []byte("world"))
	if got, err := os.ReadFile(d + "/x"); err != nil || string(got) != "hello" {
		t.Fatalf("shared later: %q %v", got, err)
	}
	if got, err := os.ReadFile(d + "/late/f"); err != nil || string(got) != "world" {
		t.Fatalf("shared later under a new dir: %q %v", got, err)
	}
	if r.nMissed("m/x") != 3 || r.nMissed("m/late") != 1 {
		t.Errorf("missed %v after the names were shared", r.missed)
	}
	// A file created after a miss is a plain local file.
	if err := os.WriteFile(d+"/y", []byte("local"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r.nImports("m/y") != 0 {
		t.Error("a local create imported")
	}
	// The mount root is not resolved remotely.
	if _, err := os.Stat(filepath.Join(m.mnt, "nons")); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("stat of an unknown namespace: %v", err)
	}
	r.mu.Lock()
	for _, c := range r.calls {
		if strings.Contains(c, "nons") {
			t.Errorf("remote asked about the mount root: %q", c)
		}
	}
	r.mu.Unlock()
}

// TestRemoteConcurrentImport: racing lookups of one shared name link one
// file; the objects of the losers are deleted and counted nowhere.
func TestRemoteConcurrentImport(t *testing.T) {
	m, r := remoteMount(t)
	d := m.ns("m")
	data := pattern(3, 70000)
	r.share("m/c", data)
	const racers = 4
	r.mu.Lock()
	r.entered = make(chan string, racers)
	r.gate = make(chan struct{})
	r.mu.Unlock()

	dn := &dirNode{fsys: m.srv.fsys, n: m.node(d)}
	type res struct {
		n *node
		e syscall.Errno
	}
	out := make(chan res, racers)
	for range racers {
		go func() {
			n, e := dn.lookupRemote("c", &fuse.EntryOut{})
			out <- res{n, e}
		}()
	}
	for range racers {
		<-r.entered // every racer is inside Import
	}
	r.mu.Lock()
	close(r.gate)
	r.gate, r.entered = nil, nil
	r.mu.Unlock()
	var won *node
	for range racers {
		x := <-out
		if x.e != 0 || x.n == nil {
			t.Fatalf("racing lookup: %v", x.e)
		}
		if won != nil && x.n != won {
			t.Fatal("racing lookups returned different nodes")
		}
		won = x.n
	}
	ids := r.importedIDs()
	if len(ids) != racers {
		t.Fatalf("%d imports, want %d", len(ids), racers)
	}
	for _, id := range ids {
		if live := m.be.exists(id); live != (id == won.obj) {
			t.Errorf("object %d exists=%v (winner %d)", id, live, won.obj)
		}
	}
	if used := m.srv.fsys.nss[0].Used(); used != int64(len(data)) {
		t.Errorf("namespace usage %d, want %d", used, len(data))
	}
	if got, err := os.ReadFile(d + "/c"); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read: %d bytes, %v", len(got), err)
	}

	// Through the kernel: concurrent stats of a new shared name.
	r.share("m/k", data)
	var wg sync.WaitGroup
	inos := make([]uint64, 8)
	for i := range inos {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if fi, err := os.Stat(d + "/k"); err == nil {
				inos[i] = fi.Sys().(*syscall.Stat_t).Ino
			}
		}()
	}
	wg.Wait()
	for _, ino := range inos {
		if ino == 0 || ino != inos[0] {
			t.Fatalf("concurrent stats: inodes %v", inos)
		}
	}
	live := 0
	for _, id := range r.importedIDs() {
		if m.be.exists(id) {
			live++
		}
	}
	if live != 2 || m.obj(d+"/k") == won.obj {
		t.Errorf("%d imported objects live, want 2", live)
	}
}

// TestRemoteQuota: an import that does not fit the namespace quota is
// EDQUOT and its object deleted.
func TestRemoteQuota(t *testing.T) {
	const quota = 1 << 20
	m, r := remoteMount(t, Namespace{Name: "q", Mode: 0o777, QuotaBytes: quota})
	d := m.ns("q")
	q := m.srv.fsys.nss[1]
	r.share("q/big", make([]byte, quota+1))
	if _, err := os.Stat(d + "/big"); !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("import past the quota: %v, want EDQUOT", err)
	}
	ids := r.importedIDs()
	if len(ids) != 1 || m.be.exists(ids[0]) {
		t.Fatalf("refused import: objects %v still exist", ids)
	}
	if q.Used() != 0 || m.node(d+"/big") != nil {
		t.Fatalf("refused import left usage %d or a name", q.Used())
	}
	r.share("q/half", make([]byte, quota/2))
	r.share("q/more", make([]byte, quota/2+1))
	if _, err := os.Stat(d + "/half"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(d + "/more"); !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("second import past the quota: %v", err)
	}
	if q.Used() != quota/2 {
		t.Fatalf("usage %d, want %d", q.Used(), quota/2)
	}
	// Local writes see the imported file's usage.
	if err := os.WriteFile(d+"/w", make([]byte, quota/2+1), 0o644); !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("local write past the quota: %v", err)
	}
	ids = r.importedIDs()
	if len(ids) != 3 || !m.be.exists(ids[1]) || m.be.exists(ids[2]) {
		t.Fatalf("objects %v: want only the second live", ids)
	}
}

// TestRemoteFailures: Import errors, objects of the wrong kind, and a
// directory removed while Import runs.
func TestRemoteFailures(t *testing.T) {
	m, r := remoteMount(t)
	d := m.ns("m")
	r.share("m/f", []byte("abc"))

	r.mu.Lock()
	r.fail = errors.New("pool unreachable")
	r.mu.Unlock()
	objs := m.be.count()
	if _, err := os.Stat(d + "/f"); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Import error: %v, want EIO", err)
	}
	r.mu.Lock()
	r.fail, r.kind = nil, "nbd"
	r.mu.Unlock()
	if _, err := os.Stat(d + "/f"); !errors.Is(err, syscall.EIO) {
		t.Fatalf("object of another kind: %v, want EIO", err)
	}
	if ids := r.importedIDs(); len(ids) != 1 || !m.be.exists(ids[0]) || m.be.count() != objs+1 {
		t.Fatalf("an object of another kind must be left alone: %v", ids)
	}
	r.mu.Lock()
	r.kind = ""
	r.mu.Unlock()
	if got, err := os.ReadFile(d + "/f"); err != nil || string(got) != "abc" {
		t.Fatalf("after failures: %q %v", got, err)
	}

	// The directory is removed while Import runs: ENOENT, object deleted.
	if err := os.Mkdir(d+"/gone", 0o755); err != nil {
		t.Fatal(err)
	}
	r.share("m/gone/g", []byte("x"))
	dn := &dirNode{fsys: m.srv.fsys, n: m.node(d + "/gone")}
	r.mu.Lock()
	r.entered = make(chan string, 1)
	r.gate = make(chan struct{})
	gate := r.gate
	r.mu.Unlock()
	done := make(chan syscall.Errno, 1)
	go func() {
		_, e := dn.lookupRemote("g", &fuse.EntryOut{})
		done <- e
	}()
	<-r.entered
	if err := os.Remove(d + "/gone"); err != nil {
		t.Fatal(err)
	}
	close(gate)
	if e := <-done; e != syscall.ENOENT {
		t.Fatalf("import into a removed dir: %v, want ENOENT", e)
	}
	ids := r.importedIDs()
	if last := ids[len(ids)-1]; m.be.exists(last) {
		t.Fatalf("object %d of a failed import not deleted", last)
	}
	if used := m.srv.fsys.nss[0].Used(); used != 3 {
		t.Fatalf("usage %d, want 3", used)
	}
}

// TestRemoteNegativeCache: with or without Remote, only the mount root
// keeps go-fuse's cached negative entry (EntryTimeout left 0,
// NegativeTimeout applied); a failed lookup inside a namespace is a KV
// miss and is never cached.
func TestRemoteNegativeCache(t *testing.T) {
	plain := mount(t, nil, Options{})
	f := plain.srv.fsys
	if f.opts.Remote != nil {
		t.Fatal("Remote set by default")
	}
	for i, n := range []*node{f.nss[0].root, f.t.root} {
		var out fuse.EntryOut
		_, e := (&dirNode{fsys: f, n: n}).Lookup(context.Background(), "nope", &out)
		if cached := out.EntryTimeout() == 0; e != syscall.ENOENT || cached != (i == 1) {
			t.Fatalf("Remote nil, node %d: %v, entry timeout %v", i, e, out.EntryTimeout())
		}
	}
	if _, err := os.Stat(plain.ns("") + "/nope"); !errors.Is(err, syscall.ENOENT) {
		t.Fatal(err)
	}
	if err := os.WriteFile(plain.ns("")+"/nope", []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}

	m, r := remoteMount(t)
	g := m.srv.fsys
	var out fuse.EntryOut
	if _, e := (&dirNode{fsys: g, n: g.nss[0].root}).Lookup(context.Background(), "nope", &out); e != syscall.ENOENT || out.EntryTimeout() == 0 {
		t.Fatalf("Remote set, namespace: %v, entry timeout %v", e, out.EntryTimeout())
	}
	out = fuse.EntryOut{}
	if _, e := (&dirNode{fsys: g, n: g.t.root}).Lookup(context.Background(), "nope", &out); e != syscall.ENOENT || out.EntryTimeout() != 0 {
		t.Fatalf("Remote set, root: %v, entry timeout %v", e, out.EntryTimeout())
	}
	if r.nMissed("m/nope") != 1 {
		t.Fatalf("missed %v", r.missed)
	}
}
