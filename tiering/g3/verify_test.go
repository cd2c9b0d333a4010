package g3

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/ctxmem/ctxmemd/tiering/tier"
	"github.com/ctxmem/ctxmemd/tiering/tiertest"
)

// flipPayload flips one byte of the payload of key's current record and
// returns the segment file name and the record's offset.
func flipPayload(t *testing.T, s *Store, key tier.Key, at int) (string, int64) {
	t.Helper()
	s.mu.RLock()
	e, ok := s.entryLocked(key)
	s.mu.RUnlock()
	if !ok || e.tomb {
		t.Fatalf("%v not indexed", key)
	}
	f, err := os.OpenFile(e.seg.path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pos := e.off + int64(e.hdrLen) + int64(at)
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, pos); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x20
	if _, err := f.WriteAt(b, pos); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	return filepath.Base(e.seg.path), e.off
}

// TestVerifyFindsFlippedByte is the offline check of issue 16 item 6: a
// byte flipped in one record's payload is found (live, with its key and
// place), a flipped byte in a superseded record is found but not live,
// every other record passes, nothing is changed, and a directory a store
// has open is refused.
func TestVerifyFindsFlippedByte(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openT(t, Options{Dir: dir})
	var want [][]byte
	for i := range 12 {
		want = append(want, put(t, s, k(uint64(i), 0), 48*kib))
	}
	old := k(20, 0)
	put(t, s, old, 8*kib)
	oldSeg, oldOff := flipPayload(t, s, old, 100) // superseded just below
	put(t, s, old, 8*kib)
	seg, off := flipPayload(t, s, k(5, 0), 4097)

	if _, err := Verify(ctx, dir, VerifyOptions{}); !errors.Is(err, ErrInUse) {
		t.Fatalf("Verify of an open directory = %v, want ErrInUse", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := Verify(ctx, dir, VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Records != 14 || rep.Corrupt != 2 || rep.CorruptLive != 1 || rep.Live != 13 || rep.Superseded != 1 ||
		rep.DamagedHeaders != 0 || rep.BadSegments != 0 || rep.Segments == 0 {
		t.Fatalf("report %+v", rep)
	}
	if len(rep.Bad) != 2 {
		t.Fatalf("bad %+v", rep.Bad)
	}
	for _, b := range rep.Bad {
		switch {
		case b.Segment == seg && b.Offset == off:
			if !b.Live || b.Object != 5 || b.Index != 0 || b.Namespace != "ns" || b.Problem != ProblemPayloadCRC || b.Effect == "" {
				t.Fatalf("live bad record %+v", b)
			}
		case b.Segment == oldSeg && b.Offset == oldOff:
			if b.Live || b.Object != 20 {
				t.Fatalf("superseded bad record %+v", b)
			}
		default:
			t.Fatalf("unexpected bad record %+v", b)
		}
	}
	// Read-only: a second run finds the same, and the store opens with
	// every other record intact (the newest segment's bad payload is
	// Open's to handle).
	if again, err := Verify(ctx, dir, VerifyOptions{}); err != nil || again.Corrupt != 2 {
		t.Fatalf("second Verify = %+v, %v", again, err)
	}
	s = openT(t, Options{Dir: dir})
	for i, w := range want {
		if i == 5 {
			continue
		}
		mustRead(t, s, k(uint64(i), 0), w)
	}
	if _, err := get(s, k(5, 0), 48*kib); err == nil {
		t.Fatal("the flipped record read back without an error")
	}
}

// TestDeleteOfQuarantinedKeyIsDurable: a record of a sealed segment that a
// read found corrupt (quarantined) and that is then deleted stays deleted
// across a restart (a tombstone is written; Open does not verify sealed
// segments' payloads, so without it the record would come back).
func TestDeleteOfQuarantinedKeyIsDurable(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openT(t, Options{Dir: dir})
	bad := k(1, 0)
	put(t, s, bad, 16*kib)
	flipPayload(t, s, bad, 10)
	// Fill past the first segment so the record's segment is sealed.
	for i := range 40 {
		put(t, s, k(100+uint64(i), 0), 32*kib)
	}
	if _, err := get(s, bad, 16*kib); !errors.Is(err, tier.ErrCorrupt) {
		t.Fatalf("read of the flipped record = %v, want ErrCorrupt", err)
	}
	if _, err := get(s, bad, 16*kib); !errors.Is(err, tier.ErrNotFound) {
		t.Fatalf("read after quarantine = %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, bad); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openT(t, Options{Dir: dir})
	if _, err := s.Stat(ctx, bad); !errors.Is(err, tier.ErrNotFound) {
		t.Fatalf("deleted quarantined key after a restart: Stat = %v, want ErrNotFound", err)
	}
	mustRead(t, s, k(100, 0), tiertest.Pattern(k(100, 0), 32*kib, 0))
}
