package capabilities

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

// TestSetMemoryLimit: without GOMEMLIMIT the runtime's soft limit becomes
// the fraction of this machine's memory; with it, the environment's limit
// stays.
func TestSetMemoryLimit(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })

	t.Setenv("GOMEMLIMIT", "4GiB")
	if got := SetMemoryLimit(0.5); got != 0 {
		t.Fatalf("with GOMEMLIMIT set, SetMemoryLimit set %d", got)
	}
	if debug.SetMemoryLimit(-1) != old {
		t.Fatal("with GOMEMLIMIT set, the runtime's limit changed")
	}

	t.Setenv("GOMEMLIMIT", "") // empty is unset, as the runtime reads it
	if got := SetMemoryLimit(0.5); got == 0 {
		t.Fatal("an empty GOMEMLIMIT counted as set")
	}
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

func TestFollowLimit(t *testing.T) {
	for _, c := range []struct{ live, want int64 }{
		{0, 100}, {50, 100}, {80, 100}, {100, 125}, {400, 500}, {900, 1000}, {5000, 1000},
	} {
		if got := followLimit(100, 1000, c.live); got != c.want {
			t.Errorf("followLimit(100, 1000, %d) = %d, want %d", c.live, got, c.want)
		}
	}
}

// A live heap above the base limit: with the limit fixed, the collector
// runs back to back while garbage is allocated (the count is logged, not
// checked: the runtime's CPU limiter makes it depend on timing); following
// the live heap, the limit rises above it after a collection, the same
// allocations take a handful of collections, and the limit comes back
// down when the live heap is freed.
func TestMemoryLimitFollowsTheLiveHeap(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { stopFollowing(); debug.SetMemoryLimit(old) })
	stopFollowing()
	const mib = 1 << 20
	live := make([][]byte, 96)
	for i := range live {
		live[i] = make([]byte, mib)
		live[i][0] = byte(i)
	}
	cycles := func() uint64 {
		s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	churn := func() uint64 {
		before := cycles()
		var sink []byte
		for range 4096 {
			sink = make([]byte, 64<<10)
			sink[0] = 1
		}
		_ = sink
		return cycles() - before
	}
	base := int64(32 * mib)
	debug.SetMemoryLimit(base)
	fixed := churn()

	follow(base, 1<<40)
	runtime.GC()
	runtime.GC()
	deadline := time.Now().Add(5 * time.Second)
	for debug.SetMemoryLimit(-1) < 96*mib*5/4 && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if got := debug.SetMemoryLimit(-1); got < 96*mib*5/4 {
		t.Fatalf("limit %d MiB with 96 MiB live, want at least 120", got/mib)
	}
	followed := churn()
	runtime.KeepAlive(live)
	t.Logf("256 MiB of garbage over 96 MiB live: %d collections with a 32 MiB limit, %d following the live heap", fixed, followed)
	// 256 MiB of garbage over a headroom of 24 MiB: at least 11 collections.
	if followed > 32 {
		t.Errorf("%d collections following the live heap, want near 11 (at most 32)", followed)
	}

	// Once the live heap is gone, the limit comes back to its base.
	live = nil
	deadline = time.Now().Add(5 * time.Second)
	for debug.SetMemoryLimit(-1) != base && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if got := debug.SetMemoryLimit(-1); got != base {
		t.Errorf("limit %d MiB once the live heap was freed, want the base %d MiB", got/mib, base/mib)
	}
}
