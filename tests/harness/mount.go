package harness

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// FuseMagic is statfs f_type of a FUSE mount (FUSE_SUPER_MAGIC).
const FuseMagic = 0x65735546

// IsMounted reports whether dir is a mount point in this process's mount
// namespace (a line of /proc/self/mountinfo names it), live or stale.
func IsMounted(dir string) (bool, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && unescapeMountinfo(fields[4]) == dir {
			return true, nil
		}
	}
	return false, sc.Err()
}

// unescapeMountinfo decodes the octal escapes (\040 for space, …) of a
// mountinfo path field.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// IsLiveFuse reports whether statfs(dir) succeeds and says FUSE.
func IsLiveFuse(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Type == FuseMagic
}

// IsStale reports whether dir is a FUSE mount whose daemon is gone: statfs
// fails with ENOTCONN ("transport endpoint is not connected").
func IsStale(dir string) bool {
	var st unix.Statfs_t
	return errors.Is(unix.Statfs(dir, &st), unix.ENOTCONN)
}

// ForceUnmount detaches whatever is mounted on dir: umount2(MNT_DETACH),
// then fusermount3 -uz, then umount -l. It returns nil once dir is no
// longer a mount point.
func ForceUnmount(dir string) error {
	for _, try := range []func() error{
		func() error { return unix.Unmount(dir, unix.MNT_DETACH) },
		func() error { return exec.Command("fusermount3", "-uz", dir).Run() },
		func() error { return exec.Command("umount", "-l", dir).Run() },
	} {
		if m, err := IsMounted(dir); err == nil && !m {
			return nil
		}
		_ = try()
	}
	if m, err := IsMounted(dir); err != nil || m {
		return errors.Join(errors.New("harness: "+dir+" is still mounted"), err)
	}
	return nil
}
