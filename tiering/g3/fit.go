package g3

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// fitReserve is the fraction of a filesystem's free space G3 leaves to
// others (metadata, logs, the G4 directory when it shares the disk).
const fitReserve = 0.05

// FitCapacity returns the G3 capacity in bytes that fits the filesystem
// holding dir: want when the filesystem can hold it (its free space plus
// the segment files G3 already keeps there), else that room less
// fitReserve, rounded down to whole segments (clamped reports true). A
// capacity is never clamped below what the directory's segments already
// use. dir is created if missing. Errors: the filesystem cannot be
// queried (statfs), or the room left holds fewer than three segments of
// segBytes (a G3 that can only hit ENOSPC is refused rather than run).
func FitCapacity(dir string, want, segBytes int64) (capacity int64, clamped bool, err error) {
	if want <= 0 {
		return want, false, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, false, fmt.Errorf("g3: %w", err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, false, fmt.Errorf("g3: statfs %s: %w", dir, err)
	}
	own := int64(0)
	names, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	for _, n := range names {
		if fi, err := os.Stat(n); err == nil {
			own += fi.Size()
		}
	}
	room := int64(st.Bavail)*int64(st.Bsize) + own
	if want <= room {
		return want, false, nil
	}
	capacity = int64(float64(room) * (1 - fitReserve))
	if segBytes > 0 {
		capacity -= capacity % segBytes
	}
	capacity = max(capacity, own)
	if segBytes > 0 && capacity < 3*segBytes {
		return 0, false, fmt.Errorf("g3: %s has room for %d bytes (free space plus existing segments), less than 3 segments of %d bytes; g3_size %d cannot be met",
			dir, room, segBytes, want)
	}
	return capacity, true, nil
}
