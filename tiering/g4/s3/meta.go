package s3

import (
	"encoding/base64"
	"strings"
)

// Object metadata travels as x-amz-meta-<key> headers. g4 metadata keys are
// [a-z0-9-] and values printable ASCII (g4.ValidateMeta), which HTTP
// carries unchanged with two exceptions seen in practice: leading and
// trailing spaces are trimmed, and some servers (versitygw) decode RFC 2047
// encoded words ("=?UTF-8?B?...?=") on the way in. A value that starts or
// ends with a space, contains "=?", or starts with the marker below is
// therefore sent as the marker followed by its standard base64; every
// other value is sent as is. A received value is decoded only if it
// starts with the marker, which a raw value sent as is never does (and
// base64 never contains "=?").
const (
	metaHeaderPrefix = "x-amz-meta-"
	encodedMarker    = "~b64~"
)

// encodeMeta returns the minio-go UserMetadata for meta (keys already
// carry the x-amz-meta- prefix, so minio-go never mistakes one for a
// standard header such as content-type).
func encodeMeta(meta map[string]string) map[string]string {
	if len(meta) == 0 {
		return nil
	}
	out := make(map[string]string, len(meta))
	for k, v := range meta {
		if strings.HasPrefix(v, " ") || strings.HasSuffix(v, " ") || strings.Contains(v, "=?") || strings.HasPrefix(v, encodedMarker) {
			v = encodedMarker + base64.StdEncoding.EncodeToString([]byte(v))
		}
		out[metaHeaderPrefix+k] = v
	}
	return out
}

// decodeMeta turns minio-go's ObjectInfo.UserMetadata (keys without the
// x-amz-meta- prefix, in canonical header case) back into g4 metadata.
func decodeMeta(um map[string]string) map[string]string {
	out := make(map[string]string, len(um))
	for k, v := range um {
		if rest, ok := strings.CutPrefix(v, encodedMarker); ok {
			if b, err := base64.StdEncoding.DecodeString(rest); err == nil {
				v = string(b)
			}
		}
		out[strings.ToLower(k)] = v
	}
	return out
}
