package heat

import (
	"syscall"
	"time"
)

// rusageThread is Linux's RUSAGE_THREAD (not exported by package syscall).
const rusageThread = 1

// threadCPU returns the CPU time (user+system) of the calling OS thread.
func threadCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
