package capabilities

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/frognano/frognano/kernels/cgroup"
)

// cores is the number of CPUs this process can actually use. runtime.NumCPU
// already honours the affinity mask (cpusets, taskset); a container's CFS
// quota is not visible there, and placing work by the host's core count would
// oversubscribe a quota-limited node, so the quota lowers it further. The
// cgroups are read by package cgroup, the same reader that sizes the CPU
// backend's threads (kernels/cpu/blas.Threads), so what a node advertises
// and what its kernels use agree.
func cores(cgroupRoot string) int32 {
	n := runtime.NumCPU()
	if q := cgroup.Read("/proc/self/cgroup", cgroupRoot).CPUs; q > 0 && q < n {
		n = q
	}
	return int32(max(n, 1))
}

// parseCPUMax parses cgroup v2's "QUOTA PERIOD" where QUOTA may be "max".
var parseCPUMax = cgroup.ParseCPUMax

// memoryBytes is the memory this process may use: MemTotal, lowered to the
// lowest memory limit of its cgroups (package cgroup: every cgroup from the
// process's own up to the mount root at cgroupRoot, v2's memory.max and
// v1's memory.limit_in_bytes), because a container sees the host's
// /proc/meminfo and would otherwise be offered work that gets it OOM-killed.
func memoryBytes(meminfo, cgroupRoot string) (uint64, error) {
	f, err := os.Open(meminfo)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	total, err := parseMeminfo(f)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", meminfo, err)
	}
	if limit := cgroup.Read("/proc/self/cgroup", cgroupRoot).Memory; limit > 0 && limit < total {
		total = limit
	}
	return total, nil
}

// parseMeminfo returns MemTotal in bytes from /proc/meminfo's format
// ("MemTotal:       24684092 kB"; the kernel's "kB" means KiB).
func parseMeminfo(r io.Reader) (uint64, error) { return meminfoValue(r, "MemTotal") }

// meminfoValue returns the line key of /proc/meminfo in bytes.
func meminfoValue(r io.Reader, key string) (uint64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		k, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != key {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0, fmt.Errorf("%s has no value", key)
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", key, err)
		}
		mult := uint64(1)
		if len(f) > 1 {
			switch f[1] {
			case "kB":
				mult = 1024
			default:
				return 0, fmt.Errorf("%s: unknown unit %q", key, f[1])
			}
		}
		if n > math.MaxUint64/mult {
			return 0, fmt.Errorf("%s: %d %s overflows", key, n, f[1])
		}
		return n * mult, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no %s line", key)
}
