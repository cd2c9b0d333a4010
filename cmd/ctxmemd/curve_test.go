package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCurveOffline: `ctxmemd curve --bundled` writes a well-formed SVG
// with the curve and both tier marks, and CSV rows.
func TestCurveOffline(t *testing.T) {
	out := filepath.Join(t.TempDir(), "c.svg")
	var so, se bytes.Buffer
	if code := run(context.Background(), []string{"ctxmemd", "curve", "--bundled", "--max-keys", "8192",
		"--g2", "4GiB", "--g3", "16GiB", "--block-size", "1MiB", "--out", out}, &so, &se); code != 0 {
		t.Fatalf("exit %d: %s", code, se.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		XMLName  xml.Name   `xml:"svg"`
		Polyline []struct{} `xml:"polyline"`
		Text     []string   `xml:"text"`
	}
	if err := xml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	marks := 0
	for _, tx := range doc.Text {
		if strings.HasPrefix(tx, "G2: 4.1k blocks") || strings.HasPrefix(tx, "G2+G3: 20.5k blocks") {
			marks++
		}
	}
	if len(doc.Polyline) != 1 || marks != 2 {
		t.Errorf("%d polylines, marks in %q", len(doc.Polyline), doc.Text)
	}
	so.Reset()
	if code := run(context.Background(), []string{"ctxmemd", "curve", "--bundled", "--format", "csv"}, &so, &se); code != 0 {
		t.Fatalf("exit %d: %s", code, se.String())
	}
	lines := strings.Split(strings.TrimSpace(so.String()), "\n")
	if lines[0] != "blocks,bytes,hit_ratio" || len(lines) < 40 {
		t.Errorf("csv: %d lines, header %q", len(lines), lines[0])
	}
	if code := run(context.Background(), []string{"ctxmemd", "curve", "--bundled", "--format", "png"}, &so, &se); code != exitUsage {
		t.Errorf("--format png: exit %d", code)
	}
}
