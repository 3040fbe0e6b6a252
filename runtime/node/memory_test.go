package node

import (
	"math"
	"runtime/debug"
	"testing"
)

func TestNodeSetsTheMemoryLimit(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })

	cfg := testConfig(t)
	cfg.Node.MemoryLimit = "1536MiB"
	startNode(t, cfg)
	if got := debug.SetMemoryLimit(-1); got != 1536<<20 {
		t.Errorf("node.memory_limit 1536MiB: the runtime's limit is %d", got)
	}

	// The default is a share of the memory the process may use: below it,
	// and far from the runtime's "no limit".
	debug.SetMemoryLimit(math.MaxInt64)
	t.Setenv("GOMEMLIMIT", "")
	n := startNode(t, testConfig(t))
	total := int64(n.caps.GetMemoryBytes())
	if got := debug.SetMemoryLimit(-1); total > 0 && (got <= total/2 || got >= total) {
		t.Errorf("default limit %d for %d bytes of memory, want 90%% of it", got, total)
	}

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
	if got := debug.SetMemoryLimit(-1); got != 4<<30 {
		t.Errorf("50%% of 8 GiB = %d", got)
	}
	if err := applyMemoryLimit("off", "", 8<<30, quiet); err != nil {
		t.Fatal(err)
	}
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Errorf("off left %d", got)
	}
	// Unknown memory: a share cannot be resolved; the default is skipped.
	if err := applyMemoryLimit("50%", "", 0, quiet); err == nil {
		t.Error("a share of unknown memory was accepted")
	}
	if err := applyMemoryLimit("", "", 0, quiet); err != nil {
		t.Errorf("the default with unknown memory: %v", err)
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
