package g4

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// Object names of blocks (one object per block):
//
//	<prefix>/<namespace>/<object>/<gen>/<index>
//
// namespace is percent-encoded as one segment (encodeSegment: bytes outside
// [A-Za-z0-9._-] and a leading '.' become %XX; the empty namespace is "%"),
// so any namespace string, even one holding '/' or "..", gives a valid
// name; object and gen are 16 and index 8 lower-case hex digits.
//
// Why this shape: fixed-width hex sorts numerically in a listing and parses
// back one-to-one, so Range can tell our objects from anything else under
// the prefix; object before gen before index puts every block of one
// generation under one prefix, so a whole object or generation can be
// listed or dropped with one prefix listing; a namespace (model identity)
// can be drained or expired by prefix, or given its own S3 lifecycle rule.
// One object per block costs one S3 PUT and one GET per block (about 10–50
// ms of latency and a per-request fee each), so runs of blocks of one
// generation can instead share a pack object in the same directory
// (packname.go), whose last segment starts with 'p'.

// emptyNamespace is the segment that stands for the empty namespace; a lone
// '%' is never produced by encodeSegment.
const emptyNamespace = "%"

// BlockName returns the object name of block k under prefix (layout
// above), e.g. "blocks/llama3/0000000000000007/0000000000000001/0000002a".
func BlockName(prefix string, k tier.Key) string {
	ns := emptyNamespace
	if k.Namespace != "" {
		ns = encodeSegment(k.Namespace)
	}
	return fmt.Sprintf("%s/%s/%016x/%016x/%08x", prefix, ns, k.Object, k.Gen, k.Index)
}

// ParseBlockName inverts BlockName; ok is false for any name BlockName
// cannot produce (so foreign objects under the prefix are ignored).
func ParseBlockName(prefix, name string) (k tier.Key, ok bool) {
	rest, found := strings.CutPrefix(name, prefix+"/")
	if !found {
		return k, false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 4 {
		return k, false
	}
	if parts[0] != emptyNamespace {
		if k.Namespace, ok = decodeSegment(parts[0]); !ok {
			return k, false
		}
	}
	var err1, err2, err3 error
	k.Object, err1 = parseHex(parts[1], 16)
	k.Gen, err2 = parseHex(parts[2], 16)
	idx, err3 := parseHex(parts[3], 8)
	if err1 != nil || err2 != nil || err3 != nil {
		return k, false
	}
	k.Index = uint32(idx)
	return k, true
}

// parseHex parses exactly width lower-case hex digits.
func parseHex(s string, width int) (uint64, error) {
	if len(s) != width {
		return 0, fmt.Errorf("want %d hex digits, got %q", width, s)
	}
	for i := 0; i < len(s); i++ {
		if !(s[i] >= '0' && s[i] <= '9' || s[i] >= 'a' && s[i] <= 'f') {
			return 0, fmt.Errorf("not lower-case hex: %q", s)
		}
	}
	return strconv.ParseUint(s, 16, 64)
}
