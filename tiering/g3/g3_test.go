package g3

import (
	"github.com/ctxmem/ctxmemd/internal/directio"

	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ctxmem/ctxmemd/tiering/tier"
	"github.com/ctxmem/ctxmemd/tiering/tiertest"
)

const (
	kib = 1 << 10
	mib = 1 << 20
)

// quietLogger drops logs below Error unless -v.
func quietLogger() *slog.Logger {
	lvl := slog.LevelError
	if testing.Verbose() {
		lvl = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
}

// openT opens a store with test defaults (1 MiB segments) unless opts says
// otherwise, and closes it at the end of the test.
func openT(t testing.TB, opts Options) *Store {
	t.Helper()
	if opts.SegmentBytes == 0 {
		opts.SegmentBytes = mib
	}
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	s, err := Open(opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func k(obj uint64, idx uint32) tier.Key {
	return tier.Key{Namespace: "ns", Object: obj, Index: idx, Gen: 1}
}

func put(t testing.TB, s *Store, key tier.Key, n int) []byte {
	t.Helper()
	d := tiertest.Pattern(key, n, 0)
	if err := s.Put(context.Background(), key, d); err != nil {
		t.Fatalf("Put(%v): %v", key, err)
	}
	return d
}

func get(s *Store, key tier.Key, n int) ([]byte, error) {
	p := make([]byte, n)
	got, err := s.Get(context.Background(), key, p, 0)
	return p[:got], err
}

func mustRead(t testing.TB, s *Store, key tier.Key, want []byte) {
	t.Helper()
	got, err := get(s, key, len(want)+1)
	if err != nil {
		t.Fatalf("Get(%v): %v", key, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Get(%v): wrong bytes (%d, want %d)", key, len(got), len(want))
	}
}

func mustNotFound(t testing.TB, s *Store, key tier.Key) {
	t.Helper()
	if got, err := get(s, key, 16); !errors.Is(err, tier.ErrNotFound) {
		t.Fatalf("Get(%v) = %d bytes, %v; want ErrNotFound", key, len(got), err)
	}
}

// located is where a record sits on disk.
type located struct {
	path string
	off  int64
	rec  record
}

// findRecords parses every segment file in dir (behind the store's back,
// with plain reads) and returns the block and tombstone records of key,
// oldest sequence number first.
func findRecords(t testing.TB, dir string, key tier.Key) []located {
	t.Helper()
	var out []located
	names, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	for _, name := range names {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		h, ok := decodeSegHeader(b)
		if !ok {
			continue
		}
		for off := int64(segHeaderLen); off+pageSize <= int64(len(b)); {
			r, c, _ := decodeRecord(slices.Clone(b[off:min(off+4*pageSize, int64(len(b)))]), h.salt)
			if c != hdrOK {
				off += pageSize
				continue
			}
			if r.typ != recPad && r.key == key {
				out = append(out, located{path: name, off: off, rec: r})
			}
			off += int64(r.recLen)
		}
	}
	slices.SortFunc(out, func(a, b located) int { return int(a.rec.seq) - int(b.rec.seq) })
	return out
}

// newest returns the newest block record of key.
func newest(t testing.TB, dir string, key tier.Key) located {
	t.Helper()
	recs := findRecords(t, dir, key)
	if len(recs) == 0 || recs[len(recs)-1].rec.typ != recBlock {
		t.Fatalf("no block record of %v on disk", key)
	}
	return recs[len(recs)-1]
}

// flipByte XORs the byte at off of the file with 0x5a (plain write, so it
// lands in the page cache that O_DIRECT reads are coherent with).
func flipByte(path string, off int64) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], off); err != nil && err != io.EOF {
		return err
	}
	b[0] ^= 0x5a
	_, err = f.WriteAt(b[:], off)
	return err
}

// corruptPayload flips a byte in the middle of key's newest payload.
func corruptPayload(t *testing.T, dir string, key tier.Key) error {
	l := newest(t, dir, key)
	return flipByte(l.path, l.off+int64(l.rec.hdrLen)+int64(l.rec.payloadLen)/2)
}

func harness(noDirect bool) tiertest.Harness {
	return tiertest.Harness{
		Open: func(t *testing.T, dir string) tier.Tier {
			s, err := Open(Options{Dir: dir, SegmentBytes: 8 * mib, NoDirect: noDirect, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		Corrupt: corruptPayload,
		OpenSmall: func(t *testing.T, dir string) tier.Tier {
			s, err := Open(Options{Dir: dir, SegmentBytes: mib, CapacityBytes: 6 * mib, NoDirect: noDirect, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		SmallCapacity: 6 * mib,
		Reclaims:      true,
	}
}

func TestConformance(t *testing.T) {
	t.Run("direct", func(t *testing.T) { tiertest.Run(t, harness(false)) })
	t.Run("buffered", func(t *testing.T) { tiertest.Run(t, harness(true)) })
}

func TestOptionsValidation(t *testing.T) {
	dir := t.TempDir()
	bad := []Options{
		{},
		{Dir: dir, SegmentBytes: 5000},
		{Dir: dir, SegmentBytes: 32 * kib},
		{Dir: dir, HighWatermark: 0.5, LowWatermark: 0.6},
		{Dir: dir, SegmentBytes: mib, CapacityBytes: 2 * mib}, // one segment at high
		{Dir: dir, CapacityBytes: -1},
	}
	for i, o := range bad {
		if s, err := Open(o); err == nil {
			s.Close()
			t.Errorf("case %d: Open(%+v) succeeded", i, o)
		}
	}
}

func TestSecondOpenRefused(t *testing.T) {
	dir := t.TempDir()
	openT(t, Options{Dir: dir})
	if s, err := Open(Options{Dir: dir, SegmentBytes: mib}); err == nil {
		s.Close()
		t.Fatal("second Open of the same dir succeeded")
	}
}

func TestMaxBlockSmallSegments(t *testing.T) {
	s := openT(t, Options{Dir: t.TempDir(), SegmentBytes: 256 * kib})
	mb := s.MaxBlock()
	if mb <= 0 || mb > 256*kib-2*pageSize {
		t.Fatalf("MaxBlock = %d", mb)
	}
	long := tier.Key{Namespace: string(bytes.Repeat([]byte("n"), maxNamespace)), Object: 1}
	d := put(t, s, long, mb)
	mustRead(t, s, long, d)
	if err := s.Put(context.Background(), k(1, 1), make([]byte, mb+1)); !errors.Is(err, tier.ErrTooLarge) {
		t.Fatalf("Put(MaxBlock+1) = %v", err)
	}
	tooLong := tier.Key{Namespace: string(bytes.Repeat([]byte("n"), maxNamespace+1))}
	if err := s.Put(context.Background(), tooLong, []byte("x")); err == nil {
		t.Fatal("Put with a 256-byte namespace succeeded")
	}
}

// TestPartialReadVerifiesOnlyTouchedPages: a corrupt page makes reads that
// touch it fail, while reads of other pages still verify — until the
// corruption is found, after which the block is quarantined.
func TestPartialReadVerifiesOnlyTouchedPages(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, Options{Dir: dir})
	key := k(1, 0)
	d := put(t, s, key, 64*kib)
	l := newest(t, dir, key)
	if err := flipByte(l.path, l.off+int64(l.rec.hdrLen)+5*pageSize+10); err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 8*kib)
	n, err := s.Get(context.Background(), key, p, 8*kib) // pages 2-3
	if err != nil || !bytes.Equal(p[:n], d[8*kib:16*kib]) {
		t.Fatalf("read of clean pages = %d, %v", n, err)
	}
	n, err = s.Get(context.Background(), key, p[:100], 5*pageSize+5) // page 5
	if !errors.Is(err, tier.ErrCorrupt) || n != 0 {
		t.Fatalf("read of corrupt page = %d, %v; want ErrCorrupt", n, err)
	}
	mustNotFound(t, s, key)
	if st := s.Stats(); st.CRCErrors != 1 {
		t.Fatalf("CRCErrors = %d", st.CRCErrors)
	}
}

// TestHeaderCorruptionOnRead: a damaged record header found by Get is
// corruption, not a miss and never data.
func TestHeaderCorruptionOnRead(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, Options{Dir: dir})
	key := k(1, 0)
	put(t, s, key, 10*kib)
	l := newest(t, dir, key)
	if err := flipByte(l.path, l.off+44); err != nil { // inside key.Object
		t.Fatal(err)
	}
	if _, err := get(s, key, 10*kib); !errors.Is(err, tier.ErrCorrupt) {
		t.Fatalf("Get with damaged header = %v; want ErrCorrupt", err)
	}
	mustNotFound(t, s, key)
}

// TestOverwriteNeverRevivesOlder: when the newest copy of a key rots, the
// older copies never come back, in memory or after reopening.
func TestOverwriteNeverRevivesOlder(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, Options{Dir: dir})
	key := k(1, 0)
	ctx := context.Background()
	for v := range uint64(5) {
		if err := s.Put(ctx, key, tiertest.Pattern(key, 5000, v)); err != nil {
			t.Fatal(err)
		}
	}
	if err := corruptPayload(t, dir, key); err != nil {
		t.Fatal(err)
	}
	if _, err := get(s, key, 5000); !errors.Is(err, tier.ErrCorrupt) {
		t.Fatalf("Get = %v; want ErrCorrupt", err)
	}
	mustNotFound(t, s, key)
	// Reopen: the rotten newest record is in the newest segment, so Open
	// finds it and the older versions stay hidden.
	s.Close()
	s = openT(t, Options{Dir: dir})
	mustNotFound(t, s, key)
	if st := s.Stats(); st.TornRecords != 1 {
		t.Fatalf("TornRecords = %d, want 1", st.TornRecords)
	}
	put(t, s, k(2, 0), 100) // starts a new segment: the repaired one is sealed
	// Reopen again: now the repaired segment is sealed; still hidden.
	s.Close()
	s = openT(t, Options{Dir: dir})
	mustNotFound(t, s, key)
	if st := s.Stats(); st.TornRecords != 0 || st.DamagedSegments != 0 {
		t.Fatalf("after repair: %+v", st)
	}
}

func TestDeleteSurvivesRestartAcrossSegments(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, Options{Dir: dir})
	ctx := context.Background()
	var keep []tier.Key
	for i := range 40 { // 40 × 100 KiB: several 1 MiB segments
		put(t, s, k(1, uint32(i)), 100*kib)
		if i%2 == 0 {
			keep = append(keep, k(1, uint32(i)))
		}
	}
	for i := 1; i < 40; i += 2 {
		if err := s.Delete(ctx, k(1, uint32(i))); err != nil {
			t.Fatal(err)
		}
	}
	if st := s.Stats(); st.Segments < 4 {
		t.Fatalf("only %d segments", st.Segments)
	}
	s.Close()
	s = openT(t, Options{Dir: dir})
	for i := range 40 {
		if i%2 == 0 {
			mustRead(t, s, k(1, uint32(i)), tiertest.Pattern(k(1, uint32(i)), 100*kib, 0))
		} else {
			mustNotFound(t, s, k(1, uint32(i)))
		}
	}
	if u := s.Usage(); u.Blocks != int64(len(keep)) {
		t.Fatalf("Usage = %+v", u)
	}
}

func TestFormatRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 4096, 4097, tier.MaxBlockSize} {
		key := tier.Key{Namespace: "namespace", Object: 7, Index: 9, Gen: 3}
		buf := directio.AlignedAlloc(recordLen(key.Namespace, n))
		hl := headerLen(key.Namespace, n)
		copy(buf[hl:], tiertest.Pattern(key, n, 0))
		encodeRecord(buf, recBlock, key, n, 42, 1000)
		r, c, need := decodeRecord(buf[:pageSize], 42)
		if need > 0 {
			r, c, _ = decodeRecord(buf[:need], 42)
		}
		if c != hdrOK || r.key != key || r.seq != 1000 || int(r.payloadLen) != n || int(r.hdrLen) != hl {
			t.Fatalf("n=%d: decode = %+v, %v", n, r, c)
		}
		if !r.verifyPages(buf[hl:hl+n], 0) || tier.Checksum(buf[hl:hl+n]) != r.payloadCRC {
			t.Fatalf("n=%d: checksums do not verify", n)
		}
		if _, c, _ := decodeRecord(buf[:max(pageSize, hl)], 43); c != hdrNone {
			t.Fatalf("n=%d: wrong salt accepted (%v)", n, c)
		}
		// Every single-bit flip in the used header bytes is caught.
		used := hdrFixed + len(key.Namespace) + 4*pagesOf(n)
		for i := 0; i < used; i += 7 {
			b := slices.Clone(buf[:hl])
			b[i] ^= 0x10
			if _, c, _ := decodeRecord(b, 42); c == hdrOK {
				t.Fatalf("n=%d: flip at header byte %d not detected", n, i)
			}
		}
	}
}

func ExampleOpen() {
	dir, _ := os.MkdirTemp("", "g3")
	defer os.RemoveAll(dir)
	s, err := Open(Options{Dir: dir, SegmentBytes: 16 << 20, CapacityBytes: 1 << 30,
		OnEvict: func(keys []tier.Key) { /* demote to G4 */ }})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	key := tier.Key{Namespace: "llama", Object: 1, Index: 0, Gen: 1}
	_ = s.Put(context.Background(), key, []byte("kv bytes"))
	p := make([]byte, 16)
	n, _ := s.Get(context.Background(), key, p, 0)
	fmt.Println(string(p[:n]))
	// Output: kv bytes
}

// TestUnalignedBuffers: callers' buffers at any alignment work with
// O_DIRECT (copied through aligned buffers) and aligned ones are used in
// place; both give the same bytes.
func TestUnalignedBuffers(t *testing.T) {
	s := openT(t, Options{Dir: t.TempDir()})
	ctx := context.Background()
	for _, shift := range []int{0, 1, 512, 4095} {
		for _, n := range []int{4096, 100 * kib, 100*kib + 3} {
			key := k(uint64(shift), uint32(n))
			want := tiertest.Pattern(key, n, 0)
			src := make([]byte, n+shift)
			copy(src[shift:], want)
			if err := s.Put(ctx, key, src[shift:]); err != nil {
				t.Fatal(err)
			}
			for _, off := range []int64{0, 4096, 7} {
				dst := make([]byte, n+shift)
				got, err := s.Get(ctx, key, dst[shift:], off)
				if err != nil || got != n-int(off) || !bytes.Equal(dst[shift:shift+got], want[off:]) {
					t.Fatalf("shift %d n %d off %d: %d, %v", shift, n, off, got, err)
				}
			}
		}
	}
}

// TestCombinePage checks the CRC32C combination against a direct CRC for
// many payload lengths.
func TestCombinePage(t *testing.T) {
	key := k(9, 9)
	for _, n := range []int{1, 4095, 4096, 4097, 8192, 8193, 12287, 65536, 65536 + 17, 1 << 20} {
		payload := tiertest.Pattern(key, n, uint64(n))
		hdr := make([]byte, headerLen("ns", n))
		encodeHeader(hdr, recBlock, key, payload, 1, 1)
		r, c, _ := decodeRecord(hdr, 1)
		if c != hdrOK || r.payloadCRC != tier.Checksum(payload) {
			t.Fatalf("n=%d: payload CRC %08x, want %08x", n, r.payloadCRC, tier.Checksum(payload))
		}
	}
}
