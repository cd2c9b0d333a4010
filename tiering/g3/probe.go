package g3

import (
	"context"

	"golang.org/x/sys/unix"

	"github.com/ctxmem/ctxmemd/internal/directio"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// Probe implements tier.Prober: it reads the header page of the active
// segment from the device (with O_DIRECT where the store uses it, so the
// page cache cannot answer for a dead disk). A store with no active
// segment yet checks that its directory can be read. The read runs on a
// goroutine of its own (tier.ProbeGate; a read stuck in the kernel ends
// when the device answers or fails), so Probe returns when ctx ends, and
// while it is stuck the next Probe fails at once rather than sending
// another. Errors: tier.ErrClosed, tier.ErrUnavailable (an earlier probe
// has not returned), the device's error, ctx's error.
func (s *Store) Probe(ctx context.Context) error {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return tier.ErrClosed
	}
	path := s.opts.Dir
	flags := unix.O_RDONLY | unix.O_CLOEXEC | unix.O_DIRECTORY
	if s.active != nil {
		path, flags = s.active.path, unix.O_RDONLY|unix.O_CLOEXEC
		if s.direct {
			flags |= unix.O_DIRECT
		}
	}
	s.mu.RUnlock()
	return s.probeGate.Run(ctx, "G3 probe "+path, func() error {
		fd, err := unix.Open(path, flags, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if flags&unix.O_DIRECTORY == 0 {
			_, err = unix.Pread(fd, directio.AlignedAlloc(segHeaderLen), 0)
		}
		return err
	})
}
