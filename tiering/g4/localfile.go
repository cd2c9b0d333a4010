package g4

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
)

// On-disk format of one Local object file:
//
//	offset 0: magic "G4L1" (4 bytes)
//	offset 4: metadata length M, uint32 little endian (bytes)
//	offset 8: metadata, M bytes: "key=value\n" per pair, keys sorted
//	offset 8+M: the object's bytes
//
// Metadata lives in the same file as the data rather than in a sidecar
// file or in xattrs: one rename publishes data and metadata together and
// one unlink removes both, so a crash can leave no orphan or mismatched
// sidecar, List needs no sidecar filtering, and nothing depends on user
// xattr support (absent on tmpfs before Linux 6.6 and on some network file
// systems). The cost is one 8-byte read per object in Head and List to learn
// the data offset. Keys are [a-z0-9-] and values printable ASCII
// (ValidateMeta), so neither can contain '=' before the value or '\n'.

const (
	localMagic   = "G4L1"
	localPreLen  = 8 // bytes: magic + metadata length
	maxLocalMeta = MaxMetaBytes + 2*64
)

// errBadLocalFile marks a file under the root that is not a valid object
// file (truncated or foreign); Local reports it as an I/O error.
var errBadLocalFile = errors.New("not a valid local object file")

// encodeLocalMeta returns the preamble and metadata bytes for meta.
func encodeLocalMeta(meta map[string]string) []byte {
	keys := make([]string, 0, len(meta))
	for k := range meta {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(meta[k])
		b.WriteByte('\n')
	}
	out := make([]byte, localPreLen, localPreLen+b.Len())
	copy(out, localMagic)
	binary.LittleEndian.PutUint32(out[4:], uint32(b.Len()))
	return append(out, b.String()...)
}

// readLocalPreamble reads the 8-byte preamble at the start of r and
// returns the metadata length in bytes.
func readLocalPreamble(r io.ReaderAt) (int64, error) {
	var pre [localPreLen]byte
	if _, err := r.ReadAt(pre[:], 0); err != nil {
		if errors.Is(err, io.EOF) {
			return 0, fmt.Errorf("%w: shorter than its preamble", errBadLocalFile)
		}
		return 0, err
	}
	if string(pre[:4]) != localMagic {
		return 0, fmt.Errorf("%w: bad magic %q", errBadLocalFile, pre[:4])
	}
	m := int64(binary.LittleEndian.Uint32(pre[4:]))
	if m > maxLocalMeta {
		return 0, fmt.Errorf("%w: metadata length %d", errBadLocalFile, m)
	}
	return m, nil
}

// readLocalMeta reads and decodes the m bytes of metadata after the
// preamble. An object without metadata yields nil.
func readLocalMeta(r io.ReaderAt, m int64) (map[string]string, error) {
	if m == 0 {
		return nil, nil
	}
	buf := make([]byte, m)
	if _, err := r.ReadAt(buf, localPreLen); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: truncated metadata", errBadLocalFile)
		}
		return nil, err
	}
	meta := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSuffix(string(buf), "\n"), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("%w: bad metadata line %q", errBadLocalFile, line)
		}
		meta[k] = v
	}
	return meta, nil
}
