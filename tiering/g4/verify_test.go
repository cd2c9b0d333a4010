package g4_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/ctxmem/ctxmemd/tiering/g4"
	"github.com/ctxmem/ctxmemd/tiering/tiertest"
)

// TestVerifyStore is the offline G4 check of issue 16 item 6: every block
// object is read and verified; a flipped payload byte and a truncated
// object are reported with their keys, a foreign object is counted, and
// nothing is deleted (a Get would quarantine).
func TestVerifyStore(t *testing.T) {
	dir := t.TempDir()
	local := newLocal(t, dir)
	tr := openTier(t, local, g4.TierOptions{})
	for i := range 6 {
		mustPutBlock(t, tr, key(uint64(i), 0), tiertest.Pattern(key(uint64(i), 0), 20_000, 0))
	}
	rewrite(t, dir, key(2, 0), func(b []byte) []byte { b[len(b)-7] ^= 0x04; return b })
	rewrite(t, dir, key(4, 0), func(b []byte) []byte { return b[:len(b)-100] })
	if err := local.Put(context.Background(), g4.DefaultPrefix+"/notablock", bytes.NewReader([]byte("x")), 1, nil); err != nil {
		t.Fatal(err)
	}
	rep, err := g4.VerifyStore(context.Background(), local, g4.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Objects != 6 || rep.Corrupt != 2 || rep.Unreadable != 0 || rep.Foreign != 1 || rep.Bytes != 4*20_000 || rep.Problems() != 2 {
		t.Fatalf("report %+v", rep)
	}
	for _, b := range rep.Bad {
		if (b.Object != 2 && b.Object != 4) || b.Problem != "corrupt" || b.Name != g4.BlockName(g4.DefaultPrefix, key(b.Object, 0)) {
			t.Fatalf("bad %+v", b)
		}
	}
	again, err := g4.VerifyStore(context.Background(), local, g4.VerifyOptions{MaxBad: 1})
	if err != nil || again.Corrupt != 2 || len(again.Bad) != 1 || again.BadOmitted != 1 {
		t.Fatalf("second run (read-only, MaxBad 1) = %+v, %v", again, err)
	}
}
