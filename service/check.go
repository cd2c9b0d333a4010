package service

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// ErrCheckBusy is returned by a StatfsCheck while the previous statfs(2) is
// still blocked in the kernel (a wedged FUSE server).
var ErrCheckBusy = errors.New("previous check still blocked")

// StatfsCheck returns a watchdog check (for Notifier.RunWatchdog) that
// calls statfs(2) on path, typically the FUSE mount point: the kernel
// forwards it to the FUSE server, so it succeeds only while the server's
// request loop answers. The call runs in a goroutine so a hung statfs
// cannot hold the caller past its context: the check then returns the
// context's error, and later calls return ErrCheckBusy until the hung call
// returns (at most one is ever outstanding; it ends when the mount is
// answered or torn down). Other errors are statfs's, wrapped with path.
func StatfsCheck(path string) func(context.Context) error {
	return bounded(func() error {
		var st unix.Statfs_t
		if err := unix.Statfs(path, &st); err != nil {
			return fmt.Errorf("statfs %s: %w", path, err)
		}
		return nil
	})
}

// bounded runs fn with at most one call in flight, returning early when
// ctx ends; see StatfsCheck.
func bounded(fn func() error) func(context.Context) error {
	slot := make(chan struct{}, 1)
	return func(ctx context.Context) error {
		select {
		case slot <- struct{}{}:
		default:
			return ErrCheckBusy
		}
		done := make(chan error, 1)
		go func() {
			err := fn()
			<-slot // free the slot before answering, so the next call may start
			done <- err
		}()
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			return fmt.Errorf("check did not return: %w", ctx.Err())
		}
	}
}
