package nbd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxmem/ctxmemd/catalog"
	"github.com/ctxmem/ctxmemd/tiering"
)

func TestExportValidation(t *testing.T) {
	good := Export{Name: "a", Size: 1 << 20}
	e, err := good.withDefaults()
	if err != nil || e.Namespace != DefaultNamespace || e.BlockSize != DefaultBlockSize || e.MinBlockSize != DefaultMinBlockSize {
		t.Fatalf("defaults: %+v %v", e, err)
	}
	for _, bad := range []Export{
		{Size: 1 << 20},
		{Name: "nul\x00", Size: 1 << 20},
		{Name: "bad\xff", Size: 1 << 20},
		{Name: strings.Repeat("x", 4097), Size: 1 << 20},
		{Name: "a", Size: 0},
		{Name: "a", Size: 1000}, // not a multiple of 512
		{Name: "a", Size: 1 << 20, BlockSize: 3000},
		{Name: "a", Size: 1 << 20, BlockSize: 2048},
		{Name: "a", Size: 1 << 20, BlockSize: 8 << 20},
		{Name: "a", Size: 1 << 20, MinBlockSize: 3},
		{Name: "a", Size: 1 << 20, MinBlockSize: 128 << 10},
	} {
		if _, err := bad.withDefaults(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	if _, err := (Export{Name: "odd", Size: 1001, MinBlockSize: 1}).withDefaults(); err != nil {
		t.Errorf("byte-granular export refused: %v", err)
	}
}

// TestRestartInProcess: bytes written and flushed through NBD are served
// again, under the same name, after the server and the store are closed
// and reopened on the same directories.
func TestRestartInProcess(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir, 64<<20)
	exps := []Export{{Name: "disk", Size: 4 << 20, BlockSize: 4096}}
	r := serve(t, st, dir, exps, Options{})
	c := structuredClient(t, r, "disk")
	d := pattern(21, 1<<20)
	if rep := c.do(cmdWrite, 0, 512<<10, uint32(len(d)), d); rep.errno != 0 {
		t.Fatal(rep.errno)
	}
	if rep := c.do(cmdFlush, 0, 0, 0, nil); rep.errno != 0 {
		t.Fatal(rep.errno)
	}
	id := r.srv.Exports()[0].Object
	r.stop()
	st.close(t)

	st = openStore(t, dir, 64<<20)
	defer st.close(t)
	// Grown in the config: the bytes stay, the tail is a hole.
	exps[0].Size = 8 << 20
	r = serve(t, st, dir, exps, Options{})
	if got := r.srv.Exports()[0].Object; got != id {
		t.Fatalf("export bound to object %d after restart, want %d", got, id)
	}
	c = structuredClient(t, r, "disk")
	if c.size != 8<<20 {
		t.Fatalf("size after growing: %d", c.size)
	}
	if got := c.do(cmdRead, 0, 512<<10, uint32(len(d)), nil).readData(t, 512<<10, len(d)); !bytes.Equal(got, d) {
		t.Fatal("flushed bytes not served after restart")
	}
	r.stop()

	// Shrinking is refused.
	exps[0].Size = 1 << 20
	if _, err := NewServer(context.Background(), st, exps, Options{StateDir: dir, Logger: testLogger()}); err == nil {
		t.Fatal("shrinking an export accepted")
	}
	// A duplicate name is refused.
	if _, err := NewServer(context.Background(), st, []Export{{Name: "a", Size: 1 << 20}, {Name: "a", Size: 1 << 20}}, Options{StateDir: dir}); err == nil {
		t.Fatal("duplicate export accepted")
	}
}

func TestNewServerBinding(t *testing.T) {
	st := newStore(t, 64<<20)
	dir := t.TempDir()
	// An empty NBD object no map names is an orphan (a crash between
	// Create and the map update) and is deleted; a FUSE file is not touched.
	orphan, _ := st.CreateWith("nbd", 4096, tiering.CreateOptions{Kind: tiering.KindNBD, Durability: tiering.DurabilityDevice})
	file, _ := st.Create("nbd", 4096, "file")
	srv, err := NewServer(context.Background(), st, []Export{{Name: "a", Size: 1 << 20}}, Options{StateDir: dir, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Stat(orphan); !errors.Is(err, tiering.ErrNotExist) {
		t.Errorf("orphan not deleted: %v", err)
	}
	if _, err := st.Stat(file); err != nil {
		t.Errorf("file object touched: %v", err)
	}
	id := srv.Exports()[0].Object
	info, err := st.Stat(id)
	if err != nil || info.Kind != tiering.KindNBD || info.Durability != tiering.DurabilityDevice || info.Size != 1<<20 || info.BlockSize != DefaultBlockSize {
		t.Fatalf("export object: %+v %v", info, err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, StateFile))
	var doc catalog.ExportMap
	if err := json.Unmarshal(b, &doc); err != nil || doc.Exports["a"].ID != id {
		t.Fatalf("state file %s", b)
	}

	// The map names an object of another kind: refused.
	doc.Exports["a"] = catalog.ExportEntry{ID: file, Namespace: "nbd"}
	if err := doc.Save(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := NewServer(context.Background(), st, []Export{{Name: "a", Size: 1 << 20}}, Options{StateDir: dir, Logger: testLogger()}); err == nil {
		t.Fatal("export bound to a FUSE file")
	}
	// The map names an object labelled nbd but of the cache class (one an
	// export must never be: it could be dropped): refused too.
	cache, _ := st.Create("nbd", 4096, tiering.KindNBD)
	if err := st.Truncate(context.Background(), cache, 4096); err != nil {
		t.Fatal(err)
	}
	doc.Exports["a"] = catalog.ExportEntry{ID: cache, Namespace: "nbd"}
	if err := doc.Save(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := NewServer(context.Background(), st, []Export{{Name: "a", Size: 1 << 20}}, Options{StateDir: dir, Logger: testLogger()}); err == nil || !strings.Contains(err.Error(), "durability class cache") {
		t.Fatalf("export bound to a cache-class object: %v", err)
	}
	// The object is gone (dropped by the store): a new, empty one.
	if err := st.Delete(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	doc.Exports["a"] = catalog.ExportEntry{ID: id, Namespace: "nbd"}
	if err := doc.Save(dir); err != nil {
		t.Fatal(err)
	}
	srv, err = NewServer(context.Background(), st, []Export{{Name: "a", Size: 1 << 20}}, Options{StateDir: dir, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if got := srv.Exports()[0].Object; got == id {
		t.Fatal("export still bound to a deleted object")
	}
	if _, err := NewServer(context.Background(), st, nil, Options{StateDir: dir}); err == nil {
		t.Fatal("no exports accepted")
	}
	if _, err := NewServer(context.Background(), st, []Export{{Name: "a", Size: 1 << 20}}, Options{}); err == nil {
		t.Fatal("missing StateDir accepted")
	}
}

func TestBufPoolAndBudget(t *testing.T) {
	p := newBufPool()
	for _, n := range []int{1, 4096, 4097, 65536, 100000, MaxPayload} {
		b := p.get(n)
		if len(b) != n || cap(b) < n || cap(b)&(cap(b)-1) != 0 {
			t.Fatalf("get(%d): len %d cap %d", n, len(b), cap(b))
		}
		p.put(b)
	}
	bg := newBudget(100)
	stop := make(chan struct{})
	if !bg.acquire(60, stop) || !bg.acquire(40, stop) {
		t.Fatal("acquire within the limit failed")
	}
	got := make(chan bool)
	go func() { got <- bg.acquire(50, stop) }()
	bg.release(60)
	if !<-got {
		t.Fatal("acquire after release failed")
	}
	go func() { got <- bg.acquire(80, stop) }()
	close(stop)
	if <-got {
		t.Fatal("acquire over the limit succeeded after stop")
	}
	// A request larger than the whole budget still gets in alone.
	big := newBudget(10)
	if !big.acquire(1000, make(chan struct{})) {
		t.Fatal("oversized acquire on an idle budget failed")
	}
}
