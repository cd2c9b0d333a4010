package tiertest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ctxmem/ctxmemd/internal/testchild"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// refTier is a deliberately simple reference tier used to test the suite:
// one file per block named after the key, holding a 4-byte CRC32C and the
// payload; full at capacity (ErrNoSpace). A mutant field breaks one rule so
// the suite's own tests can check that Run notices.
type refTier struct {
	dir    string
	cap    int64
	mutant string

	mu     sync.Mutex
	closed bool
	sizes  map[tier.Key]int64
}

func openRef(t *testing.T, dir string, capacity int64, mutant string) *refTier {
	r := &refTier{dir: dir, cap: capacity, mutant: mutant, sizes: map[tier.Key]int64{}}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		var k tier.Key
		if _, err := fmt.Sscanf(e.Name(), "%s %d %d %d", &k.Namespace, &k.Object, &k.Index, &k.Gen); err != nil {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		r.sizes[k] = fi.Size() - 4
	}
	return r
}

func (r *refTier) path(k tier.Key) string {
	return filepath.Join(r.dir, fmt.Sprintf("%s %d %d %d", k.Namespace, k.Object, k.Index, k.Gen))
}

func (r *refTier) Name() string { return "REF" }

func (r *refTier) Put(_ context.Context, k tier.Key, data []byte) error {
	if len(data) > tier.MaxBlockSize {
		return tier.ErrTooLarge
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return tier.ErrClosed
	}
	if r.cap > 0 && r.used()-r.sizes[k]+int64(len(data)) > r.cap {
		return tier.ErrNoSpace
	}
	buf := make([]byte, 4+len(data))
	binary.LittleEndian.PutUint32(buf, tier.Checksum(data))
	copy(buf[4:], data)
	if r.mutant == "flipstore" && len(data) > 5000 {
		buf[4+len(data)/2] ^= 1
		binary.LittleEndian.PutUint32(buf, tier.Checksum(buf[4:]))
	}
	if err := os.WriteFile(r.path(k), buf, 0o600); err != nil {
		return err
	}
	r.sizes[k] = int64(len(data))
	return nil
}

func (r *refTier) used() int64 {
	var n int64
	for _, s := range r.sizes {
		n += s
	}
	return n
}

func (r *refTier) Get(_ context.Context, k tier.Key, p []byte, off int64) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0, tier.ErrClosed
	}
	if _, ok := r.sizes[k]; !ok {
		return 0, tier.ErrNotFound
	}
	if off < 0 {
		return 0, errors.New("negative offset")
	}
	buf, err := os.ReadFile(r.path(k))
	if err != nil {
		return 0, err
	}
	if tier.Checksum(buf[4:]) != binary.LittleEndian.Uint32(buf) && r.mutant != "nocrc" {
		delete(r.sizes, k)
		_ = os.Remove(r.path(k))
		return 0, tier.ErrCorrupt
	}
	data := buf[4:]
	if off >= int64(len(data)) {
		return 0, nil
	}
	n := copy(p, data[off:])
	if r.mutant == "offbyone" && off > 0 && n > 0 {
		copy(p, data[off-1:])
	}
	return n, nil
}

func (r *refTier) Stat(ctx context.Context, k tier.Key) (int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0, tier.ErrClosed
	}
	n, ok := r.sizes[k]
	if !ok {
		return 0, tier.ErrNotFound
	}
	return n, nil
}

func (r *refTier) Delete(_ context.Context, k tier.Key) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return tier.ErrClosed
	}
	if r.mutant == "nodelete" {
		return nil
	}
	delete(r.sizes, k)
	if err := os.Remove(r.path(k)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

func (r *refTier) Range(ctx context.Context, fn func(tier.Key, int64) bool) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return tier.ErrClosed
	}
	m := make(map[tier.Key]int64, len(r.sizes))
	for k, n := range r.sizes {
		m[k] = n
	}
	r.mu.Unlock()
	for k, n := range m {
		if !fn(k, n) {
			break
		}
	}
	return nil
}

func (r *refTier) Usage() tier.Usage {
	r.mu.Lock()
	defer r.mu.Unlock()
	u := tier.Usage{UsedBytes: r.used(), CapacityBytes: r.cap, Blocks: int64(len(r.sizes))}
	if r.mutant == "usage" && u.Blocks > 2 {
		u.UsedBytes++
	}
	return u
}

func (r *refTier) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	return nil
}

func refHarness(mutant string) Harness {
	return Harness{
		Open: func(t *testing.T, dir string) tier.Tier { return openRef(t, dir, 0, mutant) },
		Corrupt: func(t *testing.T, dir string, k tier.Key) error {
			p := (&refTier{dir: dir}).path(k)
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			b[len(b)-1] ^= 0x40
			return os.WriteFile(p, b, 0o600)
		},
		OpenSmall:     func(t *testing.T, dir string) tier.Tier { return openRef(t, dir, 1<<20, mutant) },
		SmallCapacity: 1 << 20,
	}
}

// TestReference runs the suite against the reference tier (all must pass).
// With TIERTEST_MUTANT set it runs against that mutant instead; see
// TestSuiteCatchesMutants.
func TestReference(t *testing.T) {
	Run(t, refHarness(os.Getenv("TIERTEST_MUTANT")))
}

// TestSuiteCatchesMutants re-runs this test binary against broken variants
// of the reference tier and checks that the named subtest fails.
func TestSuiteCatchesMutants(t *testing.T) {
	for mutant, sub := range map[string]string{
		"offbyone":  "RangeReads",
		"nodelete":  "Delete",
		"usage":     "Usage",
		"nocrc":     "Corruption",
		"flipstore": "PutGet",
	} {
		t.Run(mutant, func(t *testing.T) {
			cmd := testchild.Tests("^TestReference$/^"+sub+"$", "TIERTEST_MUTANT="+mutant)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("suite passed against mutant %q:\n%s", mutant, out)
			}
			if !strings.Contains(string(out), "--- FAIL: TestReference/"+sub) {
				t.Fatalf("mutant %q: subtest %s did not fail:\n%s", mutant, sub, out)
			}
		})
	}
}
