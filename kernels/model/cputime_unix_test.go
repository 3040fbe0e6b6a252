//go:build unix

package model

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user and system) this process has used, so
// benchmarks on a shared machine can report tokens per CPU-second beside
// their wall-clock rate.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
