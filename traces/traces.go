// Package traces owns the request traces ctxmemd replays and simulates: the
// bundled Mooncake conversation trace (embedded; see README.md in this
// directory for its source, license and how it was produced) and opening
// trace files, plain or gzip-compressed.
//
// Compression is recognised by the gzip magic bytes (1f 8b), not by the file
// name, so a compressed trace without a .gz suffix reads the same.
package traces

import (
	"bufio"
	"bytes"
	"compress/gzip"
	_ "embed"
	"fmt"
	"io"
	"os"
)

// BundledName names the embedded trace in messages (its path in the
// repository).
const BundledName = "traces/conversation_trace.jsonl.gz"

//go:embed conversation_trace.jsonl.gz
var bundled []byte

// Bundled returns the embedded Mooncake conversation trace, decompressed
// as it is read (JSON lines).
func Bundled() io.Reader {
	zr, err := gzip.NewReader(bytes.NewReader(bundled))
	if err != nil { // the embedded file is a build input: it cannot change
		panic(fmt.Sprintf("traces: embedded %s: %v", BundledName, err))
	}
	return zr
}

// Decompress returns r's bytes, decompressed when they begin with the gzip
// magic bytes and unchanged otherwise. Errors in the compressed stream
// surface from Read.
func Decompress(r io.Reader) (io.Reader, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	magic, _ := br.Peek(2) // a short or failing stream is not gzip: Read reports it
	if len(magic) < 2 || magic[0] != 0x1f || magic[1] != 0x8b {
		return br, nil
	}
	zr, err := gzip.NewReader(br)
	if err != nil {
		return nil, fmt.Errorf("traces: gzip: %w", err)
	}
	return zr, nil
}

// Open opens the trace file at path for reading, decompressing it if it is
// gzip; path "" opens the bundled trace. Close the result.
func Open(path string) (io.ReadCloser, error) {
	if path == "" {
		return io.NopCloser(Bundled()), nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	r, err := Decompress(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return readCloser{r, f}, nil
}

// Name is how messages name the trace Open(path) reads.
func Name(path string) string {
	if path == "" {
		return "the bundled trace (" + BundledName + ")"
	}
	return path
}

type readCloser struct {
	io.Reader
	io.Closer
}
