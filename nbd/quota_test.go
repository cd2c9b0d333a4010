package nbd

import (
	"context"
	"errors"
	"testing"

	"github.com/ctxmem/ctxmemd/catalog"
)

// TestExportReservesItsNamespaceQuota: an export with a Quota reserves its
// whole size in it while served; one that does not fit is refused before
// its object is created, and gives back what the exports before it
// reserved.
func TestExportReservesItsNamespaceQuota(t *testing.T) {
	st := newStore(t, 64<<20)
	q := &catalog.Quota{Limit: 8 << 20}
	srv, err := NewServer(context.Background(), st, []Export{{Name: "a", Size: 4 << 20, Quota: q, QuotaName: "kv"}},
		Options{StateDir: st.dir, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	_ = srv
	if q.Used() != 4<<20 || q.Alloc() != 4<<20 {
		t.Fatalf("quota used %d alloc %d; want the export's 4 MiB", q.Used(), q.Alloc())
	}
	objects := len(st.Objects())
	q2 := &catalog.Quota{Limit: 8 << 20}
	_, err = NewServer(context.Background(), st, []Export{
		{Name: "b", Size: 4 << 20, Quota: q2, QuotaName: "kv2"},
		{Name: "c", Size: 8 << 20, Quota: q2, QuotaName: "kv2"},
	}, Options{StateDir: t.TempDir(), Logger: testLogger()})
	if !errors.Is(err, ErrQuota) {
		t.Fatalf("exports past their quota: %v, want ErrQuota", err)
	}
	if q2.Used() != 0 || q2.Alloc() != 0 {
		t.Fatalf("a refused NewServer kept %d bytes reserved", q2.Used())
	}
	if n := len(st.Objects()); n != objects+1 {
		t.Fatalf("%d objects after the refusal, want %d: only the export that fitted was created", n, objects+1)
	}
}
