package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/admin"
	"github.com/ctxmem/ctxmemd/tiering"
	"github.com/ctxmem/ctxmemd/tiering/g3"
	"github.com/ctxmem/ctxmemd/tiering/g4"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// serveFake serves p on a fresh socket until the test ends.
func serveFake(t *testing.T, p admin.Provider) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "fk") // short path for the socket
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "admin.sock")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- admin.Serve(ctx, admin.Options{Socket: sock, Provider: p}) }()
	t.Cleanup(func() { cancel(); <-errc })
	for i := 0; ; i++ {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			return sock
		}
		if i > 500 {
			t.Fatal("admin server did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// maintFake is a daemon that answers fsck and gc with fixed reports.
type maintFake struct {
	fakeProvider
	fsck tiering.FsckReport
	gc   tiering.GCReport
	req  *admin.FsckRequest
}

func (m maintFake) Fsck(_ context.Context, req admin.FsckRequest) (tiering.FsckReport, error) {
	*m.req = req
	return m.fsck, nil
}

func (m maintFake) CollectGarbage(context.Context, admin.GCRequest) (tiering.GCReport, error) {
	return m.gc, nil
}

// TestFsckAndGCCommands: fsck prints the daemon's report and exits 1 when
// it lists bad copies, 0 when clean; its flags reach the daemon; gc
// prints what it queued.
func TestFsckAndGCCommands(t *testing.T) {
	var req admin.FsckRequest
	bad := tiering.FsckReport{Drop: true, Objects: 3, Rewritten: 1, LostObjects: 1,
		Tiers: []tiering.FsckTierReport{{Tier: "G3", Checked: 10, Bytes: 9 << 20, Corrupt: 2, Dropped: 2}, {Tier: "G4", Checked: 4, Bytes: 4 << 20}},
		Bad: []tiering.FsckBadCopy{
			{Object: 7, Path: "default/kv/a", Block: 1, Tier: "G3", Problem: tiering.FsckCorrupt, Dropped: true, Outcome: tiering.FsckLost, Error: "payload CRC32C mismatch"},
			{Object: 9, Path: "default/kv/b", Block: 0, Tier: "G3", Problem: tiering.FsckCorrupt, Dropped: true, Outcome: tiering.FsckRewritten, OtherCopies: []string{"G2"}},
		}}
	sock := serveFake(t, maintFake{fsck: bad, req: &req,
		gc: tiering.GCReport{Tiers: []tiering.GCTierReport{{Tier: "G3", Listed: 5}, {Tier: "G4", Listed: 4, Garbage: 1, Bytes: 5000, Queued: 1}}}})
	code, out, errs := ctxmemd(t, "fsck", "--admin", sock, "--drop", "--tier", "g3,G4", "--concurrency", "2", "--rate", "10MiB", "--read-timeout", "5s")
	if code != exitFailure || !strings.Contains(errs, "2 bad copies") {
		t.Fatalf("fsck with bad copies: exit %d: %s", code, errs)
	}
	for _, w := range []string{"TIER", "CORRUPT", "default/kv/a", "no copy left: object lost", "rewritten from G2", "2 bad copies dropped", "1 object lost"} {
		if !strings.Contains(out, w) {
			t.Errorf("fsck output lacks %q:\n%s", w, out)
		}
	}
	if !req.Drop || len(req.Tiers) != 2 || req.Tiers[0] != "G3" || req.Tiers[1] != "G4" || req.Concurrency != 2 ||
		req.BytesPerSecond != 10<<20 || req.ReadTimeoutMS != 5000 {
		t.Errorf("daemon got %+v", req)
	}
	code, out, _ = ctxmemd(t, "fsck", "--admin", sock, "--json")
	var rep tiering.FsckReport
	if code != exitFailure || json.Unmarshal([]byte(out), &rep) != nil || rep.BadCopies() != 2 || rep.Bad[0].Path != "default/kv/a" {
		t.Errorf("fsck --json: exit %d: %s", code, out)
	}
	code, out, errs = ctxmemd(t, "gc", "--admin", sock)
	if code != 0 || !strings.Contains(out, "1 copy (4.9 KiB) no live block uses, queued") {
		t.Errorf("gc: exit %d: %s %s", code, out, errs)
	}

	clean := serveFake(t, maintFake{fsck: tiering.FsckReport{Objects: 1, Tiers: []tiering.FsckTierReport{{Tier: "G3", Checked: 3, Bytes: 3 << 20}}}, req: &req})
	if code, out, errs := ctxmemd(t, "fsck", "--admin", clean); code != 0 || !strings.Contains(out, "fsck: clean: 3 copies of 1 object verified") {
		t.Errorf("clean fsck: exit %d: %s %s", code, out, errs)
	}
	for _, args := range [][]string{
		{"fsck", "--admin", clean, "--tier", "G5"},
		{"fsck", "--admin", clean, "--concurrency", "0"},
		{"fsck", "--admin", clean, "--rate", "fast"},
		{"fsck", "--admin", clean, "extra"},
		{"fsck", "--offline", "--drop"},
		{"gc", "--admin", clean, "extra"},
	} {
		if code, _, errs := ctxmemd(t, args...); code != exitUsage {
			t.Errorf("%v: exit %d (want 2): %s", args, code, errs)
		}
	}
	if code, _, errs := ctxmemd(t, "fsck", "--admin", filepath.Join(t.TempDir(), "none.sock")); code != exitNotRunning || !strings.Contains(errs, "--offline") {
		t.Errorf("no daemon: exit %d: %s", code, errs)
	}
}

// TestFsckOffline: fsck --offline verifies a stopped daemon's G3 segments
// and local G4 read-only, finds a flipped byte in each and exits 1; it
// refuses (exit 2) while a store holds G3's lock or a daemon answers on
// the admin socket.
func TestFsckOffline(t *testing.T) {
	ctx := context.Background()
	root, err := os.MkdirTemp("", "fo")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	data := filepath.Join(root, "data")
	cfgFile := filepath.Join(root, "c.yaml")
	if err := os.WriteFile(cfgFile, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	key := func(i uint64) tier.Key { return tier.Key{Namespace: "default", Object: i, Index: 0, Gen: 1} }
	payload := func(i uint64) []byte { return bytes.Repeat([]byte{byte('a' + i), byte(i), 0x5a, 0xc3}, 4096) }
	g3s, err := g3.Open(g3.Options{Dir: filepath.Join(data, "g3"), SegmentBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	for i := range uint64(3) {
		if err := g3s.Put(ctx, key(i), payload(i)); err != nil {
			t.Fatal(err)
		}
	}
	g3s.Close()
	local, err := g4.NewLocal(filepath.Join(data, "g4"))
	if err != nil {
		t.Fatal(err)
	}
	t4, err := g4.NewTier(ctx, local, g4.TierOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range uint64(2) {
		if err := t4.Put(ctx, key(10+i), payload(10+i)); err != nil {
			t.Fatal(err)
		}
	}
	flip := func(path string, needle []byte) {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		i := bytes.Index(b, needle)
		if i < 0 {
			t.Fatalf("payload not in %s", path)
		}
		b[i+3] ^= 0x01
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	segs, _ := filepath.Glob(filepath.Join(data, "g3", "*.seg"))
	flip(segs[0], payload(1)[:64])
	p, _ := local.Path(t4.ObjectName(key(11)))
	flip(p, payload(11)[:64])

	args := []string{"fsck", "--offline", "--config", cfgFile, "--data-dir", data}
	code, out, errs := ctxmemd(t, append(args, "--json")...)
	var rep struct {
		Offline bool            `json:"offline"`
		G3      g3.VerifyReport `json:"g3"`
		G4      g4.VerifyReport `json:"g4"`
	}
	if code != exitFailure || json.Unmarshal([]byte(out), &rep) != nil || !rep.Offline || rep.G3.Records != 3 || rep.G3.Corrupt != 1 ||
		rep.G3.Bad[0].Object != 1 || rep.G4.Objects != 2 || rep.G4.Corrupt != 1 || rep.G4.Bad[0].Object != 11 {
		t.Fatalf("fsck --offline --json: exit %d: %s %s", code, out, errs)
	}
	code, out, _ = ctxmemd(t, args...)
	for _, w := range []string{"payload CRC32C mismatch", "2 problems", "nothing changed"} {
		if code != exitFailure || !strings.Contains(out, w) {
			t.Errorf("fsck --offline (exit %d) lacks %q:\n%s", code, w, out)
		}
	}
	if code, out, _ := ctxmemd(t, append(args, "--tier", "G4")...); code != exitFailure || strings.Contains(out, "segment") {
		t.Errorf("fsck --offline --tier G4: exit %d:\n%s", code, out)
	}

	// A store holding G3's lock, then a daemon answering on the socket.
	g3s, err = g3.Open(g3.Options{Dir: filepath.Join(data, "g3"), SegmentBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	code, _, errs = ctxmemd(t, args...)
	g3s.Close()
	if code != exitUsage || !strings.Contains(errs, "in use") {
		t.Errorf("offline with G3 open: exit %d: %s", code, errs)
	}
	sock := serveFake(t, fakeProvider{})
	if code, _, errs := ctxmemd(t, append(args, "--admin", sock)...); code != exitUsage || !strings.Contains(errs, "is running") {
		t.Errorf("offline with a daemon: exit %d: %s", code, errs)
	}
}
