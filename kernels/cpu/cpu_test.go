package cpu

import (
	"fmt"
	"testing"

	"github.com/frognano/frognano/kernels/kernelstest"
)

func TestConformance(t *testing.T) {
	kernelstest.Run(t, New(), "../testdata")
}

// TestConformanceParallel reruns the suite with every kernel split across
// goroutines however small its input, so the range arithmetic of the
// parallel paths meets the golden files too.
func TestConformanceParallel(t *testing.T) {
	old := minParallelWork
	minParallelWork = 1
	defer func() { minParallelWork = old }()
	if workers(4, 1) < 2 {
		t.Skip("one CPU: nothing runs in parallel")
	}
	kernelstest.Run(t, New(), "../testdata")
}

// TestAttentionPrefixGroupSplit reruns the conformance suite's grouped
// attention as machines with more cores slice it (members split into
// parts per kv head), on this machine's cores: every split must give
// AttentionPrefix's results.
func TestAttentionPrefixGroupSplit(t *testing.T) {
	old, oldWork := groupThreads, minParallelWork
	defer func() { groupThreads, minParallelWork = old, oldWork }()
	minParallelWork = 1
	for _, n := range []int{1, 3, 4, 8, 16} {
		groupThreads = func() int { return n }
		t.Run(fmt.Sprintf("%d threads", n), func(t *testing.T) {
			kernelstest.Run(t, New(), "../testdata")
		})
	}
}

func TestMemberParts(t *testing.T) {
	for _, c := range []struct{ m, kv, threads, want int }{
		{4, 3, 2, 2},  // SmolLM2 on two cores: 6 items
		{4, 2, 2, 1},  // Qwen2.5 on two cores: 2 items
		{1, 3, 2, 1},  // one member cannot be split
		{8, 3, 16, 6}, // no multiple of 16 within reach: one item per thread
		{4, 3, 16, 4}, // at most one part per member
		{4, 2, 4, 2},
	} {
		if got := memberParts(c.m, c.kv, c.threads); got != c.want {
			t.Errorf("memberParts(%d members, %d kv heads, %d threads) = %d, want %d", c.m, c.kv, c.threads, got, c.want)
		}
	}
}
