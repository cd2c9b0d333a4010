package g3

import (
	"github.com/ctxmem/ctxmemd/internal/directio"

	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ctxmem/ctxmemd/tiering/tier"
	"github.com/ctxmem/ctxmemd/tiering/tiertest"
)

// segFiles returns the segment files in dir, oldest first.
func segFiles(t testing.TB, dir string) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	return names
}

// endOfRecords returns the offset just past the last valid record of the
// segment file and the segment's salt.
func endOfRecords(t testing.TB, path string) (int64, uint64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h, ok := decodeSegHeader(b)
	if !ok {
		t.Fatalf("%s: bad segment header", path)
	}
	end := int64(segHeaderLen)
	for off := int64(segHeaderLen); off+pageSize <= int64(len(b)); {
		r, c, _ := decodeRecord(slices.Clone(b[off:min(off+4*pageSize, int64(len(b)))]), h.salt)
		if c != hdrOK {
			off += pageSize
			continue
		}
		off += int64(r.recLen)
		end = off
	}
	return end, h.salt
}

// craft builds a complete block record of key (Pattern payload, salt 0).
func craft(key tier.Key, n int, salt, seq uint64) []byte {
	buf := directio.AlignedAlloc(recordLen(key.Namespace, n))
	copy(buf[headerLen(key.Namespace, n):], tiertest.Pattern(key, n, 0))
	encodeRecord(buf, recBlock, key, n, salt, seq)
	return buf
}

func writeAt(t testing.TB, path string, b []byte, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// TestTornTail simulates what a crash leaves at the end of the newest
// segment: records cut short (header written, payload partly), a torn
// header page, and a complete record written after them by a concurrent
// writer. Reopen must drop the torn ones, keep everything acknowledged,
// hide the older copy of a key whose newer copy is torn, and repair the
// segment so it still scans cleanly once sealed.
func TestTornTail(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, Options{Dir: dir, SegmentBytes: 4 * mib})
	a, b := put(t, s, k(1, 0), 9000), put(t, s, k(1, 1), 70*kib)
	s.Close()

	segs := segFiles(t, dir)
	path := segs[len(segs)-1]
	off, salt := endOfRecords(t, path)
	// 1. new key C, payload cut after 5000 of 20000 bytes.
	c := craft(k(1, 2), 20000, salt, 1000)
	hl := int64(headerLen("ns", 20000))
	writeAt(t, path, c[:hl+5000], off)
	off += int64(len(c))
	// 2. newer copy of A, cut short: A must not come back in its old form.
	a2 := craft(k(1, 0), 9000, salt, 1001)
	writeAt(t, path, a2[:pageSize+100], off)
	off += int64(len(a2))
	// 3. a torn header page (our magic and salt, bad CRC), then the rest of
	// its record as garbage.
	torn := craft(k(1, 3), 8000, salt, 1002)
	torn[20] ^= 1
	writeAt(t, path, torn, off)
	off += int64(len(torn))
	// 4. a complete record written by another writer after the torn ones.
	d := craft(k(1, 4), 30000, salt, 1003)
	writeAt(t, path, d, off)

	s = openT(t, Options{Dir: dir, SegmentBytes: 4 * mib})
	if st := s.Stats(); st.TornRecords != 3 || st.DamagedSegments != 0 {
		t.Fatalf("Stats after torn tail = %+v; want 3 torn, 0 damaged", st)
	}
	mustNotFound(t, s, k(1, 0)) // hidden by its torn newer copy
	mustRead(t, s, k(1, 1), b)
	mustNotFound(t, s, k(1, 2))
	mustNotFound(t, s, k(1, 3))
	mustRead(t, s, k(1, 4), tiertest.Pattern(k(1, 4), 30000, 0))
	_ = a
	// Writes after recovery go to a new segment; the repaired one is sealed.
	e := put(t, s, k(1, 5), 1234)
	s.Close()
	if n := len(segFiles(t, dir)); n != len(segs)+1 {
		t.Fatalf("%d segment files, want %d", n, len(segs)+1)
	}
	s = openT(t, Options{Dir: dir, SegmentBytes: 4 * mib})
	if st := s.Stats(); st.TornRecords != 0 || st.DamagedSegments != 0 {
		t.Fatalf("Stats after repair = %+v; want clean", st)
	}
	mustNotFound(t, s, k(1, 0))
	mustRead(t, s, k(1, 1), b)
	mustNotFound(t, s, k(1, 2))
	mustRead(t, s, k(1, 4), tiertest.Pattern(k(1, 4), 30000, 0))
	mustRead(t, s, k(1, 5), e)
	// The next sequence number is above everything on disk: a new copy of
	// A wins over the torn one on reopen.
	a3 := put(t, s, k(1, 0), 777)
	s.Close()
	s = openT(t, Options{Dir: dir, SegmentBytes: 4 * mib})
	mustRead(t, s, k(1, 0), a3)
}

// TestTornSegmentHeader: a newest segment whose header never made it to
// disk (crash during creation) is removed; older segments are intact.
func TestTornSegmentHeader(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, Options{Dir: dir})
	a := put(t, s, k(1, 0), 5000)
	s.Close()
	segs := segFiles(t, dir)
	id, _ := parseSegName(filepath.Base(segs[len(segs)-1]))
	junk := filepath.Join(dir, segName(id+1))
	if err := os.WriteFile(junk, make([]byte, mib), 0o600); err != nil {
		t.Fatal(err)
	}
	s = openT(t, Options{Dir: dir})
	mustRead(t, s, k(1, 0), a)
	if _, err := os.Stat(junk); !os.IsNotExist(err) {
		t.Fatalf("torn newest segment not removed: %v", err)
	}
	b := put(t, s, k(1, 1), 100)
	mustRead(t, s, k(1, 1), b)
}

// TestDamagedSealedSegment: a damaged record header (or segment header) in
// a sealed segment drops that segment and every older one; newer segments
// survive byte-exact, and nothing stale comes back.
func TestDamagedSealedSegment(t *testing.T) {
	for _, where := range []string{"record header", "segment header"} {
		t.Run(where, func(t *testing.T) {
			dir := t.TempDir()
			s := openT(t, Options{Dir: dir})
			seg := map[tier.Key]string{}
			want := map[tier.Key][]byte{}
			for i := range 50 { // 100 KiB blocks: ~10 per 1 MiB segment
				key := k(1, uint32(i))
				want[key] = put(t, s, key, 100*kib)
			}
			// A key overwritten late: its newest copy is in a newer segment.
			late := k(1, 0)
			want[late] = tiertest.Pattern(late, 3000, 5)
			if err := s.Put(t.Context(), late, want[late]); err != nil {
				t.Fatal(err)
			}
			s.Close()
			for key := range want {
				seg[key] = newest(t, dir, key).path
			}
			segs := segFiles(t, dir)
			if len(segs) < 5 {
				t.Fatalf("only %d segments", len(segs))
			}
			victim := segs[2]
			if where == "record header" {
				var l located
				for key, p := range seg {
					if p == victim {
						l = newest(t, dir, key)
						break
					}
				}
				if err := flipByte(l.path, l.off+50); err != nil {
					t.Fatal(err)
				}
			} else if err := flipByte(victim, 20); err != nil {
				t.Fatal(err)
			}
			s = openT(t, Options{Dir: dir})
			if st := s.Stats(); st.DamagedSegments != 3 {
				t.Fatalf("DamagedSegments = %d; want 3", st.DamagedSegments)
			}
			for key, d := range want {
				if seg[key] <= victim {
					mustNotFound(t, s, key)
				} else {
					mustRead(t, s, key, d)
				}
			}
			if got := len(segFiles(t, dir)); got != len(segs)-3 {
				t.Fatalf("%d segment files left; want %d", got, len(segs)-3)
			}
		})
	}
}
