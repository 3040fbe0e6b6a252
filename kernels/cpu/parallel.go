package cpu

import (
	"sync"

	"github.com/frognano/frognano/kernels/cpu/blas"
)

// minParallelWork is the least work, in rough float operations, worth a
// second core: waking a parked goroutine on another core costs tens of
// microseconds on a virtual machine. Tests lower it to run the parallel
// paths on small tensors.
var minParallelWork = 1 << 16

// workers is how many pieces n items of the given cost should be split into.
func workers(n, costPerItem int) int {
	w := min(blas.Threads(), n)
	if costPerItem > 0 {
		w = min(w, n*costPerItem/minParallelWork)
	}
	return max(w, 1)
}

// forRows calls fn on contiguous ranges covering [0, n), one per core when
// n·costPerRow is large enough and inline otherwise. The caller's goroutine
// takes the first range, so a split into w ranges starts w-1 goroutines.
func forRows(n, costPerRow int, fn func(lo, hi int)) {
	w := workers(n, costPerRow)
	if w == 1 {
		fn(0, n)
		return
	}
	step := (n + w - 1) / w
	var wg sync.WaitGroup
	for lo := step; lo < n; lo += step {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(lo, min(lo+step, n))
		}()
	}
	fn(0, min(step, n))
	wg.Wait()
}

// forStrided calls fn(w, nw) for worker w of nw, each to take items w, w+nw,
// w+2·nw, …: a balanced split when an item's cost grows with its index, as
// causal attention's rows do.
func forStrided(n, costPerItem int, fn func(w, nw int)) {
	nw := workers(n, costPerItem)
	if nw == 1 {
		fn(0, 1)
		return
	}
	var wg sync.WaitGroup
	for w := 1; w < nw; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(w, nw)
		}()
	}
	fn(0, nw)
	wg.Wait()
}
