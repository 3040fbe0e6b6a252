package capabilities

import (
	"math"
	"os"
	"runtime/debug"
)

// DefaultMemoryFraction is the share of the memory a process may use that
// SetMemoryLimit gives the Go runtime as its soft limit.
const DefaultMemoryFraction = 0.7

// SetMemoryLimit gives the Go runtime a soft memory limit
// (runtime/debug.SetMemoryLimit) of frac of the memory this process may
// use (MemTotal, lowered to its cgroups' limit), unless the environment
// sets GOMEMLIMIT, which wins. It returns the limit set, 0 when none was.
//
// Without a limit the garbage collector lets the heap grow to twice what
// is live before it collects: a training run of Qwen2.5-Coder-0.5B, 9 GB
// live (two copies of the weights, the Learner's activations), grew to
// 16.6 GB of resident memory within a few steps and was OOM-killed on a
// 24 GB machine; with an 11 GiB limit it stayed at 11 GB. The limit is
// soft: a process whose live heap exceeds it still runs, collecting more
// often (the runtime bounds that work to half the CPU).
func SetMemoryLimit(frac float64) int64 {
	if _, ok := os.LookupEnv("GOMEMLIMIT"); ok || !(frac > 0 && frac <= 1) {
		return 0
	}
	mem, err := memoryBytes("/proc/meminfo", "/sys/fs/cgroup")
	if err != nil || mem == 0 {
		return 0
	}
	limit := int64(math.Min(float64(mem)*frac, math.MaxInt64))
	debug.SetMemoryLimit(limit)
	return limit
}
