package cpu

import (
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
