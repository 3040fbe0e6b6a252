package node

import (
	"math"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

// TestNodeSetsTheMemoryLimit: node.memory_limit's explicit values are
// fixed limits that the live-heap follower (runtime/capabilities) keeps,
// collection after collection; the default follows the live heap.
func TestNodeSetsTheMemoryLimit(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
	t.Setenv("GOMEMLIMIT", "")

	// The default first, as the binaries set it before any node starts:
	// the follower runs.
	n := startNode(t, testConfig(t))
	total := int64(n.caps.GetMemoryBytes())
	if got := debug.SetMemoryLimit(-1); total > 0 && (got < total/2 || got >= total) {
		t.Errorf("default limit %d for %d bytes of memory, want 70%% to 85%% of it", got, total)
	}

	cfg := testConfig(t)
	cfg.Node.MemoryLimit = "1536MiB"
	startNode(t, cfg)
	stays := func(want int64) {
		t.Helper()
		for range 3 { // the follower adjusts after collections: it must keep the fixed value
			runtime.GC()
			time.Sleep(5 * time.Millisecond)
		}
		if got := debug.SetMemoryLimit(-1); got != want {
			t.Errorf("the runtime's limit is %d after collections, want %d", got, want)
		}
	}
	stays(1536 << 20)

	// GOMEMLIMIT, when set and node.memory_limit is not, is left alone.
	debug.SetMemoryLimit(3 << 30)
	if err := applyMemoryLimit("", "3GiB", 64<<30, quiet); err != nil {
		t.Fatal(err)
	}
	if got := debug.SetMemoryLimit(-1); got != 3<<30 {
		t.Errorf("with GOMEMLIMIT set, the limit became %d", got)
	}
	// node.memory_limit beats GOMEMLIMIT; off lifts the limit.
	if err := applyMemoryLimit("50%", "3GiB", 8<<30, quiet); err != nil {
		t.Fatal(err)
	}
	stays(4 << 30)
	if err := applyMemoryLimit("off", "", 8<<30, quiet); err != nil {
		t.Fatal(err)
	}
	stays(math.MaxInt64)
	// Unknown memory: a share cannot be resolved.
	if err := applyMemoryLimit("50%", "", 0, quiet); err == nil {
		t.Error("a share of unknown memory was accepted")
	}
}

func TestBadMemoryLimitRefusesToStart(t *testing.T) {
	cfg := testConfig(t)
	cfg.Node.MemoryLimit = "lots"
	if n, err := Start(t.Context(), cfg, Options{Logger: quiet}); err == nil {
		n.Stop(t.Context())
		t.Fatal("node.memory_limit lots: the node started")
	}
}
