package tests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxmem/ctxmemd/tests/harness"
	"github.com/ctxmem/ctxmemd/tests/workloads"
)

// nsStatfs returns (f_blocks - f_bfree) × f_bsize and f_blocks × f_bsize
// of dir.
func nsStatfs(t *testing.T, dir string) (used, total int64) {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatalf("statfs %s: %v", dir, err)
	}
	if st.Bsize != 4096 || st.Bavail != st.Bfree || st.Bfree > st.Blocks {
		t.Fatalf("statfs %s: bsize %d blocks %d bfree %d bavail %d", dir, st.Bsize, st.Blocks, st.Bfree, st.Bavail)
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize, int64(st.Blocks) * st.Bsize
}

// TestE2EStatfsFollowsUsage (issue 11 item 6) runs the real daemon on three
// tier configurations — roomy G2+G3, tight G2+G3 so blocks sink to G4, and
// G2+G4 without G3 — and checks that statvfs "used" of the namespace grows
// by each file's bytes the moment it is closed, does not move while blocks
// are written back and evicted to lower tiers, drops at once on unlink,
// and that a NIXL-style cleaner (statvfs watermarks 80/70 %, oldest mtime
// first) stops with files left.
func TestE2EStatfsFollowsUsage(t *testing.T) {
	bin := needE2E(t)
	const file = 4 << 20
	for _, c := range []struct {
		name      string
		opts      harness.Options
		files     int
		total     int64 // expected f_blocks × f_bsize
		wantSinks bool  // blocks must reach G4
	}{
		{"roomy", harness.Options{DRAM: "256MiB", G3Size: "1GiB"}, 24, 256<<20 + 1<<30, false},
		{"tight", harness.Options{DRAM: "16MiB", G3Size: "64MiB", Extra: []string{"--g3-segment-size", "4MiB", "--statfs-capacity", "176MiB"}}, 40, 176 << 20, true},
		{"no-g3", harness.Options{DRAM: "16MiB", G3Size: "0", Extra: []string{"--statfs-capacity", "176MiB"}}, 40, 176 << 20, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := harness.Start(t, bin, c.opts)
			ns := d.Namespace()
			used0, total := nsStatfs(t, ns)
			if used0 != 0 || total != c.total {
				t.Fatalf("empty namespace: used %d total %d, want 0 and %d", used0, total, c.total)
			}
			var names []string
			for i := range c.files {
				p := filepath.Join(ns, fmt.Sprintf("kv-%03d.bin", i))
				if err := os.WriteFile(p, fillKV(p, file), 0o644); err != nil {
					t.Fatal(err)
				}
				ts := time.Unix(1_700_000_000+int64(i), 0)
				if err := os.Chtimes(p, ts, ts); err != nil {
					t.Fatal(err)
				}
				names = append(names, p)
				if used, _ := nsStatfs(t, ns); used != int64(i+1)*file {
					t.Fatalf("after closing file %d: used %d, want %d", i, used, int64(i+1)*file)
				}
			}
			want := int64(c.files) * file
			// Write-back and eviction move blocks down; used must hold.
			deadline := time.Now().Add(20 * time.Second)
			for {
				if used, _ := nsStatfs(t, ns); used != want {
					t.Fatalf("while blocks move down: used %d, want %d", used, want)
				}
				st, err := d.Status(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				g4, _ := st.Tier("G4")
				if !c.wantSinks || g4.Blocks > 0 {
					t.Logf("G4 holds %d blocks; used stayed %d", g4.Blocks, want)
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no block reached G4 in 20 s: %s", st.Raw)
				}
				time.Sleep(200 * time.Millisecond)
			}
			// Unlink drops it at once.
			for i := 0; i < 3; i++ {
				if err := os.Remove(names[0]); err != nil {
					t.Fatal(err)
				}
				names = names[1:]
				want -= file
				if used, _ := nsStatfs(t, ns); used != want {
					t.Fatalf("after unlink: used %d, want %d", used, want)
				}
			}
			// The cleaner stops under the low watermark with files left.
			deleted := statvfsCleaner(t, ns, 0.80, 0.70)
			left := len(names) - deleted
			used, total := nsStatfs(t, ns)
			t.Logf("cleaner deleted %d files, left %d; used %d of %d (%.0f %%)", deleted, left, used, total, 100*float64(used)/float64(total))
			if used != int64(left)*file {
				t.Fatalf("after the cleaner: used %d, want %d", used, int64(left)*file)
			}
			n, wantDel := len(names), 0
			if float64(int64(n)*file) > 0.80*float64(total) {
				for float64(int64(n-wantDel)*file) >= 0.70*float64(total) {
					wantDel++
				}
			}
			if deleted != wantDel || left == 0 {
				t.Fatalf("cleaner deleted %d files and left %d, want %d deleted", deleted, left, wantDel)
			}
		})
	}
}

// TestE2EStatfsTwoNamespaces: two configured namespaces (beside default,
// which the harness waits for) report their own
// usage and quota through the real daemon.
func TestE2EStatfsTwoNamespaces(t *testing.T) {
	bin := needE2E(t)
	root, err := os.MkdirTemp("", "ctxm-cfg-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(root)
	cfg := filepath.Join(root, "ns.yaml")
	if err := os.WriteFile(cfg, []byte("namespaces:\n  - name: default\n    mode: \"1777\"\n  - name: alpha\n    mode: \"0777\"\n  - name: beta\n    mode: \"0777\"\n    quota: 64MiB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := harness.Start(t, bin, harness.Options{DRAM: "64MiB", G3Size: "256MiB", Extra: []string{"--config", cfg}})
	alpha, beta := filepath.Join(d.Mount, "alpha"), filepath.Join(d.Mount, "beta")
	for i := range 5 {
		p := filepath.Join(alpha, fmt.Sprint(i))
		if err := os.WriteFile(p, fillKV(p, 1<<20+1), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := filepath.Join(beta, "x")
	if err := os.WriteFile(p, fillKV(p, 3<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if used, total := nsStatfs(t, alpha); used != 5*(1<<20+4096) || total != 64<<20+256<<20 {
		t.Fatalf("alpha: used %d total %d", used, total)
	}
	if used, total := nsStatfs(t, p); used != 3<<20 || total != 64<<20 {
		t.Fatalf("beta: used %d total %d", used, total)
	}
}

// fillKV returns n bytes of the workloads pattern for key.
func fillKV(key string, n int) []byte {
	b := make([]byte, n)
	workloads.Fill(b, key, 1, 0)
	return b
}

// statvfsCleaner is the NIXL/llm-d evictor loop: when statvfs usage is
// over high, unlink files oldest mtime first, re-reading statvfs after
// each, until usage is under low. It returns how many it deleted.
func statvfsCleaner(t *testing.T, dir string, high, low float64) int {
	t.Helper()
	usage := func() float64 {
		used, total := nsStatfs(t, dir)
		return float64(used) / float64(total)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	type ent struct {
		path  string
		mtime time.Time
	}
	var files []ent
	for _, e := range ents {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, ent{filepath.Join(dir, e.Name()), info.ModTime()})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].mtime.Before(files[j].mtime) })
	deleted := 0
	if usage() <= high {
		return 0
	}
	for _, f := range files {
		if usage() < low {
			break
		}
		if err := os.Remove(f.path); err != nil {
			t.Fatal(err)
		}
		deleted++
	}
	return deleted
}
