package g3

import (
	"context"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/ctxmem/ctxmemd/internal/directio"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// Probe implements tier.Prober: it reads the header page of the active
// segment from the device (with O_DIRECT where the store uses it, so the
// page cache cannot answer for a dead disk). A store with no active
// segment yet checks that its directory can be read. The read runs on a
// goroutine of its own (owner: this call; a read stuck in the kernel ends
// when the device answers or fails), so Probe returns when ctx ends.
// Errors: tier.ErrClosed, the device's error, ctx's error.
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
	done := make(chan error, 1)
	go func() {
		fd, err := unix.Open(path, flags, 0)
		if err != nil {
			done <- err
			return
		}
		defer unix.Close(fd)
		if flags&unix.O_DIRECTORY == 0 {
			_, err = unix.Pread(fd, directio.AlignedAlloc(segHeaderLen), 0)
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("G3 probe %s: %w", path, err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("G3 probe %s: %w", path, ctx.Err())
	}
}
