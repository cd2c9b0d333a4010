package workloads

import (
	"strings"
	"testing"
)

func TestFillVerifyRoundTripAtAnyOffset(t *testing.T) {
	whole := make([]byte, 3*4096)
	Fill(whole, "k", 7, 0)
	for _, off := range []int64{0, 1, 7, 8, 13, 4096, 4099} {
		for _, n := range []int{1, 7, 8, 9, 100, 4096} {
			b := make([]byte, n)
			Fill(b, "k", 7, off)
			if string(b) != string(whole[off:off+int64(n)]) {
				t.Fatalf("Fill at %d len %d differs from the whole-object pattern", off, n)
			}
			if at := Verify(b, "k", 7, off); at != -1 {
				t.Fatalf("Verify at %d len %d: mismatch at %d", off, n, at)
			}
		}
	}
}

func TestVerifyFindsEveryWrongByte(t *testing.T) {
	b := make([]byte, 8192)
	Fill(b, "key", 3, 0)
	for _, i := range []int{0, 5, 8, 4095, 8191} {
		c := append([]byte(nil), b...)
		c[i] ^= 0x40
		if at := Verify(c, "key", 3, 0); at != i {
			t.Errorf("flipped byte %d: Verify says %d", i, at)
		}
	}
	if Verify(b, "key", 4, 0) == -1 || Verify(b, "other", 3, 0) == -1 {
		t.Error("pattern does not depend on generation and key")
	}
}

func TestMatchGenDetectsTornAndZeroObjects(t *testing.T) {
	b := make([]byte, 8192)
	Fill(b, "key", 2, 0)
	if g, why := matchGen(b, "key", 0, []uint64{1, 2, 3}); g != 2 || why != "" {
		t.Fatalf("matchGen = %d %q, want 2", g, why)
	}
	Fill(b[4096:], "key", 1, 4096) // second half from another writer
	g, why := matchGen(b, "key", 0, []uint64{1, 2})
	if g != 0 || !strings.Contains(why, "torn object") || !strings.Contains(why, "4096") {
		t.Fatalf("torn object: matchGen = %d %q", g, why)
	}
	clear(b)
	if _, why := matchGen(b, "key", 0, []uint64{1}); !strings.Contains(why, "zero") {
		t.Fatalf("zero object: %q", why)
	}
}

func TestParamsValidate(t *testing.T) {
	if err := (Params{ObjectSize: 1000}).withDefaults().validate(); err == nil {
		t.Error("ObjectSize 1000 accepted")
	}
	if err := (Params{}).withDefaults().validate(); err != nil {
		t.Errorf("defaults rejected: %v", err)
	}
}
