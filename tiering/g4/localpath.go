package g4

import (
	"fmt"
	"path/filepath"
	"strings"
)

// How Local maps object names to paths under its root directory.
//
// Each '/'-separated segment of a name is percent-encoded on its own:
// bytes of [A-Za-z0-9._-] stay as they are, every other byte (space, '%',
// '+', '@', UTF-8 bytes of non-ASCII characters, ...) becomes %XX with
// upper-case hex, and a leading '.' becomes %2E. So an encoded segment is
// never empty, never starts with '.', and never contains '/', '@' or a path
// separator: it cannot climb out of the root, hide, or collide with the
// temporary files (".tmp-*") that Put creates. Decoding is strict (the
// encoding is canonical), so anything that does not re-encode to itself is
// not an object (foreign files are ignored by List).
//
// Inner segments are directories named by their encoding; the last segment
// is a file named by its encoding plus objSuffix ("@"). Because '@' never
// occurs in an encoding, an object "a" (file "a@") and an object "a/b"
// (directory "a", file "a/b@") can both exist, as they can in S3.
//
// An encoded segment plus suffix must fit a file name (255 bytes), so a
// single segment of Local holds at most about 84 bytes of non-ASCII text
// or 254 bytes of ASCII letters and digits; longer segments are ErrInvalid.

const (
	objSuffix   = "@"
	tempPrefix  = ".tmp-"
	maxFileName = 255 // bytes, NAME_MAX on Linux file systems
)

// encodeSegment percent-encodes one name segment (see above).
func encodeSegment(seg string) string {
	var b strings.Builder
	b.Grow(len(seg))
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if isPlain(c) && !(i == 0 && c == '.') {
			b.WriteByte(c)
			continue
		}
		const hex = "0123456789ABCDEF"
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

func isPlain(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' ||
		c == '.' || c == '_' || c == '-'
}

// decodeSegment inverts encodeSegment; ok is false when enc is not the
// canonical encoding of any segment.
func decodeSegment(enc string) (seg string, ok bool) {
	if enc == "" {
		return "", false
	}
	b := make([]byte, 0, len(enc))
	for i := 0; i < len(enc); i++ {
		c := enc[i]
		if c != '%' {
			b = append(b, c)
			continue
		}
		if i+2 >= len(enc) {
			return "", false
		}
		hi, ok1 := unhex(enc[i+1])
		lo, ok2 := unhex(enc[i+2])
		if !ok1 || !ok2 {
			return "", false
		}
		b = append(b, hi<<4|lo)
		i += 2
	}
	seg = string(b)
	if encodeSegment(seg) != enc {
		return "", false
	}
	return seg, true
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// objectPath returns the file path of object name under root, or an error
// wrapping ErrInvalid.
func objectPath(root, name string) (string, error) {
	if err := ValidateName(name); err != nil {
		return "", err
	}
	segs := strings.Split(name, "/")
	parts := make([]string, 0, len(segs)+1)
	parts = append(parts, root)
	for i, s := range segs {
		e := encodeSegment(s)
		if i == len(segs)-1 {
			e += objSuffix
		}
		if len(e) > maxFileName {
			return "", fmt.Errorf("%w: segment %q of %q encodes to %d bytes (max %d for a local file name)",
				ErrInvalid, s, name, len(e), maxFileName)
		}
		parts = append(parts, e)
	}
	return filepath.Join(parts...), nil
}
