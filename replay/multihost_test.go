package replay

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// model is an independent infinite-cache model of a multi-host replay:
// per host, a reference to an id already seen on that host is a hit.
type model struct {
	requests, blocks, hits, misses []int64
	ids                            []map[int64]bool
}

func newModel(reqs []Request, n int, route func(i int, q *Request) int) model {
	m := model{make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]map[int64]bool, n)}
	for h := range n {
		m.ids[h] = map[int64]bool{}
	}
	for i := range reqs {
		h := route(i, &reqs[i])
		m.requests[h]++
		for _, id := range reqs[i].HashIDs {
			m.blocks[h]++
			if m.ids[h][id] {
				m.hits[h]++
			} else {
				m.misses[h]++
				m.ids[h][id] = true
			}
		}
	}
	return m
}

func dirs(t *testing.T, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = t.TempDir()
	}
	return out
}

// checkSums checks that the totals are the sums of the host rows.
func checkSums(t *testing.T, res Result) {
	t.Helper()
	var s HostResult
	for _, h := range res.Hosts {
		s.Requests += h.Requests
		s.RequestHits += h.RequestHits
		s.Blocks += h.Blocks
		s.BlockHits += h.BlockHits
		s.BlockMisses += h.BlockMisses
		s.RetryHits += h.RetryHits
		s.VerifyFailures += h.VerifyFailures
		s.WriteErrors += h.WriteErrors
		s.BytesRead += h.BytesRead
		s.BytesWritten += h.BytesWritten
	}
	if s.Requests != res.Requests || s.RequestHits != res.RequestHits || s.Blocks != res.Blocks ||
		s.BlockHits != res.BlockHits || s.BlockMisses != res.BlockMisses || s.RetryHits != res.RetryHits ||
		s.VerifyFailures != res.VerifyFailures || s.WriteErrors != res.WriteErrors ||
		s.BytesRead != res.BytesRead || s.BytesWritten != res.BytesWritten {
		t.Errorf("host rows sum to %+v, totals %+v", s, res)
	}
}

// blockFiles lists the block ids present in dir (flat layout).
func blockFiles(t *testing.T, dir string, ids []int64) map[int64]bool {
	t.Helper()
	out := map[int64]bool{}
	for _, id := range ids {
		if _, err := os.Stat(filepath.Join(dir, LayoutFlat.RelPath(id))); err == nil {
			out[id] = true
		}
	}
	return out
}

func TestMultiHostRoundRobin(t *testing.T) {
	reqs := synthetic()
	m := newModel(reqs, 3, func(i int, _ *Request) int { return i % 3 })
	for _, conc := range []int{1, 3} {
		mounts := dirs(t, 3)
		res, err := Run(context.Background(), reqs, Options{Mounts: mounts, BlockBytes: bb, Concurrency: conc})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Hosts) != 3 || res.Spread != "rr" || res.Mount != strings.Join(mounts, ",") {
			t.Fatalf("conc %d: hosts %d spread %q mount %q", conc, len(res.Hosts), res.Spread, res.Mount)
		}
		checkSums(t, res)
		for h, r := range res.Hosts {
			if r.Host != h || r.Mount != mounts[h] || r.Requests != m.requests[h] || r.Blocks != m.blocks[h] ||
				r.BlockHits != m.hits[h] || r.BlockMisses != m.misses[h] || r.VerifyFailures != 0 ||
				r.BlockHitRatio != float64(m.hits[h])/float64(m.blocks[h]) || r.BytesWritten != m.misses[h]*bb {
				t.Errorf("conc %d host %d: %+v, model req %d blocks %d hits %d misses %d", conc, h, r,
					m.requests[h], m.blocks[h], m.hits[h], m.misses[h])
			}
			// Each host wrote exactly its own distinct blocks into its own mount.
			got := blockFiles(t, mounts[h], []int64{1, 2, 3, 4, 5, 6, 7})
			if len(got) != len(m.ids[h]) {
				t.Errorf("host %d mount holds %v, want %v", h, got, m.ids[h])
			}
			for id := range m.ids[h] {
				if !got[id] {
					t.Errorf("host %d mount lacks block %d", h, id)
				}
			}
		}
		// Round robin over 3 hosts loses reuse: 17 refs, 3 hits (10 on one host).
		if res.Blocks != 17 || res.BlockHits != 3 || res.BlockHitRatio != 3.0/17 {
			t.Errorf("conc %d totals: %+v", conc, res)
		}
	}
}

func TestMissOnOtherHost(t *testing.T) {
	mounts := dirs(t, 3)
	same := []int64{1, 2, 3}
	reqs := []Request{{HashIDs: same}, {HashIDs: same}, {HashIDs: same}, {HashIDs: same}}
	res, err := Run(context.Background(), reqs, Options{Mounts: mounts, BlockBytes: bb, Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	checkSums(t, res)
	want := [][3]int64{{6, 3, 3}, {3, 0, 3}, {3, 0, 3}} // blocks, hits, misses
	for h, r := range res.Hosts {
		if r.Blocks != want[h][0] || r.BlockHits != want[h][1] || r.BlockMisses != want[h][2] {
			t.Errorf("host %d: %+v, want blocks/hits/misses %v", h, r, want[h])
		}
	}
	if res.RequestHits != 1 || res.Hosts[0].RequestHits != 1 {
		t.Errorf("request hits %d (host 0 %d), want 1", res.RequestHits, res.Hosts[0].RequestHits)
	}
	// The bytes a block has depend only on its id: every host wrote the same file.
	a, _ := os.ReadFile(filepath.Join(mounts[0], LayoutFlat.RelPath(2)))
	for h := 1; h < 3; h++ {
		b, _ := os.ReadFile(filepath.Join(mounts[h], LayoutFlat.RelPath(2)))
		if len(a) != bb || !bytes.Equal(a, b) {
			t.Errorf("block 2 differs between host 0 and host %d", h)
		}
	}
}

// TestSameDirectoryIsSingleMount: three hosts on one directory (one
// through a symlink) share everything, so they see exactly the hits of a
// single-mount replay — the upper bound of cross-host sharing.
func TestSameDirectoryIsSingleMount(t *testing.T) {
	mooncake, err := LoadTrace("", 100) // the bundled trace
	if err != nil {
		t.Fatal(err)
	}
	traces := map[string][]Request{"synthetic": synthetic(), "mooncake-100": mooncake}
	for name, reqs := range traces {
		single, err := Run(context.Background(), reqs, Options{Mount: t.TempDir(), BlockBytes: 512, Concurrency: 4})
		if err != nil {
			t.Fatal(err)
		}
		for _, sp := range []Spread{SpreadRR, SpreadHash} {
			d := t.TempDir()
			l := filepath.Join(t.TempDir(), "alias")
			if err := os.Symlink(d, l); err != nil {
				t.Fatal(err)
			}
			multi, err := Run(context.Background(), reqs, Options{Mounts: []string{d, d, l}, Spread: sp, BlockBytes: 512, Concurrency: 4})
			if err != nil {
				t.Fatal(err)
			}
			checkSums(t, multi)
			if multi.Blocks != single.Blocks || multi.BlockHits != single.BlockHits || multi.BlockMisses != single.BlockMisses ||
				multi.BlockHitRatio != single.BlockHitRatio || multi.VerifyFailures != 0 {
				t.Errorf("%s %s: 3 hosts on one directory: blocks %d hits %d misses %d ratio %g; single mount %d %d %d %g",
					name, sp, multi.Blocks, multi.BlockHits, multi.BlockMisses, multi.BlockHitRatio,
					single.Blocks, single.BlockHits, single.BlockMisses, single.BlockHitRatio)
			}
			t.Logf("%s %s: hit ratio %.4f on 3 hosts sharing one directory (single mount %.4f)", name, sp, multi.BlockHitRatio, single.BlockHitRatio)
		}
	}
}

func TestMultiHostCorruption(t *testing.T) {
	mounts := dirs(t, 3)
	reqs := synthetic()
	if _, err := Run(context.Background(), reqs, Options{Mounts: mounts, BlockBytes: bb}); err != nil {
		t.Fatal(err)
	}
	// Host 1 replays requests 1 and 4: {1,2,4} and {1,2,3,5}. Corrupt its block 2.
	p := filepath.Join(mounts[1], LayoutFlat.RelPath(2))
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	data[777] ^= 0x10
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), reqs, Options{Mounts: mounts, BlockBytes: bb, Concurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	checkSums(t, res)
	if res.VerifyFailures != 2 || res.Hosts[1].VerifyFailures != 2 || res.Hosts[0].VerifyFailures != 0 || res.Hosts[2].VerifyFailures != 0 {
		t.Errorf("verify failures %d by host %d %d %d, want 2 all on host 1", res.VerifyFailures,
			res.Hosts[0].VerifyFailures, res.Hosts[1].VerifyFailures, res.Hosts[2].VerifyFailures)
	}
	if res.BlockMisses != 0 || res.BlockHits != 15 {
		t.Errorf("second pass: hits %d misses %d, want 15, 0", res.BlockHits, res.BlockMisses)
	}
}

func TestSpreadHash(t *testing.T) {
	// 20 prefix groups of 3 requests: {[0,] first, first*100+k}; with the
	// common block 0 (as in the Mooncake trace) the group is told by the
	// first 2 ids.
	group := func(common bool) []Request {
		var reqs []Request
		for k := range int64(3) {
			for g := range int64(20) {
				first := 1000 + g
				ids := []int64{first, first*100 + k}
				if common {
					ids = append([]int64{0}, ids...)
				}
				reqs = append(reqs, Request{Timestamp: k, HashIDs: ids})
			}
		}
		return append(reqs, Request{Timestamp: 9}) // no blocks: host 0
	}
	cases := []struct {
		name   string
		common bool
		k      int // Options.HashBlocks
	}{{"first id", false, 0}, {"first 2 ids after a common block", true, 2}}
	for _, c := range cases {
		reqs := group(c.common)
		var rows [][]HostResult
		for range 2 {
			mounts := dirs(t, 3)
			res, err := Run(context.Background(), reqs, Options{Mounts: mounts, Spread: SpreadHash, HashBlocks: c.k, BlockBytes: 64, Concurrency: 4})
			if err != nil {
				t.Fatal(err)
			}
			checkSums(t, res)
			if res.Spread != "hash" || res.HashBlocks != max(c.k, 1) {
				t.Errorf("%s: spread %q hash blocks %d", c.name, res.Spread, res.HashBlocks)
			}
			// Every request of a group lands on the same host: the group's
			// first block is written once and then hit twice there.
			used := map[int]bool{}
			for g := range int64(20) {
				first := 1000 + g
				where := -1
				for h, m := range mounts {
					got := blockFiles(t, m, []int64{first, first * 100, first*100 + 1, first*100 + 2})
					if len(got) == 0 {
						continue
					}
					if where >= 0 || len(got) != 4 {
						t.Errorf("%s: group %d split across hosts (host %d has %v)", c.name, g, h, got)
					}
					where = h
				}
				used[where] = true
				if want := SpreadHash.Host(0, &reqs[g], 3, c.k); where != want {
					t.Errorf("%s: group %d on host %d, Spread.Host says %d", c.name, g, where, want)
				}
			}
			if len(used) < 2 {
				t.Errorf("%s: hash spread used %d of 3 hosts", c.name, len(used))
			}
			// 40 group hits; block 0 (60 refs) misses once on each host used.
			hits, misses := int64(40), int64(80)
			if c.common {
				hits += 60 - int64(len(used))
				misses += int64(len(used))
			}
			if res.BlockHits != hits || res.BlockMisses != misses {
				t.Errorf("%s: hits %d misses %d, want %d, %d", c.name, res.BlockHits, res.BlockMisses, hits, misses)
			}
			hr := slices.Clone(res.Hosts)
			for i := range hr {
				hr[i].Mount, hr[i].RetryWaitS = "", 0
			}
			rows = append(rows, hr)
		}
		if !slices.Equal(rows[0], rows[1]) {
			t.Errorf("%s: hash spread not deterministic:\n%+v\n%+v", c.name, rows[0], rows[1])
		}
	}
	// Hashing only the common first block sends everything to one host.
	reqs := group(true)
	for i := range reqs[:60] {
		if SpreadHash.Host(i, &reqs[i], 3, 1) != SpreadHash.Host(0, &reqs[0], 3, 1) {
			t.Fatal("requests with the same first block split by --hash-blocks 1")
		}
	}
	if SpreadRR.Host(7, &reqs[0], 3, 1) != 1 || SpreadRR.Host(7, &reqs[0], 1, 1) != 0 || SpreadHash.Host(5, &Request{}, 4, 1) != 0 {
		t.Error("Spread.Host")
	}
}

// copyBlock publishes src as dst through a temp file and rename, as a
// sharing daemon would make a peer's block appear.
func copyBlock(src, dst string, corrupt bool) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if corrupt {
		data[0] ^= 1
	}
	if err := os.WriteFile(dst+".peer", data, 0o644); err != nil {
		return err
	}
	return os.Rename(dst+".peer", dst)
}

func TestRetryMissing(t *testing.T) {
	// Host 0 already has blocks 1 and 2; host 1 does not.
	mounts := dirs(t, 2)
	if _, err := Run(context.Background(), []Request{{HashIDs: []int64{1, 2}}}, Options{Mount: mounts[0], BlockBytes: bb}); err != nil {
		t.Fatal(err)
	}
	reqs := []Request{{HashIDs: []int64{1, 2}}, {HashIDs: []int64{1, 2}}}

	// Off: host 1 recomputes both blocks and the hook is never called.
	called := false
	off := t.TempDir()
	res, err := Run(context.Background(), reqs, Options{Mounts: []string{mounts[0], off}, BlockBytes: bb,
		afterMiss: func(int, int64) { called = true }})
	if err != nil || called || res.Hosts[1].BlockMisses != 2 || res.RetryHits != 0 || res.RetryMissingS != 0 {
		t.Errorf("retry off: called %v, %+v, %v", called, res.Hosts, err)
	}

	// On: a "peer daemon" shares host 0's block into host 1's mount 20 ms
	// after host 1 misses it; the miss waits (up to 10 s) and reads it.
	var wg sync.WaitGroup
	share := func(corrupt bool) func(int, int64) {
		return func(h int, id int64) {
			if h != 1 {
				t.Errorf("host %d waited for block %d", h, id)
				return
			}
			wg.Go(func() {
				time.Sleep(20 * time.Millisecond)
				if err := copyBlock(filepath.Join(mounts[0], LayoutFlat.RelPath(id)), filepath.Join(mounts[1], LayoutFlat.RelPath(id)), corrupt); err != nil {
					t.Error(err)
				}
			})
		}
	}
	res, err = Run(context.Background(), reqs, Options{Mounts: mounts, BlockBytes: bb, Concurrency: 1,
		RetryMissing: 10 * time.Second, afterMiss: share(false)})
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	checkSums(t, res)
	h1 := res.Hosts[1]
	if h1.BlockHits != 2 || h1.RetryHits != 2 || h1.BlockMisses != 0 || h1.VerifyFailures != 0 || h1.BytesWritten != 0 ||
		h1.RetryWaitS <= 0 || res.RetryHits != 2 || res.RetryMissingS != 10 {
		t.Errorf("retry on: host 1 %+v, totals retry hits %d retry_missing_s %g", h1, res.RetryHits, res.RetryMissingS)
	}
	var tbl bytes.Buffer
	res.WriteTable(&tbl)
	if !strings.Contains(tbl.String(), "retry-missing hits") || !strings.Contains(tbl.String(), "per host (spread rr)") {
		t.Errorf("table:\n%s", tbl.String())
	}

	// A shared file with wrong bytes is a verification failure, not a hit.
	os.Remove(filepath.Join(mounts[1], LayoutFlat.RelPath(1)))
	os.Remove(filepath.Join(mounts[1], LayoutFlat.RelPath(2)))
	res, err = Run(context.Background(), reqs[:2], Options{Mounts: mounts, BlockBytes: bb, Concurrency: 1,
		RetryMissing: 10 * time.Second, afterMiss: share(true)})
	wg.Wait()
	if err != nil || res.Hosts[1].VerifyFailures != 2 || res.RetryHits != 0 || res.Hosts[1].BlockMisses != 0 {
		t.Errorf("corrupt share: %+v, %v", res.Hosts[1], err)
	}

	// Nobody shares: the miss gives up after RetryMissing and writes.
	lone := t.TempDir()
	res, err = Run(context.Background(), []Request{{HashIDs: []int64{5}}}, Options{Mount: lone, BlockBytes: bb, RetryMissing: 30 * time.Millisecond})
	if err != nil || res.BlockMisses != 1 || res.RetryHits != 0 || res.BytesWritten != bb || res.RetryWaitS < 0.03 {
		t.Errorf("unshared miss: %+v, %v", res, err)
	}
	if b := blockFiles(t, lone, []int64{5}); !b[5] {
		t.Error("unshared miss was not written")
	}

	// Cancelled while waiting: neither hit nor miss, no error beyond ctx.
	ctx, cancel := context.WithCancel(context.Background())
	res, err = Run(ctx, []Request{{HashIDs: []int64{6}}}, Options{Mount: t.TempDir(), BlockBytes: bb, RetryMissing: time.Hour,
		afterMiss: func(int, int64) { cancel() }})
	if err == nil || res.BlockMisses != 0 || res.BlockHits != 0 {
		t.Errorf("cancelled wait: %+v, %v", res, err)
	}
}

func TestMultiHostOptions(t *testing.T) {
	d := t.TempDir()
	bad := []Options{
		{Mount: d, Mounts: []string{d}},
		{Mounts: []string{d, filepath.Join(d, "nope")}},
		{Mounts: []string{d, ""}},
		{Mounts: []string{d}, Spread: "random"},
		{Mounts: []string{d}, RetryMissing: -time.Second},
		{Mounts: []string{d}, Spread: SpreadHash, HashBlocks: -1},
		{},
	}
	for _, o := range bad {
		if _, err := Run(context.Background(), synthetic(), o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	if _, err := ParseSpread("hash"); err != nil {
		t.Error(err)
	}
	if _, err := ParseSpread("rand"); err == nil || !strings.Contains(err.Error(), "rr, hash") {
		t.Errorf("ParseSpread: %v", err)
	}
	// A single mount still gives one host row, and no per-host table.
	res, err := Run(context.Background(), synthetic(), Options{Mount: d, BlockBytes: bb})
	if err != nil || len(res.Hosts) != 1 || res.Hosts[0].Mount != d || res.Hosts[0].BlockHits != 10 || res.Mount != d {
		t.Errorf("single mount: %+v %v", res, err)
	}
	var tbl bytes.Buffer
	res.WriteTable(&tbl)
	if strings.Contains(tbl.String(), "per host") || strings.Contains(tbl.String(), "retry") {
		t.Errorf("single-mount table changed:\n%s", tbl.String())
	}
}
