package replay

import (
	"errors"

	"golang.org/x/sys/unix"

	"github.com/ctxmem/ctxmemd/hitratio"
)

// TierXattr is the extended attribute ctxmemd sets on every file: the tier
// of each block as runs "TIER*N" joined by spaces ("G2", "G3*2 G4").
const TierXattr = "user.ctxmem.tier"

// TierUnknown is the tier counted when the file has no TierXattr (a plain
// directory, or a file system without user xattrs).
const TierUnknown = hitratio.Unknown

// ParseTierRuns returns the tier a read of the whole file is served from
// given its TierXattr value: the slowest tier named ("G2 G3*2" → "G3";
// hitratio.SlowestTier), or TierUnknown for an empty value.
func ParseTierRuns(v string) string { return hitratio.SlowestTier(v) }

// fileTier reads TierXattr of path. It returns TierUnknown when the
// attribute is absent or unsupported, and the error (e.g. ENOENT) for
// anything else.
func fileTier(path string, buf []byte) (string, error) {
	for {
		n, err := unix.Getxattr(path, TierXattr, buf)
		switch {
		case err == nil:
			return ParseTierRuns(string(buf[:n])), nil
		case errors.Is(err, unix.ERANGE):
			sz, err2 := unix.Getxattr(path, TierXattr, nil)
			if err2 != nil {
				return "", err2
			}
			buf = make([]byte, sz+64)
		case errors.Is(err, unix.ENODATA), errors.Is(err, unix.ENOTSUP):
			return TierUnknown, nil
		default:
			return "", err
		}
	}
}
