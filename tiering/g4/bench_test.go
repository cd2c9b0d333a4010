package g4_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/ctxmem/ctxmemd/tiering/g4"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// BenchmarkG4 compares Put and Get of whole blocks through Tier-over-Local
// with a bare os.WriteFile / os.ReadFile loop in the same directory, and
// with WriteFile plus fsync and with open+ReadAt into a reused buffer (the tier's Put is durable: temp file, fsync,
// rename, directory fsync). Blocks cycle over 16 keys per size.
//
//	go test -run '^$' -bench BenchmarkG4 -benchtime 2s ./tiering/g4/
func BenchmarkG4(b *testing.B) {
	const keys = 16
	for _, size := range []int{256 << 10, 8 << 20} {
		dir := b.TempDir()
		tr, err := g4.NewTier(context.Background(), newLocal(b, dir), g4.TierOptions{MaxBlockSize: 8 << 20})
		if err != nil {
			b.Fatal(err)
		}
		data := make([]byte, size)
		r := rand.New(rand.NewPCG(uint64(size), 1))
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		bare := func(i int) string { return filepath.Join(dir, fmt.Sprintf("bare-%d", i%keys)) }
		k := func(i int) tier.Key {
			return tier.Key{Namespace: "bench", Object: uint64(size), Index: uint32(i % keys), Gen: 1}
		}
		label := fmt.Sprintf("%dKiB", size>>10)

		b.Run("Put/"+label+"/tier", func(b *testing.B) {
			b.SetBytes(int64(size))
			for i := range b.N {
				if err := tr.Put(bg, k(i), data); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("Put/"+label+"/writefile", func(b *testing.B) {
			b.SetBytes(int64(size))
			for i := range b.N {
				if err := os.WriteFile(bare(i), data, 0o600); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("Put/"+label+"/writefile+fsync", func(b *testing.B) {
			b.SetBytes(int64(size))
			for i := range b.N {
				f, err := os.OpenFile(bare(i), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := f.Write(data); err != nil {
					b.Fatal(err)
				}
				if err := f.Sync(); err != nil {
					b.Fatal(err)
				}
				if err := f.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
		// Make sure every key exists for the reads.
		for i := range keys {
			if err := tr.Put(bg, k(i), data); err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(bare(i), data, 0o600); err != nil {
				b.Fatal(err)
			}
		}
		b.Run("Get/"+label+"/tier", func(b *testing.B) {
			b.SetBytes(int64(size))
			p := make([]byte, size)
			for i := range b.N {
				if n, err := tr.Get(bg, k(i), p, 0); err != nil || n != size {
					b.Fatal(n, err)
				}
			}
		})
		b.Run("Get/"+label+"/readfile", func(b *testing.B) {
			b.SetBytes(int64(size))
			for i := range b.N {
				if p, err := os.ReadFile(bare(i)); err != nil || len(p) != size {
					b.Fatal(len(p), err)
				}
			}
		})
		// ReadFile allocates a fresh buffer per call; this bare loop reads
		// into a reused one, as the tier does.
		b.Run("Get/"+label+"/open+readat", func(b *testing.B) {
			b.SetBytes(int64(size))
			p := make([]byte, size)
			for i := range b.N {
				f, err := os.Open(bare(i))
				if err != nil {
					b.Fatal(err)
				}
				if n, err := f.ReadAt(p, 0); err != nil || n != size {
					b.Fatal(n, err)
				}
				_ = f.Close()
			}
		})
		// A 64 KiB read at an offset: the tier reads and verifies the whole
		// block (see header.go); this shows what that costs.
		b.Run("GetRange64KiB/"+label+"/tier", func(b *testing.B) {
			b.SetBytes(64 << 10)
			p := make([]byte, 64<<10)
			for i := range b.N {
				if n, err := tr.Get(bg, k(i), p, int64(size/2)); err != nil || n != len(p) {
					b.Fatal(n, err)
				}
			}
		})
		_ = tr.Close()
	}
}
