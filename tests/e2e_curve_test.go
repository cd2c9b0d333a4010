package tests

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/admin"
	"github.com/ctxmem/ctxmemd/tests/harness"
)

// TestE2ECurve replays 500 trace requests, then: status --json has a
// curve of every lookup whose hit ratio at a large capacity (the tiers
// hold every block) is the replay's found-in-any-tier ratio within 0.05,
// and `ctxmemd curve --out x.svg` writes a well-formed SVG.
func TestE2ECurve(t *testing.T) {
	d := harness.Start(t, needE2E(t), harness.Options{DRAM: "256MiB", G3Size: "1GiB"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	res, code, stderr, err := harness.Replay(ctx, d.Binary(), replayArgs(t, d, replayRequests(t, 500))...)
	if err != nil || code != harness.ExitOK {
		t.Fatalf("replay: exit %d, %v\nstderr: %s", code, err, stderr)
	}
	st, err := d.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var full admin.Status
	if err := json.Unmarshal(st.Raw, &full); err != nil {
		t.Fatal(err)
	}
	if full.Curves == nil || len(full.Curves.Total.Points) == 0 || len(full.Curves.Namespaces) == 0 {
		t.Fatalf("no curve in status: %s", st.Raw)
	}
	cv := full.Curves.Total
	large := cv.Points[len(cv.Points)-1].Blocks
	got := cv.HitRatio(large)
	t.Logf("curve: %d refs, rate %v, %d keys, %d bytes, %d points; hit ratio at %.0f blocks %.4f; replay found in any tier %.4f, daemon %d lookups",
		cv.Refs, cv.SamplingRate, cv.TrackedKeys, cv.MemoryBytes, len(cv.Points), large, got, res.AnyTierRatio, st.Lookups.Lookups())
	if cv.Refs != st.Lookups.Lookups() {
		t.Errorf("curve counts %d references, the daemon %d lookups", cv.Refs, st.Lookups.Lookups())
	}
	if diff := got - res.AnyTierRatio; diff > 0.05 || diff < -0.05 {
		t.Errorf("curve at %.0f blocks %.4f, replay found in any tier %.4f", large, got, res.AnyTierRatio)
	}
	out := filepath.Join(t.TempDir(), "x.svg")
	cmd := exec.CommandContext(ctx, d.Binary(), "curve", "--admin", d.Admin, "--out", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ctxmemd curve: %v: %s", err, b)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := xml.NewDecoder(f)
	var root string
	polylines, marks := 0, 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", out, err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = se.Name.Local
			}
			if se.Name.Local == "polyline" {
				polylines++
			}
		}
		if cd, ok := tok.(xml.CharData); ok && strings.HasPrefix(string(cd), "G2") {
			marks++
		}
	}
	if root != "svg" || polylines != 1 || marks != 2 {
		t.Errorf("%s: root %q, %d polylines, %d tier marks (want svg, 1, 2)", out, root, polylines, marks)
	}
}
