package capabilities

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// cores is the number of CPUs this process can actually use. runtime.NumCPU
// already honours the affinity mask (cpusets, taskset); a container's CFS
// quota is not visible there, and placing work by the host's core count would
// oversubscribe a quota-limited node, so the quota lowers it further.
func cores(cgroupRoot string) int32 {
	n := runtime.NumCPU()
	if q, ok := cgroupCPULimit(cgroupRoot); ok && q < n {
		n = q
	}
	return int32(max(n, 1))
}

// cgroupCPULimit returns the CPU quota rounded up to whole cores, and false
// when there is none. cgroup v2 (cpu.max) is tried first, then v1.
//
// The limit is read at the cgroup mount root. Inside a container with its
// own cgroup namespace (the default for Docker and Kubernetes on cgroup v2)
// that is the container's own cgroup; on a bare host it is the root, which
// has no limit, and a limit on a sub-cgroup this process runs in is missed.
func cgroupCPULimit(root string) (int, bool) {
	if b, err := os.ReadFile(filepath.Join(root, "cpu.max")); err == nil {
		return parseCPUMax(string(b))
	}
	quota, err1 := readInt(filepath.Join(root, "cpu", "cpu.cfs_quota_us"))
	period, err2 := readInt(filepath.Join(root, "cpu", "cpu.cfs_period_us"))
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return quotaCores(quota, period)
}

// parseCPUMax parses cgroup v2's "QUOTA PERIOD" where QUOTA may be "max".
func parseCPUMax(s string) (int, bool) {
	f := strings.Fields(s)
	if len(f) != 2 || f[0] == "max" {
		return 0, false
	}
	quota, err1 := strconv.ParseInt(f[0], 10, 64)
	period, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return quotaCores(quota, period)
}

// quotaCores rounds up: a 1.5-CPU quota can keep two goroutines busy part of
// the time, and rounding down to 1 would hide the half. v1 writes -1 for no
// quota.
func quotaCores(quota, period int64) (int, bool) {
	if quota <= 0 || period <= 0 {
		return 0, false
	}
	return int(max(1, (quota+period-1)/period)), true
}

// memoryBytes is the memory this process may use: MemTotal, lowered to the
// cgroup memory limit when one is set, because a container sees the host's
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
	if limit, ok := cgroupMemoryLimit(cgroupRoot); ok && limit < total {
		total = limit
	}
	return total, nil
}

// parseMeminfo returns MemTotal in bytes from /proc/meminfo's format
// ("MemTotal:       24684092 kB"; the kernel's "kB" means KiB).
func parseMeminfo(r io.Reader) (uint64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		key, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || key != "MemTotal" {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0, errors.New("MemTotal has no value")
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("MemTotal: %w", err)
		}
		mult := uint64(1)
		if len(f) > 1 {
			switch f[1] {
			case "kB":
				mult = 1024
			default:
				return 0, fmt.Errorf("MemTotal: unknown unit %q", f[1])
			}
		}
		if n > math.MaxUint64/mult {
			return 0, fmt.Errorf("MemTotal: %d %s overflows", n, f[1])
		}
		return n * mult, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("no MemTotal line")
}

// cgroupMemoryLimit returns the cgroup memory limit, and false when there is
// none. v2's memory.max says "max" for none; v1's memory.limit_in_bytes says
// a huge page-aligned number instead, which the caller's min with MemTotal
// absorbs. See cgroupCPULimit for which cgroup is read.
func cgroupMemoryLimit(root string) (uint64, bool) {
	if b, err := os.ReadFile(filepath.Join(root, "memory.max")); err == nil {
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return 0, false
		}
		n, err := strconv.ParseUint(s, 10, 64)
		return n, err == nil && n > 0
	}
	n, err := readInt(filepath.Join(root, "memory", "memory.limit_in_bytes"))
	if err != nil || n <= 0 {
		return 0, false
	}
	return uint64(n), true
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}
