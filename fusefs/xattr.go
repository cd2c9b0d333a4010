package fusefs

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"strings"
	"syscall"

	"github.com/ctxmem/ctxmemd/catalog"
)

// Extended attributes of regular files that expose the tiering core.
const (
	// XattrTier (read-only) names where each block lives: runs of
	// "TIER*N" in block order joined by spaces, "*N" omitted when N = 1,
	// e.g. "G2*3 G3 G4*2"; empty for an empty file. Tiers are "G2", "G3",
	// "G3.5", "G4" and "hole" (never written).
	XattrTier = "user.ctxmem.tier"
	// XattrHeat (read-only) is the file's mean block heat, a decimal
	// integer 0–100.
	XattrHeat = "user.ctxmem.heat"
	// XattrPin reads "1" when the file is pinned in G2, else "0"; writing
	// "1" or "0" pins or unpins it (anything else is EINVAL).
	XattrPin = "user.ctxmem.pin"
	// XattrPrestage: writing any value starts bringing every block of the
	// file up to G2; it reads as empty.
	XattrPrestage = "user.ctxmem.prestage"
)

// Other "user." attributes are stored (in memory and in the tree database)
// on files and directories, up to maxXattrValue bytes each and
// maxXattrCount per node (ENOSPC past either). Other namespaces
// ("security.", "trusted.", ...) are ENOTSUP on set and ENODATA on get.
const (
	maxXattrValue = 64 << 10
	maxXattrCount = 64
)

var ctxmemXattrs = []string{XattrTier, XattrHeat, XattrPin, XattrPrestage}

func isCtxmem(name string) bool { return strings.HasPrefix(name, "user.ctxmem.") }

// formatTiers run-length encodes per-block tier names.
func formatTiers(tiers []string) string {
	var b strings.Builder
	for i := 0; i < len(tiers); {
		j := i + 1
		for j < len(tiers) && tiers[j] == tiers[i] {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(tiers[i])
		if j-i > 1 {
			fmt.Fprintf(&b, "*%d", j-i)
		}
		i = j
	}
	return b.String()
}

// ctxmemValue computes a user.ctxmem.* attribute of a file.
func (f *fsys) ctxmemValue(n *node, name string) ([]byte, syscall.Errno) {
	switch name {
	case XattrTier:
		tiers, err := f.be.BlockTiers(n.obj)
		if err != nil {
			return nil, errno(err)
		}
		return []byte(formatTiers(tiers)), 0
	case XattrHeat:
		h, err := f.be.Heat(n.obj)
		if err != nil {
			return nil, errno(err)
		}
		h = math.Max(0, math.Min(100, math.Round(h)))
		if math.IsNaN(h) {
			h = 0
		}
		return []byte(strconv.Itoa(int(h))), 0
	case XattrPin:
		info, err := f.be.Stat(n.obj)
		if err != nil {
			return nil, errno(err)
		}
		if info.Pinned {
			return []byte("1"), 0
		}
		return []byte("0"), 0
	case XattrPrestage:
		return []byte{}, 0
	}
	return nil, syscall.ENODATA
}

func (f *fsys) getxattr(n *node, name string, dest []byte) (uint32, syscall.Errno) {
	var v []byte
	switch {
	case isCtxmem(name) && n.kind == kindFile:
		var e syscall.Errno
		if v, e = f.ctxmemValue(n, name); e != 0 {
			return 0, e
		}
	case strings.HasPrefix(name, "user."):
		n.mu.Lock()
		val, ok := n.xattrs[name]
		v = val
		n.mu.Unlock()
		if !ok {
			return 0, syscall.ENODATA
		}
	default:
		return 0, syscall.ENODATA
	}
	if len(dest) < len(v) {
		return uint32(len(v)), syscall.ERANGE
	}
	return uint32(copy(dest, v)), 0
}

func (f *fsys) setxattr(n *node, name string, data []byte, flags uint32) syscall.Errno {
	if n.ino == rootIno {
		return syscall.EPERM
	}
	if isCtxmem(name) && n.kind == kindFile {
		switch name {
		case XattrPin:
			var pin bool
			switch string(bytes.TrimSpace(data)) {
			case "1":
				pin = true
			case "0":
			default:
				return syscall.EINVAL
			}
			return errno(f.be.SetPinned(n.obj, pin))
		case XattrPrestage:
			return errno(f.be.Prestage(f.ctx, n.obj))
		}
		return syscall.EPERM
	}
	if isCtxmem(name) {
		return syscall.EPERM
	}
	if !strings.HasPrefix(name, "user.") {
		return syscall.ENOTSUP
	}
	if len(data) > maxXattrValue {
		return syscall.E2BIG
	}
	n.mu.Lock()
	_, exists := n.xattrs[name]
	switch {
	case flags&xattrCreate != 0 && exists:
		n.mu.Unlock()
		return syscall.EEXIST
	case flags&xattrReplace != 0 && !exists:
		n.mu.Unlock()
		return syscall.ENODATA
	case !exists && len(n.xattrs) >= maxXattrCount:
		n.mu.Unlock()
		return syscall.ENOSPC
	}
	if n.xattrs == nil {
		n.xattrs = map[string][]byte{}
	}
	v := bytes.Clone(data)
	if v == nil {
		v = []byte{}
	}
	n.xattrs[name] = v
	n.ctime = now()
	n.mu.Unlock()
	return logged(f.j.Apply(catalog.PutXattr(n.ino, name, v), catalog.PutNode(n)))
}

// setxattr(2) flags.
const (
	xattrCreate  = 1
	xattrReplace = 2
)

func (f *fsys) removexattr(n *node, name string) syscall.Errno {
	if isCtxmem(name) && n.kind == kindFile {
		return syscall.EPERM
	}
	if !strings.HasPrefix(name, "user.") {
		return syscall.ENODATA
	}
	n.mu.Lock()
	if _, ok := n.xattrs[name]; !ok {
		n.mu.Unlock()
		return syscall.ENODATA
	}
	delete(n.xattrs, name)
	n.ctime = now()
	n.mu.Unlock()
	return logged(f.j.Apply(catalog.DelXattr(n.ino, name), catalog.PutNode(n)))
}

func (f *fsys) listxattr(n *node, dest []byte) (uint32, syscall.Errno) {
	var b bytes.Buffer
	if n.kind == kindFile {
		for _, a := range ctxmemXattrs {
			b.WriteString(a)
			b.WriteByte(0)
		}
	}
	n.mu.Lock()
	for k := range n.xattrs {
		b.WriteString(k)
		b.WriteByte(0)
	}
	n.mu.Unlock()
	if len(dest) < b.Len() {
		return uint32(b.Len()), syscall.ERANGE
	}
	return uint32(copy(dest, b.Bytes())), 0
}
