package g4_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/g4"
	"github.com/ctxmem/ctxmemd/tiering/g4/storetest"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// packRun returns n keys of object obj from index first and their blocks:
// bs bytes each but the last, which has last bytes; seed varies the data.
func packRun(obj uint64, first uint32, n, bs, last, seed int) ([]tier.Key, [][]byte) {
	keys := make([]tier.Key, n)
	blocks := make([][]byte, n)
	for i := range n {
		keys[i] = key(obj, first+uint32(i))
		sz := bs
		if i == n-1 {
			sz = last
		}
		blocks[i] = storetest.Data(seed*1000+int(first)+i, sz)
	}
	return keys, blocks
}

// packNames lists the pack objects in store.
func packNames(t testing.TB, store g4.ObjectStore) []string {
	t.Helper()
	var out []string
	for _, n := range storetest.Names(t, store, g4.DefaultPrefix+"/") {
		if seg := n[strings.LastIndexByte(n, '/')+1:]; strings.HasPrefix(seg, "p") {
			out = append(out, n)
		}
	}
	return out
}

func mustPutPack(t testing.TB, tr *g4.Tier, keys []tier.Key, blocks [][]byte) {
	t.Helper()
	if n, err := tr.PutPack(bg, keys, blocks); err != nil || n != len(keys) {
		t.Fatalf("PutPack = %d, %v; want %d, nil", n, err, len(keys))
	}
}

// checkBlocks reads every key whole and compares it with its block.
func checkBlocks(t testing.TB, tr *g4.Tier, keys []tier.Key, blocks [][]byte) {
	t.Helper()
	for i, k := range keys {
		p := make([]byte, len(blocks[i])+10)
		n, err := tr.Get(bg, k, p, 0)
		if err != nil || !bytes.Equal(p[:n], blocks[i]) {
			t.Fatalf("Get %v = %d, %v; want the %d bytes stored", k, n, err, len(blocks[i]))
		}
		if sz, err := tr.Stat(bg, k); err != nil || sz != int64(len(blocks[i])) {
			t.Fatalf("Stat %v = %d, %v; want %d", k, sz, err, len(blocks[i]))
		}
	}
}

func TestPackRoundTrip(t *testing.T) {
	dir := t.TempDir()
	store := newLocal(t, dir)
	tr := openTier(t, store, g4.TierOptions{})
	keys, blocks := packRun(1, 0, 64, 4096, 1000, 1)
	before := tr.CallCounts()
	mustPutPack(t, tr, keys, blocks)
	if d := tr.CallCounts().Put - before.Put; d != 1 {
		t.Fatalf("PutPack of 64 blocks made %d PUTs; want 1", d)
	}
	if got := packNames(t, store); len(got) != 1 {
		t.Fatalf("packs stored: %v", got)
	}
	checkBlocks(t, tr, keys, blocks)
	if u := tr.Usage(); u.Blocks != 64 || u.UsedBytes != 63*4096+1000 {
		t.Fatalf("Usage = %+v", u)
	}
	// Partial reads verify the whole block and return the range.
	p := make([]byte, 100)
	if n, err := tr.Get(bg, keys[7], p, 4000); err != nil || n != 96 || !bytes.Equal(p[:n], blocks[7][4000:]) {
		t.Fatalf("partial Get = %d, %v", n, err)
	}
	if n, err := tr.Get(bg, keys[63], p, 1000); err != nil || n != 0 {
		t.Fatalf("Get at the end = %d, %v; want 0, nil", n, err)
	}
	// GetBlocks: one ranged GET for the whole run (the header is known
	// since the put).
	bufs := make([][]byte, len(keys))
	for i := range bufs {
		bufs[i] = make([]byte, 4096)
	}
	before = tr.CallCounts()
	ns, err := tr.GetBlocks(bg, keys, bufs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range keys {
		if !bytes.Equal(bufs[i][:ns[i]], blocks[i]) {
			t.Fatalf("GetBlocks block %d differs", i)
		}
	}
	if d := tr.CallCounts().Get - before.Get; d != 1 {
		t.Fatalf("GetBlocks of one pack made %d GETs; want 1", d)
	}
	if st := tr.Stats(); st.PackPuts != 1 || st.Puts != 64 || st.Packs != 1 {
		t.Fatalf("Stats = %+v", st)
	}
}

func TestPackSplitsRuns(t *testing.T) {
	store := newLocal(t, t.TempDir())
	tr := openTier(t, store, g4.TierOptions{PackSize: g4.MinPackSize})
	// 40 blocks of 64 KiB: 16 per 1 MiB pack, so 3 packs; then a gap
	// (index 50), another object, a block of another length: each starts
	// a run, and a run of one block is a plain Put.
	keys, blocks := packRun(1, 0, 40, 64<<10, 64<<10, 2)
	k2, b2 := packRun(1, 50, 3, 4096, 4096, 2)
	k3, b3 := packRun(2, 0, 2, 4096, 10, 2)
	k4, b4 := packRun(2, 2, 1, 4096, 4096, 2) // after a short block: a new run of one
	keys = slices.Concat(keys, k2, k3, k4)
	blocks = slices.Concat(blocks, b2, b3, b4)
	mustPutPack(t, tr, keys, blocks)
	if got := len(packNames(t, store)); got != 5 {
		t.Fatalf("%d packs; want 5 (3 + 1 + 1)", got)
	}
	if st := tr.Stats(); st.PackPuts != 5 || st.Puts != uint64(len(keys)) {
		t.Fatalf("Stats = %+v", st)
	}
	checkBlocks(t, tr, keys, blocks)
	if _, err := tr.PutPack(bg, keys[:2], blocks[:1]); !errors.Is(err, g4.ErrInvalid) {
		t.Fatalf("PutPack with mismatched slices = %v; want ErrInvalid", err)
	}
	off := openTier(t, newLocal(t, t.TempDir()), g4.TierOptions{PackSize: -1})
	kk, bb := packRun(3, 0, 4, 4096, 4096, 2)
	mustPutPack(t, off, kk, bb)
	if c := off.CallCounts(); c.Put != 4 {
		t.Fatalf("packing off: %d PUTs; want 4", c.Put)
	}
	if _, err := g4.NewTier(bg, newLocal(t, t.TempDir()), g4.TierOptions{PackSize: 1000}); err == nil {
		t.Fatal("NewTier accepted a 1000-byte PackSize")
	}
}

func TestPackRestartFromListing(t *testing.T) {
	dir := t.TempDir()
	tr := openTier(t, newLocal(t, dir), g4.TierOptions{})
	keys, blocks := packRun(1, 0, 32, 8192, 8192, 3)
	mustPutPack(t, tr, keys, blocks)
	old := key(9, 0) // a per-block object: mixed listing
	oldData := storetest.Data(9, 5000)
	mustPutBlock(t, tr, old, oldData)
	tr.Close()

	store := newLocal(t, dir)
	tr2 := openTier(t, store, g4.TierOptions{})
	c := tr2.CallCounts()
	if c.Get != 0 || c.Head != 0 {
		t.Fatalf("open read objects: %+v; want a listing only", c)
	}
	seen := map[tier.Key]int64{}
	if err := tr2.Range(bg, func(k tier.Key, n int64) bool { seen[k] = n; return true }); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 33 || seen[old] != 5000 || seen[keys[31]] != 8192 {
		t.Fatalf("Range after restart: %d keys, %v", len(seen), seen[old])
	}
	checkBlocks(t, tr2, append(keys, old), append(blocks, oldData))
	// In order, the reads go ahead in windows of 2, 4, 8, 16 blocks: 1 +
	// 5 ranged GETs for the 32 blocks, one for the header, one for the
	// per-block object.
	if d := tr2.CallCounts().Get - c.Get; d != 1+5+1+1 {
		t.Fatalf("%d GETs to read 32 packed blocks in order and one object; want 8", d)
	}
	if st := tr2.Stats(); st.ReadAhead != 32-6 {
		t.Fatalf("Stats.ReadAhead = %d; want 26", st.ReadAhead)
	}
	// Out of order, every block is one ranged GET of its own.
	tr3 := openTier(t, newLocal(t, dir), g4.TierOptions{})
	c = tr3.CallCounts()
	perm := []int{5, 3, 9, 1, 30, 2, 17, 8}
	for _, i := range perm {
		p := make([]byte, 8192)
		if n, err := tr3.Get(bg, keys[i], p, 0); err != nil || !bytes.Equal(p[:n], blocks[i]) {
			t.Fatalf("Get %d = %d, %v", i, n, err)
		}
	}
	if d := tr3.CallCounts().Get - c.Get; d != int64(len(perm))+1 {
		t.Fatalf("%d GETs for %d reads out of order; want one each and the header", d, len(perm))
	}
}

// damagePack stores and closes a tier on dir holding one pack of keys,
// then applies f to the pack's file, which it returns.
func damagePack(t *testing.T, dir string, keys []tier.Key, blocks [][]byte, f func(b []byte)) string {
	t.Helper()
	tr := openTier(t, newLocal(t, dir), g4.TierOptions{})
	mustPutPack(t, tr, keys, blocks)
	tr.Close()
	p := packFile(t, dir)
	b, err := os.ReadFile(p)
	must(t, err)
	f(b)
	must(t, os.WriteFile(p, b, 0o600))
	return p
}

// packFile returns the file of the only pack in dir.
func packFile(t *testing.T, dir string) string {
	t.Helper()
	store := newLocal(t, dir)
	names := packNames(t, store)
	if len(names) != 1 {
		t.Fatalf("packs: %v", names)
	}
	p, err := store.Path(names[0])
	must(t, err)
	return p
}

func TestPackCorruptBlock(t *testing.T) {
	dir := t.TempDir()
	keys, blocks := packRun(1, 0, 16, 4096, 4096, 4)
	// Flip one byte inside block 5 (after the header).
	f := damagePack(t, dir, keys, blocks, func(b []byte) { b[len(b)-16*4096+5*4096+123] ^= 0x40 })

	for _, fresh := range []bool{true, false} { // header not cached, then cached
		tr2 := openTier(t, newLocal(t, dir), g4.TierOptions{})
		if _, err := tr2.Get(bg, keys[5], make([]byte, 4096), 0); !errors.Is(err, tier.ErrCorrupt) {
			t.Fatalf("Get of the damaged block = %v; want ErrCorrupt", err)
		}
		if _, err := tr2.Stat(bg, keys[5]); !errors.Is(err, tier.ErrNotFound) {
			t.Fatalf("Stat after quarantine = %v; want ErrNotFound", err)
		}
		others := slices.Delete(slices.Clone(keys), 5, 6)
		ob := slices.Delete(slices.Clone(blocks), 5, 6)
		checkBlocks(t, tr2, others, ob)
		// A range read over the damaged block fails there, not before.
		bufs := make([][]byte, 16)
		for i := range bufs {
			bufs[i] = make([]byte, 4096)
		}
		if st := tr2.Stats(); st.CRCErrors != 1 || st.Quarantined != 1 {
			t.Fatalf("Stats = %+v", st)
		}
		if fresh {
			continue
		}
		tr3 := openTier(t, newLocal(t, dir), g4.TierOptions{})
		ns, err := tr3.GetBlocks(bg, keys, bufs)
		if !errors.Is(err, tier.ErrCorrupt) || ns[4] != 4096 || ns[5] != 0 || !bytes.Equal(bufs[4], blocks[4]) {
			t.Fatalf("GetBlocks over the damaged block = %v, %v", ns, err)
		}
	}
	if _, err := os.Stat(f); err != nil {
		t.Fatalf("the pack was deleted for one damaged block: %v", err)
	}
}

func TestPackCorruptHeader(t *testing.T) {
	dir := t.TempDir()
	keys, blocks := packRun(1, 0, 8, 4096, 4096, 5)
	f := damagePack(t, dir, keys, blocks, func(b []byte) { b[70] ^= 1 }) // in the CRC table
	tr2 := openTier(t, newLocal(t, dir), g4.TierOptions{})
	if _, err := tr2.Get(bg, keys[2], make([]byte, 4096), 0); !errors.Is(err, tier.ErrCorrupt) {
		t.Fatalf("Get with a damaged pack header = %v; want ErrCorrupt", err)
	}
	if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("pack with a damaged header still stored: %v", err)
	}
	for _, k := range keys {
		if _, err := tr2.Stat(bg, k); !errors.Is(err, tier.ErrNotFound) {
			t.Fatalf("Stat %v = %v; want ErrNotFound", k, err)
		}
	}
	if st := tr2.Stats(); st.HeaderErrors != 1 || st.Quarantined != 8 {
		t.Fatalf("Stats = %+v", st)
	}
}

func TestPackPartlyDead(t *testing.T) {
	dir := t.TempDir()
	store := newLocal(t, dir)
	tr := openTier(t, store, g4.TierOptions{})
	keys, blocks := packRun(1, 0, 8, 4096, 4096, 6)
	mustPutPack(t, tr, keys, blocks)
	// Delete half, overwrite one with its own object: the pack stays.
	for _, k := range keys[:4] {
		must(t, tr.Delete(bg, k))
	}
	newer := storetest.Data(77, 4096)
	mustPutBlock(t, tr, keys[4], newer)
	if len(packNames(t, store)) != 1 {
		t.Fatal("pack deleted while blocks of it live")
	}
	for _, k := range keys[:4] {
		if _, err := tr.Get(bg, k, make([]byte, 4096), 0); !errors.Is(err, tier.ErrNotFound) {
			t.Fatalf("Get of a deleted member = %v; want ErrNotFound", err)
		}
	}
	checkBlocks(t, tr, keys[4:], append([][]byte{newer}, blocks[5:]...))
	if u := tr.Usage(); u.Blocks != 4 {
		t.Fatalf("Usage = %+v; want 4 blocks", u)
	}
	// After a restart the per-block object still wins over the pack;
	// deleted members come back from the listing (the core deletes them
	// again as garbage).
	tr.Close()
	tr = openTier(t, newLocal(t, dir), g4.TierOptions{})
	checkBlocks(t, tr, keys, append(slices.Clone(blocks[:4]), append([][]byte{newer}, blocks[5:]...)...))
	for _, k := range keys {
		must(t, tr.Delete(bg, k))
	}
	if got := packNames(t, store); len(got) != 0 {
		t.Fatalf("pack left after its last member died: %v", got)
	}
	if names := storetest.Names(t, store, g4.DefaultPrefix+"/"); len(names) != 0 {
		t.Fatalf("objects left: %v", names)
	}
}

func TestPackNewerWins(t *testing.T) {
	dir := t.TempDir()
	store := newLocal(t, dir)
	tr := openTier(t, store, g4.TierOptions{})
	k1, b1 := packRun(1, 0, 8, 4096, 4096, 7)
	mustPutPack(t, tr, k1, b1)
	k2, b2 := packRun(1, 4, 8, 4096, 4096, 8) // overlaps 4..7
	mustPutPack(t, tr, k2, b2)
	// A per-block copy, then a pack over it: the pack deletes it first.
	single := key(1, 20)
	mustPutBlock(t, tr, single, storetest.Data(1, 100))
	k3, b3 := packRun(1, 20, 2, 4096, 4096, 9)
	mustPutPack(t, tr, k3, b3)
	want := slices.Concat(b1[:4], b2, b3)
	all := slices.Concat(k1[:4], k2, k3)
	checkBlocks(t, tr, all, want)
	// Overwriting a whole pack deletes the old one.
	k4, b4 := packRun(1, 20, 2, 4096, 4096, 10)
	mustPutPack(t, tr, k4, b4)
	if got := len(packNames(t, store)); got != 3 {
		t.Fatalf("%d packs; want 3 (the fully replaced one deleted)", got)
	}
	tr.Close()
	tr = openTier(t, newLocal(t, dir), g4.TierOptions{})
	checkBlocks(t, tr, slices.Concat(k1[:4], k2, k4), slices.Concat(b1[:4], b2, b4))
	// A pack put after the restart still outranks the listed ones.
	k5, b5 := packRun(1, 0, 12, 4096, 4096, 11)
	mustPutPack(t, tr, k5, b5)
	tr.Close()
	tr = openTier(t, newLocal(t, dir), g4.TierOptions{})
	checkBlocks(t, tr, k5, b5)
	if got := len(packNames(t, store)); got != 2 {
		t.Fatalf("%d packs; want 2 (k4's and k5's; the rest are dead and deleted)", got)
	}
}

func TestPackExpiryAndRetention(t *testing.T) {
	dir := t.TempDir()
	store := newLocal(t, dir)
	now := time.Now()
	retain := key(2, 0)
	tr := openTier(t, store, g4.TierOptions{Now: func() time.Time { return now },
		Retain: func(k tier.Key) bool { return k.Object == retain.Object }})
	k1, b1 := packRun(1, 0, 4, 4096, 4096, 12)
	mustPutPack(t, tr, k1, b1)
	k2, b2 := packRun(2, 0, 4, 4096, 4096, 13)
	mustPutPack(t, tr, k2, b2)
	n, err := tr.ExpireBefore(bg, time.Now().Add(time.Hour))
	if err != nil || n != 4 {
		t.Fatalf("ExpireBefore = %d, %v; want the 4 blocks of the unretained pack", n, err)
	}
	if got := packNames(t, store); len(got) != 1 {
		t.Fatalf("packs left: %v", got)
	}
	checkBlocks(t, tr, k2, b2)
	if u := tr.Usage(); u.Blocks != 4 {
		t.Fatalf("Usage = %+v", u)
	}
}

func TestPackEvictedWhole(t *testing.T) {
	store := newLocal(t, t.TempDir())
	clock := tickClock()
	tr := openTier(t, store, g4.TierOptions{Capacity: 40 * evBlock, Now: clock})
	var all [][]tier.Key
	for obj := range uint64(4) {
		keys, blocks := packRun(obj+1, 0, 8, evBlock, evBlock, int(obj))
		mustPutPack(t, tr, keys, blocks)
		all = append(all, keys)
	}
	// 32 blocks of 40: over high (38)? No: add singles to pass it.
	for i := range uint32(7) {
		mustPutBlock(t, tr, key(9, i), storetest.Data(int(i), evBlock))
	}
	n, err := tr.Evict(bg)
	if err != nil || n == 0 {
		t.Fatalf("Evict = %d, %v", n, err)
	}
	if n%8 != 0 {
		t.Fatalf("Evict deleted %d blocks: packs go whole, 8 blocks each", n)
	}
	// The oldest pack went first.
	if _, err := tr.Stat(bg, all[0][3]); !errors.Is(err, tier.ErrNotFound) {
		t.Fatalf("oldest pack still indexed: %v", err)
	}
	if got := len(packNames(t, store)); got != 4-n/8 {
		t.Fatalf("%d packs stored after evicting %d blocks", got, n)
	}
}

func TestVerifyStorePacks(t *testing.T) {
	dir := t.TempDir()
	store := newLocal(t, dir)
	tr := openTier(t, store, g4.TierOptions{})
	keys, blocks := packRun(1, 0, 8, 4096, 300, 14)
	mustPutPack(t, tr, keys, blocks)
	mustPutBlock(t, tr, key(5, 0), storetest.Data(5, 100))
	rep, err := g4.VerifyStore(bg, store, g4.VerifyOptions{})
	if err != nil || rep.Problems() != 0 || rep.Objects != 2 || rep.Bytes != 7*4096+300+100 || rep.Foreign != 0 {
		t.Fatalf("VerifyStore = %+v, %v", rep, err)
	}
	f := packFile(t, dir)
	b, err := os.ReadFile(f)
	must(t, err)
	b[len(b)-1] ^= 1
	must(t, os.WriteFile(f, b, 0o600))
	rep, err = g4.VerifyStore(bg, store, g4.VerifyOptions{})
	if err != nil || rep.Corrupt != 1 || len(rep.Bad) != 1 || !strings.Contains(rep.Bad[0].Error, "CRC32C") {
		t.Fatalf("VerifyStore of a damaged pack = %+v, %v", rep, err)
	}
}

// failDelete fails the Delete of one name, once.
type failDelete struct {
	g4.ObjectStore
	name string
	done bool
}

func (f *failDelete) Delete(ctx context.Context, name string) error {
	if name == f.name && !f.done {
		f.done = true
		return fmt.Errorf("injected: %w", tier.ErrUnavailable)
	}
	return f.ObjectStore.Delete(ctx, name)
}

// TestPackKeepsOldCopyUntilDurable: the per-block object a pack replaces
// is deleted only after the pack is stored; if that delete fails, its key
// (and the later ones) count as not stored and it keeps its old copy,
// before and after a restart.
func TestPackKeepsOldCopyUntilDurable(t *testing.T) {
	dir := t.TempDir()
	keys, blocks := packRun(1, 0, 6, 4096, 4096, 20)
	fs := &failDelete{ObjectStore: newLocal(t, dir), name: g4.BlockName(g4.DefaultPrefix, keys[2])}
	tr := openTier(t, fs, g4.TierOptions{})
	old := storetest.Data(21, 3000)
	mustPutBlock(t, tr, keys[2], old)
	n, err := tr.PutPack(bg, keys, blocks)
	if n != 2 || !errors.Is(err, tier.ErrUnavailable) {
		t.Fatalf("PutPack = %d, %v; want 2 and the delete's error", n, err)
	}
	checkBlocks(t, tr, append(keys[:2:2], keys[2]), append(blocks[:2:2], old))
	for _, k := range keys[3:] {
		if _, err := tr.Stat(bg, k); !errors.Is(err, tier.ErrNotFound) {
			t.Fatalf("Stat %v after the failed delete = %v; want ErrNotFound", k, err)
		}
	}
	tr.Close()
	tr = openTier(t, newLocal(t, dir), g4.TierOptions{})
	checkBlocks(t, tr, append(keys[:2:2], keys[2]), append(blocks[:2:2], old))
}

// TestReadRun: ReadRun counts the live members of k's pack from k on (at
// most its limit), 1 for a block with an object of its own, 0 for an
// unknown key; a member deleted or stored elsewhere ends the run.
func TestReadRun(t *testing.T) {
	tr := openTier(t, newLocal(t, t.TempDir()), g4.TierOptions{})
	keys, blocks := packRun(1, 0, 8, 4096, 4096, 8)
	mustPutPack(t, tr, keys, blocks)
	mustPutBlock(t, tr, key(2, 0), storetest.Data(1, 4096))
	for _, c := range []struct {
		k          tier.Key
		limit, run int
	}{
		{keys[0], 100, 8}, {keys[0], 3, 3}, {keys[5], 100, 3}, {keys[7], 100, 1}, {keys[0], 0, 0},
		{key(2, 0), 100, 1}, {key(3, 0), 100, 0},
	} {
		if got := tr.ReadRun(c.k, c.limit); got != c.run {
			t.Errorf("ReadRun(%v, %d) = %d; want %d", c.k, c.limit, got, c.run)
		}
	}
	must(t, tr.Delete(bg, keys[3]))
	mustPutBlock(t, tr, keys[6], storetest.Data(2, 4096))
	for _, c := range []struct {
		k   tier.Key
		run int
	}{{keys[0], 3}, {keys[3], 0}, {keys[4], 2}, {keys[6], 1}, {keys[7], 1}} {
		if got := tr.ReadRun(c.k, 100); got != c.run {
			t.Errorf("after a delete and a put: ReadRun(%v) = %d; want %d", c.k, got, c.run)
		}
	}
}
