// Package msgpackguard checks the shape of MessagePack bytes from another
// process before they reach the decoder (github.com/vmihailenco/msgpack/v5),
// which pre-allocates declared lengths: the control messages of the
// sidecars (sidecar/msg) and the values of the pool's key-value buckets
// (fabric/poolkv).
package msgpackguard

import (
	"encoding/binary"
	"errors"
)

// ErrShape is returned by Check for input that is not one complete,
// plausible MessagePack value.
var ErrShape = errors.New("not one well-formed MessagePack value")

// maxDepth bounds container nesting.
const maxDepth = 32

// Check walks data as MessagePack (spec: formats section) without
// decoding it and refuses it unless it is exactly one value whose every
// array and map declares no more elements than bytes remain to hold them
// (each element takes at least one byte). The decoder pre-allocates
// declared lengths up to a million elements, so without this check a few
// malformed bytes could make it allocate tens of MiB.
func Check(data []byte) error {
	pos := 0
	pending := 1 // values still to read
	var stack []int
	for pending > 0 {
		if pos >= len(data) {
			return ErrShape
		}
		b := data[pos]
		pos++
		pending--
		var n, skip int // container elements; payload bytes to skip
		container := false
		need := func(k int) (int, bool) {
			if pos+k > len(data) {
				return 0, false
			}
			var v uint64
			switch k {
			case 1:
				v = uint64(data[pos])
			case 2:
				v = uint64(binary.BigEndian.Uint16(data[pos:]))
			case 4:
				v = uint64(binary.BigEndian.Uint32(data[pos:]))
			}
			pos += k
			if v > uint64(len(data)) {
				return 0, false
			}
			return int(v), true
		}
		ok := true
		switch {
		case b <= 0x7f, b >= 0xe0, b == 0xc0, b == 0xc2, b == 0xc3:
		case b >= 0x80 && b <= 0x8f:
			n, container = 2*int(b&0x0f), true
		case b >= 0x90 && b <= 0x9f:
			n, container = int(b&0x0f), true
		case b >= 0xa0 && b <= 0xbf:
			skip = int(b & 0x1f)
		case b == 0xc4 || b == 0xd9:
			skip, ok = need(1)
		case b == 0xc5 || b == 0xda:
			skip, ok = need(2)
		case b == 0xc6 || b == 0xdb:
			skip, ok = need(4)
		case b == 0xc7:
			skip, ok = need(1)
			skip++
		case b == 0xc8:
			skip, ok = need(2)
			skip++
		case b == 0xc9:
			skip, ok = need(4)
			skip++
		case b == 0xca:
			skip = 4
		case b == 0xcb:
			skip = 8
		case b == 0xcc || b == 0xd0:
			skip = 1
		case b == 0xcd || b == 0xd1:
			skip = 2
		case b == 0xce || b == 0xd2:
			skip = 4
		case b == 0xcf || b == 0xd3:
			skip = 8
		case b >= 0xd4 && b <= 0xd8:
			skip = 1 + 1<<(b-0xd4)
		case b == 0xdc:
			n, ok = need(2)
			container = true
		case b == 0xdd:
			n, ok = need(4)
			container = true
		case b == 0xde:
			n, ok = need(2)
			n *= 2
			container = true
		case b == 0xdf:
			n, ok = need(4)
			n *= 2
			container = true
		default: // 0xc1 is never used
			return ErrShape
		}
		if !ok || pos+skip > len(data) {
			return ErrShape
		}
		pos += skip
		if container {
			if n > len(data)-pos {
				return ErrShape
			}
			if len(stack) >= maxDepth {
				return ErrShape
			}
			stack = append(stack, pending)
			pending = n
		}
		for pending == 0 && len(stack) > 0 {
			pending = stack[len(stack)-1]
			stack = stack[:len(stack)-1]
		}
	}
	if pos != len(data) {
		return ErrShape
	}
	return nil
}
