package g35

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/ctxmem/ctxmemd/fabric/pool"
	"github.com/ctxmem/ctxmemd/tiering/tier"
	"github.com/ctxmem/ctxmemd/tiering/tiertest"
)

// Pool geometry of the conformance tiers: 8 MiB extents hold a record of
// tier.MaxBlockSize (4 MiB of payload and its header) and then some.
const (
	confExtent = 8 << 20
	// confHeader is a record's header size: the payload starts one 4 KiB
	// page after Location.Offset (see fabric/pool's record layout).
	confHeader = 4 << 10
)

// openConf opens a one-host G3.5 tier over the pool file in dir, of
// extents extents (formatting the file on first use), with a lease table
// of its own.
func openConf(t *testing.T, dir string, extents int64) *Tier {
	t.Helper()
	path := filepath.Join(dir, "pool.img")
	if _, err := os.Stat(path); os.IsNotExist(err) {
		if _, err := pool.Format(path, pool.FormatOptions{Size: (extents + 1) * confExtent, ExtentSize: confExtent}); err != nil {
			t.Fatal(err)
		}
	}
	p, err := pool.Open(path, pool.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	leases := pool.NewMemLeases(p.Superblock().ExtentCount, pool.MemLeaseOptions{})
	w, err := pool.NewWriter(context.Background(), p, leases.Leaser("conf"), pool.WriterOptions{Host: "conf"})
	if err != nil {
		p.Close()
		t.Fatal(err)
	}
	return New(p, w, Options{})
}

// TestConformance runs the tier conformance suite against G3.5. What the
// suite is told about G3.5 (see tiertest.Harness): its key → record map
// is in memory only (a restarted host imports shared files again, see
// docs/pool.md), so a reopened tier is empty; and a Delete frees no pool
// space (a record stays in its extent until the extent is reclaimed as a
// whole), so a full tier stays full after deletes.
func TestConformance(t *testing.T) {
	const small = 4 // extents of the small tier
	// Corrupt finds the record of a block through the tier open on dir.
	var mu sync.Mutex
	opened := map[string]*Tier{}
	open := func(t *testing.T, dir string, extents int64) tier.Tier {
		tr := openConf(t, dir, extents)
		mu.Lock()
		opened[dir] = tr
		mu.Unlock()
		return tr
	}
	tiertest.Run(t, tiertest.Harness{
		Open: func(t *testing.T, dir string) tier.Tier { return open(t, dir, 12) },
		Corrupt: func(t *testing.T, dir string, k tier.Key) error {
			mu.Lock()
			tr := opened[dir]
			mu.Unlock()
			ref, ok := tr.Location(k)
			if !ok {
				return tier.ErrNotFound
			}
			f, err := os.OpenFile(filepath.Join(dir, "pool.img"), os.O_RDWR, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			off := ref.Loc.Offset + confHeader + int64(ref.Loc.Length)/2
			b := make([]byte, 1)
			if _, err := f.ReadAt(b, off); err != nil {
				return err
			}
			b[0] ^= 0x5a
			_, err = f.WriteAt(b, off)
			return err
		},
		OpenSmall:        func(t *testing.T, dir string) tier.Tier { return open(t, dir, small) },
		SmallCapacity:    small * confExtent,
		MemoryOnly:       true,
		DeleteKeepsSpace: true,
	})
}
