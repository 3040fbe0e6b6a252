package cgroup

import (
	"math"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
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

func TestRead(t *testing.T) {
	const gib = 1 << 30
	tests := []struct {
		name  string
		files map[string]string // under the fake /sys/fs/cgroup; "self" is /proc/self/cgroup
		want  Limits
	}{
		{"v2 no limit", map[string]string{"self": "0::/a\n", "a/cpu.max": "max 100000\n", "a/memory.max": "max\n"}, Limits{}},
		{"v2 own", map[string]string{"self": "0::/a\n", "a/cpu.max": "150000 100000\n", "a/memory.max": "4294967296\n"}, Limits{2, 4 * gib}},
		{"v2 parent", map[string]string{"self": "0::/a/b\n", "a/cpu.max": "100000 100000\n", "a/b/cpu.max": "max 100000\n", "a/memory.max": "1073741824\n", "a/b/memory.max": "2147483648\n"}, Limits{1, gib}},
		{"v2 root", map[string]string{"self": "0::/\n", "cpu.max": "350000 100000\n"}, Limits{CPUs: 4}},
		{"v2 tiny quota", map[string]string{"self": "0::/a\n", "a/cpu.max": "1000 100000\n"}, Limits{CPUs: 1}},
		{"v2 garbage", map[string]string{"self": "0::/a\n", "a/cpu.max": "lots\n", "a/memory.max": "lots\n"}, Limits{}},
		{"v1", map[string]string{"self": "4:cpu,cpuacct:/x\n3:memory:/x\n", "cpu,cpuacct/x/cpu.cfs_quota_us": "300000\n", "cpu,cpuacct/x/cpu.cfs_period_us": "100000\n", "memory/x/memory.limit_in_bytes": "1073741824\n"}, Limits{3, gib}},
		{"v1 unlimited", map[string]string{"self": "4:cpu:/x\n", "cpu/x/cpu.cfs_quota_us": "-1\n", "cpu/x/cpu.cfs_period_us": "100000\n"}, Limits{}},
		{"v1 parent", map[string]string{"self": "1:cpu:/x/y\n", "cpu/x/cpu.cfs_quota_us": "200000\n", "cpu/x/cpu.cfs_period_us": "100000\n"}, Limits{CPUs: 2}},
		// Hybrid, as on this project's development machines: v1
		// controllers and a v2 line, each hierarchy read.
		{"hybrid", map[string]string{"self": "4:memory:/p/q\n1:cpu:/\n0::/\n", "memory/p/memory.limit_in_bytes": "2147483648\n", "cpu.max": "200000 100000\n"}, Limits{2, 2 * gib}},
		// The mount root is read whatever /proc/self/cgroup names: a
		// container's own cgroup namespace, or a root given by a caller.
		{"root v2 not named", map[string]string{"self": "0::/elsewhere\n", "cpu.max": "100000 100000\n", "memory.max": "1073741824\n"}, Limits{1, gib}},
		{"root v1 not named", map[string]string{"self": "0::/elsewhere\n", "cpu/cpu.cfs_quota_us": "200000\n", "cpu/cpu.cfs_period_us": "100000\n", "memory/memory.limit_in_bytes": "1073741824\n"}, Limits{2, gib}},
		{"v2 before v1", map[string]string{"self": "0::/\n", "memory.max": "2147483648\n", "memory/memory.limit_in_bytes": "1073741824\n", "cpu.max": "max 100000\n", "cpu/cpu.cfs_quota_us": "100000\n", "cpu/cpu.cfs_period_us": "100000\n"}, Limits{Memory: 2 * gib}},
		{"no files", map[string]string{"self": "0::/a\n"}, Limits{}},
		{"malformed self", map[string]string{"self": "garbage\n1:cpu:relative\n", "cpu/relative/cpu.cfs_quota_us": "100000\n", "cpu/relative/cpu.cfs_period_us": "100000\n"}, Limits{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			files := map[string]string{}
			for k, v := range tt.files {
				files[k] = v
			}
			self := files["self"]
			delete(files, "self")
			writeFiles(t, filepath.Join(dir, "fs"), files)
			writeFiles(t, dir, map[string]string{"cgroup": self})
			if got := Read(filepath.Join(dir, "cgroup"), filepath.Join(dir, "fs")); got != tt.want {
				t.Fatalf("Read = %+v, want %+v", got, tt.want)
			}
		})
	}
	t.Run("no /proc/self/cgroup", func(t *testing.T) {
		dir := t.TempDir()
		writeFiles(t, dir, map[string]string{"cpu.max": "100000 100000\n"})
		if got := Read(filepath.Join(dir, "missing"), dir); got != (Limits{CPUs: 1}) {
			t.Fatalf("Read = %+v, want the root's quota alone", got)
		}
		if got := Read(filepath.Join(dir, "missing"), "/nonexistent"); got != (Limits{}) {
			t.Fatalf("Read = %+v with nothing to read", got)
		}
	})
}

func TestCPUs(t *testing.T) {
	if got := cpus(8, Limits{}); got != 8 {
		t.Fatalf("no quota: %d", got)
	}
	if got := cpus(8, Limits{CPUs: 3}); got != 3 {
		t.Fatalf("quota 3 of 8: %d", got)
	}
	if got := cpus(2, Limits{CPUs: 16}); got != 2 {
		t.Fatalf("quota above the affinity mask: %d", got)
	}
	if n := CPUs(); n < 1 || n > runtime.NumCPU() {
		t.Fatalf("CPUs() = %d with NumCPU %d", n, runtime.NumCPU())
	}
}

func TestParseCPUMax(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int
		ok   bool
	}{
		{"max 100000\n", 0, false},
		{"200000 100000\n", 2, true},
		{"150000 100000", 2, true},
		{"50000 100000", 1, true},
		{"", 0, false},
		{"x 100000", 0, false},
		{"100000 0", 0, false},
		{"-1 100000", 0, false},
		{"9223372036854775807 1", math.MaxInt32, true},
		{"9223372036854775807 2", math.MaxInt32, true},
	} {
		if got, ok := ParseCPUMax(tt.in); got != tt.want || ok != tt.ok {
			t.Errorf("ParseCPUMax(%q) = %d, %v; want %d, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}
