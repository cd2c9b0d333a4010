package pool

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

func TestFormatOpen(t *testing.T) {
	for _, pl := range places(t) {
		t.Run(pl.name, func(t *testing.T) {
			path := filepath.Join(pl.dir, "pool.img")
			created := time.Unix(1_700_000_123, 456)
			size := int64(DataStart + 5*mib + 12345) // tail shorter than an extent is unused
			sb, err := Format(path, FormatOptions{ExtentSize: mib, Size: size, Buffered: pl.buffered, Now: created})
			if err != nil {
				t.Fatal(err)
			}
			if sb.ExtentCount != 5 || sb.ExtentSize != mib || sb.DeviceSize != size || sb.DataStart != DataStart {
				t.Fatalf("superblock %+v", sb)
			}
			if !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(sb.UUID()) {
				t.Fatalf("UUID %q", sb.UUID())
			}
			p, err := Open(path, OpenOptions{Buffered: pl.buffered})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			got := p.Superblock()
			if got.PoolID != sb.PoolID || got.ExtentCount != 5 || got.ExtentSize != mib || got.DeviceSize != size || !got.Created.Equal(created) {
				t.Fatalf("Open read %+v, Format wrote %+v", got, sb)
			}
			if p.ExtentOffset(3) != DataStart+3*mib {
				t.Fatalf("ExtentOffset(3) = %d", p.ExtentOffset(3))
			}
			want := ModeDirect
			if pl.buffered {
				want = ModeBuffered
			}
			if p.Mode() != want {
				t.Fatalf("mode %v, want %v", p.Mode(), want)
			}
			// A second Format gets a new pool id.
			sb2, err := Format(path, FormatOptions{ExtentSize: mib, Force: true, Buffered: pl.buffered})
			if err != nil {
				t.Fatal(err)
			}
			if sb2.PoolID == sb.PoolID || sb2.DeviceSize != size {
				t.Fatalf("reformat: %+v", sb2)
			}
		})
	}
}

func TestFormatRefusesFormatted(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pool.img")
	sb, err := Format(path, FormatOptions{ExtentSize: mib, Size: DataStart + 2*mib})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Format(path, FormatOptions{ExtentSize: mib}); !errors.Is(err, ErrFormatted) {
		t.Fatalf("second Format: %v, want ErrFormatted", err)
	}
	p, err := Open(path, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Superblock().PoolID != sb.PoolID {
		t.Fatal("refused Format changed the pool")
	}
	p.Close()
	// A damaged superblock is not a pool: Format may take the device.
	flip(t, path, 20)
	if _, err := Format(path, FormatOptions{ExtentSize: mib}); err != nil {
		t.Fatalf("Format over damaged superblock: %v", err)
	}
}

func TestFormatOptionErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		opts FormatOptions
	}{
		{"extent not power of two", FormatOptions{ExtentSize: 3 * mib, Size: 16 * mib}},
		{"extent below 1 MiB", FormatOptions{ExtentSize: 512 * kib, Size: 16 * mib}},
		{"no room for an extent", FormatOptions{ExtentSize: mib, Size: DataStart + mib - 1}},
		{"negative size", FormatOptions{ExtentSize: mib, Size: -1}},
	} {
		if _, err := Format(filepath.Join(dir, tc.name), tc.opts); err == nil {
			t.Errorf("%s: Format succeeded", tc.name)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	fresh := func(t *testing.T) string {
		path := filepath.Join(dir, t.Name()[len("TestOpenErrors/"):])
		if _, err := Format(path, FormatOptions{ExtentSize: mib, Size: DataStart + 3*mib}); err != nil {
			t.Fatal(err)
		}
		return path
	}
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T) string
		want  error
	}{
		{"missing", func(t *testing.T) string { return filepath.Join(dir, "nope") }, os.ErrNotExist},
		{"empty", func(t *testing.T) string {
			path := filepath.Join(dir, "empty")
			if err := os.WriteFile(path, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			return path
		}, ErrNoSuperblock},
		{"zeros", func(t *testing.T) string {
			path := filepath.Join(dir, "zeros")
			if err := os.WriteFile(path, make([]byte, 2*mib), 0o600); err != nil {
				t.Fatal(err)
			}
			return path
		}, ErrNoSuperblock},
		{"crc", func(t *testing.T) string {
			path := fresh(t)
			flip(t, path, 33) // extent size byte
			return path
		}, ErrBadSuperblock},
		{"crc-field", func(t *testing.T) string {
			path := fresh(t)
			flip(t, path, 12)
			return path
		}, ErrBadSuperblock},
		{"version", func(t *testing.T) string {
			path := fresh(t)
			var v [4]byte
			binary.LittleEndian.PutUint32(v[:], FormatVersion+1)
			tamper(t, path, 8, v[:])
			return path
		}, ErrUnknownVersion},
		{"truncated", func(t *testing.T) string {
			path := fresh(t)
			if err := os.Truncate(path, DataStart+3*mib-pageSize); err != nil {
				t.Fatal(err)
			}
			return path
		}, ErrSizeMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.setup(t)
			p, err := Open(path, OpenOptions{})
			if !errors.Is(err, tc.want) {
				if p != nil {
					p.Close()
				}
				t.Fatalf("Open: %v, want %v", err, tc.want)
			}
		})
	}
	// A device grown since Format still opens.
	path := filepath.Join(dir, "grown")
	if _, err := Format(path, FormatOptions{ExtentSize: mib, Size: DataStart + 2*mib}); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, DataStart+8*mib); err != nil {
		t.Fatal(err)
	}
	p, err := Open(path, OpenOptions{})
	if err != nil {
		t.Fatalf("grown device: %v", err)
	}
	if p.Superblock().ExtentCount != 2 {
		t.Fatalf("grown device: %d extents", p.Superblock().ExtentCount)
	}
	p.Close()
}

// TestBufferedFallback: a file system that refuses O_DIRECT gets buffered
// I/O, visible in Mode, and the pool works.
func TestBufferedFallback(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pool.img")
	if _, err := Format(path, FormatOptions{ExtentSize: mib, Size: DataStart + 2*mib, open: failDirectOpen}); err != nil {
		t.Fatal(err)
	}
	p, err := Open(path, OpenOptions{open: failDirectOpen})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Mode() != ModeBuffered {
		t.Fatalf("mode %v, want buffered", p.Mode())
	}
	roundTrip(t, p)
	// Where O_DIRECT works the same file opens direct.
	q, err := Open(path, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if q.Mode() != ModeDirect {
		t.Fatalf("mode %v, want direct on ext4", q.Mode())
	}
}
