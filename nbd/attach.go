package nbd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/pojntfx/go-nbd/pkg/client"
	"golang.org/x/sys/unix"
)

// nbdMajor is the block-device major number of /dev/nbdN (Linux
// Documentation/admin-guide/devices.txt).
const nbdMajor = 43

// ErrNoKernelNBD means the kernel cannot attach NBD devices here: the nbd
// module is not loaded (or not built) or the device node is missing.
var ErrNoKernelNBD = errors.New("kernel NBD unavailable (load it with `modprobe nbd`)")

// attachBlockSize is the kernel block size Attach asks for (bytes); go-nbd's
// client accepts 512–4096.
const attachBlockSize = 4096

// Attach connects the kernel device (e.g. /dev/nbd0) to export on the
// server at socketOrAddr (unix:///PATH, tcp://HOST:PORT, a socket path, or
// HOST:PORT), using go-nbd's client for the handshake and the NBD ioctls.
// It blocks while the device is attached and returns when the device is
// disconnected (nil) or ctx ends (it then detaches the device and returns
// ctx's error).
//
// Errors: ErrNoKernelNBD (wrapped, with the reason) when /sys/module/nbd
// or the device node is missing; an error when device is not an NBD block
// device; dial, handshake and ioctl failures.
func Attach(ctx context.Context, socketOrAddr, export, device string) error {
	if err := checkNBDDevice(device, nbdModule); err != nil {
		return err
	}
	dev, err := os.OpenFile(device, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("nbd attach: open %s: %w", device, err)
	}
	defer dev.Close()
	nc, err := dialURL(socketOrAddr)
	if err != nil {
		return fmt.Errorf("nbd attach: dial %s: %w", socketOrAddr, err)
	}
	defer nc.Close()

	done := make(chan error, 1)
	go func() {
		done <- client.Connect(nc, dev, &client.Options{ExportName: export, BlockSize: attachBlockSize})
	}()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("nbd attach %s to %q: %w", device, export, err)
		}
		return nil
	case <-ctx.Done():
		if err := client.Disconnect(dev); err != nil {
			return fmt.Errorf("nbd attach: disconnect %s: %w (after %v)", device, err, ctx.Err())
		}
		<-done
		return ctx.Err()
	}
}

// nbdModule is where the kernel shows the nbd module when it is loaded.
const nbdModule = "/sys/module/nbd"

// checkNBDDevice reports whether device is an NBD block device the kernel
// can drive, module being the nbd module's sysfs directory (nbdModule).
func checkNBDDevice(device, module string) error {
	if _, err := os.Stat(module); err != nil {
		return fmt.Errorf("nbd attach %s: %w: %s is missing", device, ErrNoKernelNBD, module)
	}
	return checkBlockDevice(device, nbdMajor)
}

// checkBlockDevice reports whether path is a block device of the given
// major number.
func checkBlockDevice(path string, major uint32) error {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("nbd attach: %s: %w: no such device", path, ErrNoKernelNBD)
		}
		return fmt.Errorf("nbd attach: %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return fmt.Errorf("nbd attach: %s is not a block device", path)
	}
	if m := unix.Major(st.Rdev); m != major {
		return fmt.Errorf("nbd attach: %s is block device %d:%d, not an NBD device (major %d)", path, m, unix.Minor(st.Rdev), major)
	}
	return nil
}
