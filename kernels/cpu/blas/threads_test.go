package blas

import (
	"math"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

func writeFiles(t *testing.T, root string, files map[string]string) {
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCgroupLimit(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string // under the fake /sys/fs/cgroup; "self" is /proc/self/cgroup
		want  int
	}{
		{"v2 no limit", map[string]string{"self": "0::/a\n", "a/cpu.max": "max 100000\n"}, math.MaxInt},
		{"v2 own", map[string]string{"self": "0::/a\n", "a/cpu.max": "150000 100000\n"}, 2},
		{"v2 parent", map[string]string{"self": "0::/a/b\n", "a/cpu.max": "100000 100000\n", "a/b/cpu.max": "max 100000\n"}, 1},
		{"v2 root", map[string]string{"self": "0::/\n", "cpu.max": "350000 100000\n"}, 4},
		{"v2 tiny quota", map[string]string{"self": "0::/a\n", "a/cpu.max": "1000 100000\n"}, 1},
		{"v1", map[string]string{"self": "4:cpu,cpuacct:/x\n3:memory:/x\n", "cpu,cpuacct/x/cpu.cfs_quota_us": "300000\n", "cpu,cpuacct/x/cpu.cfs_period_us": "100000\n"}, 3},
		{"v1 unlimited", map[string]string{"self": "4:cpu:/x\n", "cpu/x/cpu.cfs_quota_us": "-1\n", "cpu/x/cpu.cfs_period_us": "100000\n"}, math.MaxInt},
		{"no files", map[string]string{"self": "0::/a\n"}, math.MaxInt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			self := tt.files["self"]
			delete(tt.files, "self")
			writeFiles(t, filepath.Join(dir, "fs"), tt.files)
			writeFiles(t, dir, map[string]string{"cgroup": self})
			if got := cgroupLimit(filepath.Join(dir, "cgroup"), filepath.Join(dir, "fs")); got != tt.want {
				t.Fatalf("cgroupLimit = %d, want %d", got, tt.want)
			}
		})
	}
	if got := cgroupLimit(filepath.Join(t.TempDir(), "missing"), "/nonexistent"); got != math.MaxInt {
		t.Fatalf("without /proc/self/cgroup: %d", got)
	}
}

func TestThreads(t *testing.T) {
	n := Threads()
	if n < 1 || n > runtime.NumCPU() || n > runtime.GOMAXPROCS(0) {
		t.Fatalf("Threads() = %d with NumCPU %d, GOMAXPROCS %d", n, runtime.NumCPU(), runtime.GOMAXPROCS(0))
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	if got := Threads(); got != 1 {
		t.Fatalf("Threads() = %d with GOMAXPROCS 1", got)
	}
}
