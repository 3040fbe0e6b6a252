package capabilities

import (
	"math"
	"os"
	"runtime/debug"
	"testing"
)

// TestSetMemoryLimit: without GOMEMLIMIT the runtime's soft limit becomes
// the fraction of this machine's memory; with it, the environment's limit
// stays.
func TestSetMemoryLimit(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })

	t.Setenv("GOMEMLIMIT", "")
	if got := SetMemoryLimit(0.5); got != 0 {
		t.Fatalf("with GOMEMLIMIT set, SetMemoryLimit set %d", got)
	}
	if debug.SetMemoryLimit(-1) != old {
		t.Fatal("with GOMEMLIMIT set, the runtime's limit changed")
	}

	t.Setenv("GOMEMLIMIT", "x") // so that Setenv restores it; then unset
	unsetenv(t, "GOMEMLIMIT")
	mem, err := memoryBytes("/proc/meminfo", "/sys/fs/cgroup")
	if err != nil {
		t.Skipf("this machine's memory: %v", err)
	}
	got := SetMemoryLimit(0.5)
	if want := int64(float64(mem) * 0.5); got != want || debug.SetMemoryLimit(-1) != want {
		t.Fatalf("limit %d (runtime %d), want half of %d", got, debug.SetMemoryLimit(-1), mem)
	}
	for _, bad := range []float64{0, -1, 1.5, math.NaN()} {
		if SetMemoryLimit(bad) != 0 {
			t.Errorf("fraction %v was used", bad)
		}
	}
}

func unsetenv(t *testing.T, key string) {
	t.Helper()
	if err := os.Unsetenv(key); err != nil {
		t.Fatal(err)
	}
}
