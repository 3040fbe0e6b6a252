// Package cgroup reads the CPU and memory limits that the cgroups a process
// is in put on it: one reader for the CPU backend's thread count
// (kernels/cpu/blas.Threads) and for what a node advertises
// (runtime/capabilities). It has no dependencies beyond the standard
// library, so both may import it.
//
// Every cgroup from the process's own (as /proc/self/cgroup names it) up to
// the mount root is read, since a limit on any of them caps the process,
// and so are the mount root's own files for each hierarchy: inside a
// container with its own cgroup namespace the root is the container's
// cgroup, and a test or a caller may point root at a directory of its own.
// cgroup v2 (cpu.max, memory.max) and v1 (cpu.cfs_quota_us and
// cpu.cfs_period_us under the cpu hierarchy; memory.limit_in_bytes under
// memory) are both read, as hybrid hosts mount both; a controller is in one
// hierarchy at a time, so where a v2 file for it is there at all (even
// saying "max"), its v1 files are not counted.
package cgroup

import (
	"bufio"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
)

// Limits are what a process's cgroups allow it; zero means no limit.
type Limits struct {
	CPUs   int    // the lowest CPU quota, in whole CPUs rounded up
	Memory uint64 // the lowest memory limit, in bytes
}

// Read reads the limits of the process whose /proc/PID/cgroup is at
// procCgroup, under the cgroup file system mounted at root. A missing or
// unreadable file is no limit.
func Read(procCgroup, root string) Limits {
	// A controller is in one hierarchy at a time: where a v2 file for it
	// is there at all (even "max"), v1's are not read.
	var v1, v2 Limits
	var v2CPU, v2Mem bool
	lower := func(l *Limits, cpus int, mem uint64) {
		if cpus > 0 && (l.CPUs == 0 || cpus < l.CPUs) {
			l.CPUs = cpus
		}
		if mem > 0 && (l.Memory == 0 || mem < l.Memory) {
			l.Memory = mem
		}
	}
	cpuV1 := func(dir string) {
		if n, ok := quota(dir); ok {
			lower(&v1, n, 0)
		}
	}
	memV1 := func(dir string) {
		if n, ok := memoryLimit(dir, true); ok {
			lower(&v1, 0, n)
		}
	}
	memV2 := func(dir string) {
		if _, err := os.Stat(filepath.Join(dir, "memory.max")); err == nil {
			v2Mem = true
			if n, ok := memoryLimit(dir, false); ok {
				lower(&v2, 0, n)
			}
		}
	}
	cpuV2 := func(dir string) {
		if b, err := os.ReadFile(filepath.Join(dir, "cpu.max")); err == nil {
			v2CPU = true
			if n, ok := ParseCPUMax(string(b)); ok {
				lower(&v2, n, 0)
			}
		}
	}
	l := func() Limits {
		r := v1
		if v2CPU {
			r.CPUs = v2.CPUs
		}
		if v2Mem {
			r.Memory = v2.Memory
		}
		return r
	}
	// The mount roots, whatever /proc/self/cgroup says.
	cpuV2(root)
	memV2(root)
	for _, d := range v1Dirs(root, "cpu") {
		cpuV1(d)
	}
	for _, d := range v1Dirs(root, "memory") {
		memV1(d)
	}
	f, err := os.Open(procCgroup)
	if err != nil {
		return l()
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// hierarchy-ID:controllers:path; v2 is "0::/path".
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 || !strings.HasPrefix(parts[2], "/") {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			walk(root, parts[2], func(dir string) { cpuV2(dir); memV2(dir) })
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			for _, d := range v1Dirs(root, c) {
				switch c {
				case "cpu":
					walk(d, parts[2], cpuV1)
				case "memory":
					walk(d, parts[2], memV1)
				}
			}
		}
	}
	return l()
}

// walk calls fn on mount/path and each directory above it up to mount.
func walk(mount, path string, fn func(dir string)) {
	mount = filepath.Clean(mount)
	for p := filepath.Join(mount, path); len(p) > len(mount); p = filepath.Dir(p) {
		fn(p)
	}
}

// v1Dirs are the mounts of a v1 controller under root: its own name, and
// the combined cpu,cpuacct where cpu is mounted with cpuacct.
func v1Dirs(root, controller string) []string {
	var dirs []string
	names := []string{controller}
	if controller == "cpu" {
		names = append(names, "cpu,cpuacct")
	}
	for _, n := range names {
		d := filepath.Join(root, n)
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			dirs = append(dirs, d)
		}
	}
	if len(dirs) == 2 { // cpu a link to cpu,cpuacct: the same files
		if a, err := filepath.EvalSymlinks(dirs[0]); err == nil {
			if b, err := filepath.EvalSymlinks(dirs[1]); err == nil && a == b {
				dirs = dirs[:1]
			}
		}
	}
	return dirs
}

// quota reads one v1 cgroup directory's CPU quota in whole CPUs from
// cpu.cfs_quota_us and cpu.cfs_period_us (-1 for none).
func quota(dir string) (int, bool) {
	qb, err1 := os.ReadFile(filepath.Join(dir, "cpu.cfs_quota_us"))
	pb, err2 := os.ReadFile(filepath.Join(dir, "cpu.cfs_period_us"))
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return quotaCPUs(strings.TrimSpace(string(qb)), strings.TrimSpace(string(pb)))
}

// ParseCPUMax reads cgroup v2's cpu.max, "QUOTA PERIOD" with QUOTA "max"
// for none, as whole CPUs, false for none or a malformed file.
func ParseCPUMax(s string) (int, bool) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return 0, false
	}
	return quotaCPUs(f[0], f[1])
}

// quotaCPUs rounds a quota up to whole CPUs: a 1.5-CPU quota keeps two
// threads busy part of the time, and rounding down to 1 would hide the
// half. A quota that is not a positive number ("max", -1) is none.
func quotaCPUs(quota, period string) (int, bool) {
	q, err1 := strconv.ParseInt(quota, 10, 64)
	p, err2 := strconv.ParseInt(period, 10, 64)
	if err1 != nil || err2 != nil || q <= 0 || p <= 0 {
		return 0, false
	}
	n := q / p
	if q%p != 0 {
		n++
	}
	return int(max(1, min(n, math.MaxInt32))), true
}

// memoryLimit reads one cgroup directory's memory limit: v2's memory.max
// ("max" for none) or v1's memory.limit_in_bytes (a huge page-aligned
// number for none, which the caller's minimum with the machine's memory
// absorbs).
func memoryLimit(dir string, v1 bool) (uint64, bool) {
	name := "memory.max"
	if v1 {
		name = "memory.limit_in_bytes"
	}
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64) // "max" fails
	return n, err == nil && n > 0
}

// Self is Read for this process, read once.
var Self = sync.OnceValue(func() Limits { return Read("/proc/self/cgroup", "/sys/fs/cgroup") })

// CPUs is how many CPUs this process may use: the CPUs in its affinity mask
// (sched_getaffinity, which runtime.NumCPU reads), no more than its
// cgroups' CPU quota allows.
func CPUs() int { return cpus(runtime.NumCPU(), Self()) }

func cpus(affinity int, l Limits) int {
	if l.CPUs > 0 {
		affinity = min(affinity, l.CPUs)
	}
	return max(affinity, 1)
}
