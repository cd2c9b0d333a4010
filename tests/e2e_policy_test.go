package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/ctxmem/ctxmemd/tests/harness"
)

// TestE2EG2Policies: every G2 eviction policy (g2_policy) serves a mount
// whose files do not fit in G2: files written and read in a skewed
// pattern read back byte-exact while G2 evicts to G3, with each policy.
func TestE2EG2Policies(t *testing.T) {
	bin := needE2E(t)
	for _, policy := range []string{"decay", "adaptive", "density", "arbiter"} {
		t.Run(policy, func(t *testing.T) {
			d := harness.Start(t, bin, harness.Options{DRAM: "16MiB", G3Size: "512MiB", Extra: []string{"--g2-policy", policy}})
			const files, size = 96, 512 << 10 // 48 MiB: three times G2
			want := func(i int) []byte { return boundedPattern(i, size) }
			for i := range files {
				if err := os.WriteFile(filepath.Join(d.Namespace(), fmt.Sprintf("kv-%03d", i)), want(i), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			// A hot eighth read often, the rest once per pass.
			for pass := range 3 {
				for i := range files {
					if i%8 != 0 && pass > 0 {
						continue
					}
					got, err := os.ReadFile(filepath.Join(d.Namespace(), fmt.Sprintf("kv-%03d", i)))
					if err != nil {
						t.Fatalf("pass %d, file %d: %v", pass, i, err)
					}
					if !bytes.Equal(got, want(i)) {
						t.Fatalf("pass %d, file %d: wrong bytes", pass, i)
					}
				}
			}
			st := status(t, d)
			var ev map[string]int64
			if raw, ok := st.Stats["evictions"]; !ok || json.Unmarshal(raw, &ev) != nil || ev["G2"] == 0 {
				t.Fatalf("no G2 evictions with %d MiB of files in a 16 MiB G2 (stats %s)", files*size>>20, st.Stats["evictions"])
			}
			t.Logf("%s: %d G2 evictions", policy, ev["G2"])
		})
	}
}
