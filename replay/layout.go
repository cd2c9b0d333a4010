package replay

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strings"
)

// Layout is a file-naming scheme of an inference engine's KV offload
// directory (workloads W1–W4 of the engine notes, ENGINES.md, which are not
// part of this repository).
type Layout string

// Layouts.
const (
	// LayoutFlat: <mount>/<16-hex hash>.bin.
	LayoutFlat Layout = "flat"
	// LayoutSGLang (W1, SGLang HiCacheFile): <mount>/<sha256 hex>_Llama-3.1-8B_0_1.bin.
	LayoutSGLang Layout = "sglang"
	// LayoutVLLM (W3, vLLM FS tier / llm-d):
	// <mount>/Llama-3.1-8B_<12hex>_r0/<hhh>/<hh>_g0/<16-hex hash>.bin.
	LayoutVLLM Layout = "vllm"
	// LayoutLMCache (W2, LMCache local disk): <mount>/Llama-3.1-8B@1@0@<16-hex hash>@bfloat16.pt.
	LayoutLMCache Layout = "lmcache"
	// LayoutNIXL (W4, NIXL POSIX): <mount>/<2-hex bucket>/<16-hex hash>_k.
	LayoutNIXL Layout = "nixl"
)

// modelName is the model the engine layouts name (sizes in ENGINES.md
// assume Llama-3.1-8B).
const modelName = "Llama-3.1-8B"

// Layouts lists every layout, default first.
func Layouts() []Layout {
	return []Layout{LayoutFlat, LayoutSGLang, LayoutVLLM, LayoutLMCache, LayoutNIXL}
}

// ParseLayout returns the layout named s, or an error listing the valid
// names.
func ParseLayout(s string) (Layout, error) {
	for _, l := range Layouts() {
		if string(l) == s {
			return l, nil
		}
	}
	names := make([]string, 0, 5)
	for _, l := range Layouts() {
		names = append(names, string(l))
	}
	return "", fmt.Errorf("replay: unknown layout %q (one of %s)", s, strings.Join(names, ", "))
}

// blockHash is the 16-hex-digit name of block id used by most layouts.
func blockHash(id int64) string { return fmt.Sprintf("%016x", mix64(uint64(id))) }

// RelPath returns the path of block id's file relative to the mount.
func (l Layout) RelPath(id int64) string {
	h := blockHash(id)
	switch l {
	case LayoutSGLang:
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], uint64(id))
		sum := sha256.Sum256(b[:])
		return hex.EncodeToString(sum[:]) + "_" + modelName + "_0_1.bin"
	case LayoutVLLM:
		cfg := sha256.Sum256([]byte(modelName))
		return filepath.Join(modelName+"_"+hex.EncodeToString(cfg[:6])+"_r0", h[0:3], h[3:5]+"_g0", h+".bin")
	case LayoutLMCache:
		return modelName + "@1@0@" + h + "@bfloat16.pt"
	case LayoutNIXL:
		return filepath.Join(h[0:2], h+"_k")
	}
	return h + ".bin"
}
