package admin

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/tiering"
)

// maintProvider implements Fscker and Collector.
type maintProvider struct {
	fakeProvider
	mu    sync.Mutex
	fsck  []FsckRequest
	gc    []GCRequest
	busy  bool
	delay time.Duration
}

func (m *maintProvider) Fsck(ctx context.Context, req FsckRequest) (tiering.FsckReport, error) {
	m.mu.Lock()
	m.fsck = append(m.fsck, req)
	busy, delay := m.busy, m.delay
	m.mu.Unlock()
	if busy {
		return tiering.FsckReport{}, fmt.Errorf("fsck: %w", ErrBusy)
	}
	if len(req.Tiers) == 1 && req.Tiers[0] == "G3.5" {
		return tiering.FsckReport{}, fmt.Errorf("%w: no G3.5 here", ErrBadRequest)
	}
	select {
	case <-time.After(delay):
	case <-ctx.Done():
		return tiering.FsckReport{}, ctx.Err()
	}
	return tiering.FsckReport{Drop: req.Drop, Objects: 2, Tiers: []tiering.FsckTierReport{{Tier: "G3", Checked: 5, Corrupt: 1}},
		Bad: []tiering.FsckBadCopy{{Object: 7, Namespace: "ns", Block: 1, Tier: "G3", Problem: tiering.FsckCorrupt, Outcome: tiering.FsckKept}}}, nil
}

func (m *maintProvider) CollectGarbage(_ context.Context, req GCRequest) (tiering.GCReport, error) {
	m.mu.Lock()
	m.gc = append(m.gc, req)
	m.mu.Unlock()
	return tiering.GCReport{DryRun: req.DryRun, Tiers: []tiering.GCTierReport{{Tier: "G4", Listed: 3, Garbage: 1, Bytes: 100}}}, nil
}

// TestFsckAndGCEndpoints: POST /fsck and /gc pass their options through
// and return the reports; bad options are 400 (ErrBadRequest), a check
// already running 409 (ErrBusy), a provider without them 501; a check
// longer than the client's usual 30 s timeout is bounded by ctx only.
func TestFsckAndGCEndpoints(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "admin.sock")
	m := &maintProvider{fakeProvider: fakeProvider{st: sampleStatus(), pinned: map[string]bool{}}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go Serve(ctx, Options{Socket: sock, Provider: m})
	waitFor(t, sock)
	c := NewClient(sock)
	defer c.Close()

	req := FsckRequest{Tiers: []string{"G3", "g4"}, Drop: true, Concurrency: 2, ReadTimeoutMS: 500, BytesPerSecond: 1 << 20, MaxBad: 7}
	rep, err := c.Fsck(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Drop || rep.BadCopies() != 1 || len(rep.Bad) != 1 || rep.Bad[0].Object != 7 {
		t.Fatalf("report %+v", rep)
	}
	if _, err := c.Fsck(ctx, FsckRequest{Tiers: []string{"G5"}}); !errors.Is(err, ErrBadRequest) {
		t.Errorf("unknown tier: %v, want ErrBadRequest", err)
	}
	if _, err := c.Fsck(ctx, FsckRequest{Concurrency: 100}); !errors.Is(err, ErrBadRequest) {
		t.Errorf("concurrency 100: %v, want ErrBadRequest", err)
	}
	if _, err := c.Fsck(ctx, FsckRequest{Tiers: []string{"G3.5"}}); !errors.Is(err, ErrBadRequest) {
		t.Errorf("provider's bad request: %v, want ErrBadRequest", err)
	}
	m.mu.Lock()
	m.busy = true
	m.mu.Unlock()
	if _, err := c.Fsck(ctx, FsckRequest{}); !errors.Is(err, ErrBusy) {
		t.Errorf("busy: %v, want ErrBusy", err)
	}
	m.mu.Lock()
	m.busy = false
	m.delay = time.Minute
	m.mu.Unlock()
	short, stop := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = c.Fsck(short, FsckRequest{})
	stop()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("fsck past the caller's deadline: %v", err)
	}

	g, err := c.CollectGarbage(ctx, GCRequest{DryRun: true})
	if err != nil || !g.DryRun || len(g.Tiers) != 1 || g.Tiers[0].Garbage != 1 {
		t.Fatalf("gc: %+v, %v", g, err)
	}
	m.mu.Lock()
	if !reflect.DeepEqual(m.fsck[0], req) || len(m.gc) != 1 || !m.gc[0].DryRun {
		t.Errorf("provider saw fsck %+v gc %+v", m.fsck, m.gc)
	}
	m.mu.Unlock()

	// A provider without them.
	sock2, _, _ := startServer(t)
	c2 := NewClient(sock2)
	defer c2.Close()
	if _, err := c2.Fsck(ctx, FsckRequest{}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("fsck on a provider without Fscker: %v", err)
	}
	if _, err := c2.CollectGarbage(ctx, GCRequest{}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("gc on a provider without Collector: %v", err)
	}
}
