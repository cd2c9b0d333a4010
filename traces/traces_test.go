package traces

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const sample = "{\"timestamp\": 0, \"hash_ids\": [0, 1]}\n{\"timestamp\": 5, \"hash_ids\": [0, 2]}\n"

func gz(t *testing.T, s string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func readAll(t *testing.T, path string) string {
	t.Helper()
	rc, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestOpenDetectsGzipByContent: plain, .gz and gzip without the suffix
// all read as the same JSON lines.
func TestOpenDetectsGzipByContent(t *testing.T) {
	dir := t.TempDir()
	files := map[string][]byte{
		"plain.jsonl":    []byte(sample),
		"trace.jsonl.gz": gz(t, sample),
		"nosuffix.jsonl": gz(t, sample),
	}
	for name, b := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, p); got != sample {
			t.Errorf("%s: read %q, want %q", name, got, sample)
		}
	}
}

func TestDecompressShortAndBroken(t *testing.T) {
	for _, s := range []string{"", "{", "\x1f"} {
		r, err := Decompress(strings.NewReader(s))
		if err != nil {
			t.Fatalf("Decompress(%q): %v", s, err)
		}
		if b, _ := io.ReadAll(r); string(b) != s {
			t.Errorf("Decompress(%q) read %q", s, b)
		}
	}
	// A gzip header followed by garbage: an error, not garbage lines.
	bad := append(gz(t, sample)[:10], "not deflate data"...)
	r, err := Decompress(bytes.NewReader(bad))
	if err == nil {
		_, err = io.ReadAll(r)
	}
	if err == nil {
		t.Error("broken gzip stream read without error")
	}
	if _, err := Open(filepath.Join(t.TempDir(), "none.jsonl")); !os.IsNotExist(err) {
		t.Errorf("Open(missing) err = %v, want not-exist", err)
	}
}

// TestBundled checks the embedded trace is the Mooncake release file
// README.md describes (same SHA-256, 12,031 requests).
func TestBundled(t *testing.T) {
	rc, err := Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	h := sha256.New()
	lines := 0
	sc := bufio.NewScanner(io.TeeReader(rc, h))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		lines++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	const want = "b8cbb061a85206d729d91cdc2981f43c9e0d99209dce588d3af5f7934408b9df"
	if got := hex.EncodeToString(h.Sum(nil)); got != want || lines != 12031 {
		t.Errorf("bundled trace: sha256 %s, %d lines; want %s, 12031 lines", got, lines, want)
	}
	if !strings.Contains(Name(""), BundledName) || Name("x.jsonl") != "x.jsonl" {
		t.Errorf("Name: %q %q", Name(""), Name("x.jsonl"))
	}
}
