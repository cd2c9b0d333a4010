package g3

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/ctxmem/ctxmemd/tiering/tier"

	"github.com/ctxmem/ctxmemd/internal/testenv"
)

func TestFitCapacity(t *testing.T) {
	dir := t.TempDir()
	if c, clamped, err := FitCapacity(dir, 1<<20, 1<<20); err != nil || clamped || c != 1<<20 {
		t.Fatalf("small capacity = %d, %v, %v; want unchanged", c, clamped, err)
	}
	c, clamped, err := FitCapacity(dir, 1<<62, 1<<20)
	if err != nil || !clamped || c <= 0 || c%(1<<20) != 0 || c >= 1<<62 {
		t.Fatalf("huge capacity = %d, %v, %v; want clamped to whole segments", c, clamped, err)
	}
}

// TestFitCapacityTinyFilesystem mounts a 16 MiB tmpfs (root only) and asks
// for 10 GiB: clamped below 16 MiB; with 8 MiB segments it is refused.
func TestFitCapacityTinyFilesystem(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skip(t, "needs root to mount a tmpfs")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, out)
	}
	defer exec.Command("umount", dir).Run()
	g3dir := filepath.Join(dir, "g3")
	c, clamped, err := FitCapacity(g3dir, 10<<30, 1<<20)
	if err != nil || !clamped || c > 16<<20 || c < 12<<20 {
		t.Fatalf("10 GiB on a 16 MiB tmpfs = %d, %v, %v; want clamped to about 15 MiB", c, clamped, err)
	}
	if _, _, err := FitCapacity(g3dir, 10<<30, 8<<20); err == nil {
		t.Fatal("8 MiB segments on a 16 MiB tmpfs accepted; want refused")
	}
}

// TestSyncOnlyWrittenSegments is issue 11 item 7: a Sync fdatasyncs only
// the segments written since the previous Sync, not every segment.
func TestSyncOnlyWrittenSegments(t *testing.T) {
	s, err := Open(Options{Dir: t.TempDir(), SegmentBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	for i := 0; i < 12; i++ { // 12 x 256 KiB fills several 1 MiB segments
		if err := s.Put(ctx, tier.Key{Namespace: "ns", Object: uint64(i), Gen: 1}, make([]byte, 256<<10)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	first := s.Stats().Syncs
	if first < 2 {
		t.Fatalf("first Sync synced %d segments; want every written one (several)", first)
	}
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if n := s.Stats().Syncs - first; n != 0 {
		t.Fatalf("a Sync with nothing written synced %d segments", n)
	}
	if err := s.Put(ctx, tier.Key{Namespace: "ns", Object: 99, Gen: 1}, make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	before := s.Stats().Syncs
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if n := s.Stats().Syncs - before; n != 1 {
		t.Fatalf("Sync after one Put synced %d segments; want 1", n)
	}
}
