package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestNewWithoutContainerd needs no daemon: the error must say what is
// wrong and how to fix it.
func TestNewWithoutContainerd(t *testing.T) {
	_, err := New(context.Background(), Config{Address: filepath.Join(t.TempDir(), "containerd.sock")})
	if !errors.Is(err, ErrContainerdNotRunning) || !strings.Contains(err.Error(), "start it with") {
		t.Fatalf("err = %v", err)
	}
}

// cgroupValue reads a cgroup v1 file of the sandbox on the host.
func cgroupValue(t *testing.T, sb *Sandbox, controller, file string) (int64, bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", controller, sb.rt.cfg.Namespace, sb.ID(), file))
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return v, err == nil
}

// TestLimitsApplied checks on the host that the cgroup limits are the
// options', and that the CPU quota holds two busy loops to half a core.
func TestLimitsApplied(t *testing.T) {
	opts := Options{MemoryBytes: 300 << 20, Pids: 100, CPUs: 0.5}
	sb := newSandbox(t, opts)
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err != nil {
		t.Skip("cgroup v1 hierarchy not found; the limits are checked by the attack tests instead")
	}
	checks := []struct {
		controller, file string
		want             int64
	}{
		{"memory", "memory.limit_in_bytes", 300 << 20},
		{"pids", "pids.max", 100},
		{"cpu", "cpu.cfs_quota_us", 50000},
		{"cpu", "cpu.cfs_period_us", 100000},
	}
	if swapAccounting() {
		checks = append(checks, struct {
			controller, file string
			want             int64
		}{"memory", "memory.memsw.limit_in_bytes", 300 << 20})
	}
	for _, c := range checks {
		if got, ok := cgroupValue(t, sb, c.controller, c.file); !ok || got != c.want {
			t.Errorf("%s/%s = %d (%v), want %d", c.controller, c.file, got, ok, c.want)
		}
	}

	before, ok := cgroupValue(t, sb, "cpuacct", "cpuacct.usage")
	if !ok {
		t.Skip("no cpuacct.usage")
	}
	start := time.Now()
	run(t, sb, "for i in 1 2; do timeout 2 sh -c 'while :; do :; done' & done; wait")
	wall := time.Since(start)
	after, _ := cgroupValue(t, sb, "cpuacct", "cpuacct.usage")
	used := time.Duration(after - before)
	t.Logf("two busy loops for %v used %v of CPU (quota 0.5 core)", wall.Round(time.Millisecond), used.Round(time.Millisecond))
	if limit := time.Duration(float64(wall) * 0.5 * 1.3); used > limit {
		t.Fatalf("used %v of CPU in %v, more than half a core allows", used, wall)
	}
}
