//go:build !linux

package heat

import "time"

// threadCPU is unavailable off Linux; benchmarks then report no cpu-ns/op.
func threadCPU() time.Duration { return 0 }
