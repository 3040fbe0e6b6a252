package blas

import (
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/frognano/frognano/kernels/cgroup"
)

// Threads is how many cores the products, and the CPU backend's other
// kernels, split their work across: the CPUs this process may use (its
// affinity mask and its cgroups' CPU quota, as package cgroup reads them,
// the same reader a node's advertised capabilities come from), no more
// than GOMAXPROCS. The libraries themselves run single-threaded (see
// load), so this is the whole of the process's compute threads.
func Threads() int {
	return max(1, min(cgroup.CPUs(), runtime.GOMAXPROCS(0)))
}

// helpers counts the goroutines that Run has computing besides their
// callers, over the whole process.
var helpers atomic.Int64

// borrow reserves up to n helpers from the Threads()−1 the process has and
// returns how many it got, possibly none.
func borrow(n int) int {
	limit := int64(Threads() - 1)
	for {
		cur := helpers.Load()
		k := min(int64(n), limit-cur)
		if k <= 0 {
			return 0
		}
		if helpers.CompareAndSwap(cur, cur+k) {
			return int(k)
		}
	}
}

// Run calls piece(i) for every i in [0, n) and returns when all are done:
// on the caller's goroutine and on as many helper goroutines as are free
// of the Threads()−1 the whole process shares, each taking the next piece
// until none is left. Concurrent callers (a sampler decoding while a
// learner trains, the items of a parallel kernel calling a product) so
// never put more than Threads() − 1 helpers beside themselves to work: a
// goroutine in a C call holds no P, so GOMAXPROCS alone would not bound
// them. How the work is split into pieces is the caller's, and does not
// depend on how many goroutines run them, so neither do the results.
func Run(n int, piece func(i int)) {
	if n <= 1 {
		if n == 1 {
			piece(0)
		}
		return
	}
	h := borrow(n - 1)
	var next atomic.Int64
	work := func() {
		for {
			i := int(next.Add(1) - 1)
			if i >= n {
				return
			}
			piece(i)
		}
	}
	var wg sync.WaitGroup
	// Given back even when a piece on the caller's goroutine panics (a
	// kernel's argument check), once the helpers are done.
	defer func() {
		wg.Wait()
		helpers.Add(-int64(h))
	}()
	for range h {
		wg.Add(1)
		go func() {
			defer wg.Done()
			work()
		}()
	}
	work()
}
