//go:build unix

package learner

import (
	"syscall"
	"time"
)

// CPUTime is the process's user plus system CPU time so far: on a shared
// machine it says what a step cost when the wall clock includes waiting
// for cores.
func CPUTime() time.Duration {
	var r syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &r) != nil {
		return 0
	}
	return time.Duration(r.Utime.Nano() + r.Stime.Nano())
}
