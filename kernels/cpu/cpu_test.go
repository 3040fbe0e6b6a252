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
