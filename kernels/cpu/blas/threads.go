package blas

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

// Threads is how many cores the products, and the CPU backend's other
// kernels, split their work across: the CPUs this process may run on
// (sched_getaffinity, which runtime.NumCPU reads), no more than GOMAXPROCS,
// and no more than the cgroup's CPU quota (cpu.max, rounded up) allows, so
// that goroutines do not outnumber the cores a container is given. The
// libraries themselves run single-threaded (see load), so this is the
// whole of the process's compute threads.
func Threads() int {
	return max(1, min(runtime.NumCPU(), runtime.GOMAXPROCS(0), cgroupCPUs()))
}

var cgroupCPUs = sync.OnceValue(func() int { return cgroupLimit("/proc/self/cgroup", "/sys/fs/cgroup") })

// cgroupLimit is the CPU quota, in whole CPUs rounded up, of the cgroup the
// process is in (given as in /proc/self/cgroup) and of every cgroup above
// it, under the cgroup file system at root; math.MaxInt where none is set.
// It reads cgroup v2's cpu.max ("quota period" or "max period") and v1's
// cpu.cfs_quota_us and cpu.cfs_period_us.
func cgroupLimit(procCgroup, root string) int {
	limit := math.MaxInt
	f, err := os.Open(procCgroup)
	if err != nil {
		return limit
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// hierarchy-ID:controllers:path; v2 is "0::/path".
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		var dir string
		switch {
		case parts[0] == "0" && parts[1] == "":
			dir = root
		case hasController(parts[1], "cpu"):
			dir = filepath.Join(root, "cpu")
			if _, err := os.Stat(dir); err != nil {
				dir = filepath.Join(root, "cpu,cpuacct")
			}
		default:
			continue
		}
		// From the process's cgroup up to the root: any of them may cap it.
		for p := filepath.Join(dir, parts[2]); ; p = filepath.Dir(p) {
			if n, ok := quota(p); ok {
				limit = min(limit, n)
			}
			if len(p) <= len(dir) {
				break
			}
		}
	}
	return limit
}

func hasController(list, name string) bool {
	for _, c := range strings.Split(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// quota reads one cgroup directory's CPU quota in whole CPUs, rounded up.
func quota(dir string) (int, bool) {
	var q, p string
	if b, err := os.ReadFile(filepath.Join(dir, "cpu.max")); err == nil {
		f := strings.Fields(string(b))
		if len(f) != 2 {
			return 0, false
		}
		q, p = f[0], f[1]
	} else {
		qb, err1 := os.ReadFile(filepath.Join(dir, "cpu.cfs_quota_us"))
		pb, err2 := os.ReadFile(filepath.Join(dir, "cpu.cfs_period_us"))
		if err1 != nil || err2 != nil {
			return 0, false
		}
		q, p = strings.TrimSpace(string(qb)), strings.TrimSpace(string(pb))
	}
	qn, err1 := strconv.ParseInt(q, 10, 64) // "max" or -1: no quota
	pn, err2 := strconv.ParseInt(p, 10, 64)
	if err1 != nil || err2 != nil || qn <= 0 || pn <= 0 {
		return 0, false
	}
	return int(max(1, (qn+pn-1)/pn)), true
}
