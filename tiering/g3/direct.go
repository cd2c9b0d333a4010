package g3

import (
	"github.com/ctxmem/ctxmemd/internal/directio"

	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// probeDirect reports whether dir's filesystem takes O_DIRECT I/O: it
// creates a scratch file with O_DIRECT, writes and reads back one aligned
// page. Filesystems that refuse O_DIRECT fail the open or the I/O with
// EINVAL; those are served with buffered I/O, as is a filesystem too full
// to take the probe page. Any other error is returned.
func probeDirect(dir string) (bool, error) {
	name := filepath.Join(dir, ".direct-probe")
	defer os.Remove(name)
	fd, err := unix.Open(name, unix.O_RDWR|unix.O_CREAT|unix.O_TRUNC|unix.O_DIRECT|unix.O_CLOEXEC, 0o600)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSPC) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("g3: probe O_DIRECT in %s: %w", dir, err)
	}
	defer unix.Close(fd)
	buf := directio.AlignedAlloc(pageSize)
	for i := range buf {
		buf[i] = byte(i)
	}
	if err := directio.PwriteFull(fd, buf, 0); err != nil {
		// EINVAL: O_DIRECT refused. ENOSPC/EDQUOT: cannot tell on a full
		// filesystem; buffered I/O is always correct.
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
			return false, nil
		}
		return false, fmt.Errorf("g3: probe O_DIRECT write in %s: %w", dir, err)
	}
	clear(buf)
	if err := directio.PreadFull(fd, buf, 0); err != nil {
		if errors.Is(err, unix.EINVAL) {
			return false, nil
		}
		return false, fmt.Errorf("g3: probe O_DIRECT read in %s: %w", dir, err)
	}
	for i := range buf {
		if buf[i] != byte(i) {
			return false, nil
		}
	}
	return true, nil
}
