package cpu

import "github.com/frognano/frognano/kernels/cpu/blas"

// minParallelWork is the least work, in rough float operations, worth a
// second core: waking a parked goroutine on another core costs tens of
// microseconds on a virtual machine. Tests lower it to run the parallel
// paths on small tensors.
var minParallelWork = 1 << 16

// workers is how many pieces n items of the given cost should be split
// into: one per core (blas.Threads) when the work pays for it. The split
// depends on the work and the machine only; blas.Run decides how many
// goroutines run the pieces, from the helpers the whole process has free,
// so concurrent kernels do not oversubscribe the cores and results do not
// depend on scheduling.
func workers(n, costPerItem int) int {
	w := min(blas.Threads(), n)
	if costPerItem > 0 {
		w = min(w, n*costPerItem/minParallelWork)
	}
	return max(w, 1)
}

// forRows calls fn on contiguous ranges covering [0, n), one per core when
// n·costPerRow is large enough and inline otherwise. The caller's goroutine
// takes a share of the ranges.
func forRows(n, costPerRow int, fn func(lo, hi int)) {
	w := workers(n, costPerRow)
	if w == 1 {
		fn(0, n)
		return
	}
	step := (n + w - 1) / w
	blas.Run((n+step-1)/step, func(i int) { fn(i*step, min((i+1)*step, n)) })
}

// forStrided calls fn(w, nw) for worker w of nw, each to take items w, w+nw,
// w+2·nw, …: a balanced split when an item's cost grows with its index, as
// causal attention's rows do.
func forStrided(n, costPerItem int, fn func(w, nw int)) {
	nw := workers(n, costPerItem)
	blas.Run(nw, func(w int) { fn(w, nw) })
}
