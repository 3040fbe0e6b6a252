package blas

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// A large product can use the cores in two ways that give the same bits
// (each element's sum runs in the same order either way): one sgemm of the
// parallel instance, whose jobs share their packed panels, or pieces split
// in Go, each a single-threaded call that packs its own. Which is faster
// depends on the machine and the shape: on a quiet AMD EPYC (Zen 5)
// OpenBLAS's own split ran up to 1.3× faster on some shapes, on an Intel
// Xeon (Emerald Rapids) the split in Go was as fast or faster on most
// (docs/kernels.md). So each shape is planned, as FFTW plans a transform: its first calls, made
// while the cores are free, take the two ways in turn, and the way that
// was faster in more of the planTrials pairs of neighbouring calls serves
// every call after. Pairs, not each way's best time, because the machines
// this runs on slow down and speed up over seconds (other tenants of the
// host): two calls a few milliseconds apart meet the same machine.

// planTrials is how many timed pairs (a call split in Go, then a whole
// one) decide a shape's plan, after one untimed call each way to warm the
// caches and buffers. Odd, so that there are no ties.
const planTrials = 9

// planKey is one product's form and shape.
type planKey struct {
	op                 byte // 'T' (a·bᵀ), 'N' (a·b), 'A' (aᵀ·b)
	transA, transB, ac bool
	m, n, k            int
}

// plan is one shape's trials and, once made, its choice.
type plan struct {
	choice  atomic.Int32 // 0 while trying, planSplit or planWhole after
	mu      sync.Mutex
	calls   [2]int             // calls each way so far, the untimed first included
	checked int                // the bits check: checkNow, checkRunning or checkSame
	differs bool               // the whole call's bits differed from the split's
	timed   [2][]time.Duration // the timed calls each way, in order
}

const (
	planSplit = 1
	planWhole = 2
)

var plans sync.Map // planKey → *plan

// product computes gemmFull's product, or calls split to compute it split
// in Go, as the implementation in use says: always split (Whole ""),
// whole whenever every helper is free ("openblas"), or as the shape's plan
// says ("tuned"). Products with fewer than gemvRows rows, or too small to
// split, are always split (their own few-rows path).
func product(split func(), transA, transB, accumulate bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	impl := active.Load()
	if impl.Whole == "" || m < gemvRows || 2*m*n*k < 2*minChunkFLOPs || impl.lib.parallel() != Threads() {
		split()
		return
	}
	whole := func() bool {
		return wholeCall(impl.lib, transA, transB, accumulate, m, n, k, a, lda, b, ldb, c, ldc)
	}
	if impl.Whole == "openblas" {
		if !whole() {
			split()
		}
		return
	}
	op := byte('N')
	switch {
	case transA:
		op = 'A'
	case transB:
		op = 'T'
	}
	key := planKey{op, transA, transB, accumulate, m, n, k}
	v, ok := plans.Load(key)
	if !ok {
		v, _ = plans.LoadOrStore(key, new(plan))
	}
	p := v.(*plan)
	switch p.choice.Load() {
	case planSplit:
		split()
		return
	case planWhole:
		if !whole() {
			split()
		}
		return
	}
	// Still trying: the way with fewer calls so far goes next; a trial
	// counts only if every helper was free, before and after for the
	// split, which the whole call holds throughout.
	p.mu.Lock()
	way := 0 // split
	if p.calls[1] < p.calls[0] {
		way = 1
	}
	p.mu.Unlock()
	if way == 1 {
		// The first whole call checks that the two ways give the same
		// bits, as they do where each element's sum runs in one order
		// either way. Some library builds on some processors do not
		// (OpenBLAS 0.3.34's sgemm on an AMD Zen 3 rounds a column
		// differently by where it sits in the call): then the shape is
		// split for good, so that a product never depends on whether the
		// cores were free. Until the check has passed, other calls split.
		switch p.check() {
		case checkNow:
			same, ran := sameBits(c, ldc, m, n, whole, split)
			p.mu.Lock()
			switch {
			case !ran:
				// The cores were not free: nothing was compared, and the
				// next whole call checks again.
				p.checked = checkNow
			case same:
				p.checked = checkSame
			default:
				p.differs = true
				p.choice.Store(planSplit)
			}
			p.mu.Unlock()
			return
		case checkRunning:
			split()
			return
		}
	}
	start := time.Now()
	var counted bool
	if way == 1 {
		counted = whole()
		if !counted {
			split()
		}
	} else {
		free := helpers.Load() == 0
		split()
		counted = free && helpers.Load() == 0
	}
	d := time.Since(start)
	if !counted {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls[way]++
	if p.calls[way] > 1 && len(p.timed[way]) < planTrials {
		p.timed[way] = append(p.timed[way], d)
	}
	if len(p.timed[0]) == planTrials && len(p.timed[1]) == planTrials && p.choice.Load() == 0 {
		if 2*wholeWins(p.timed) > planTrials {
			p.choice.Store(planWhole)
		} else {
			p.choice.Store(planSplit)
		}
	}
}

// The bits check's states (plan.checked).
const (
	checkNow     = 0 // not begun: the caller runs it
	checkRunning = 1
	checkSame    = 2
)

// check returns the bits check's state, claiming the check for the caller
// (checkNow) if it has not begun.
func (p *plan) check() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.checked
	if st == checkNow {
		p.checked = checkRunning
	}
	return st
}

// sameBits computes the m×n product in c (ldc apart) both ways, whole (if
// the cores are free) and then split, leaving the split result in c, and
// reports whether the whole call ran and whether it gave the same bits. A
// whole call that could not run (another product held a helper) compares
// nothing: counting it as the same let a Zen 3, whose whole calls round
// differently, trust them for good (TestMatMulTConcurrent, now and then).
func sameBits(c []float32, ldc, m, n int, whole func() bool, split func()) (same, ran bool) {
	rows := func(dst, src []float32, ld int) {
		for i := range m {
			copy(dst[i*ld:i*ld+n], src[i*ldc:i*ldc+n])
		}
	}
	orig, got := make([]float32, m*n), make([]float32, m*n)
	rows(orig, c, n)
	if !whole() {
		split()
		return false, false
	}
	rows(got, c, n)
	for i := range m {
		copy(c[i*ldc:i*ldc+n], orig[i*n:(i+1)*n])
	}
	split()
	for i := range m {
		for j := range n {
			if math.Float32bits(c[i*ldc+j]) != math.Float32bits(got[i*n+j]) {
				return false, true
			}
		}
	}
	return true, true
}

// wholeWins counts the pairs of neighbouring trials in which the whole
// call was faster than the split one.
func wholeWins(timed [2][]time.Duration) int {
	n := 0
	for i := range min(len(timed[0]), len(timed[1])) {
		if timed[1][i] < timed[0][i] {
			n++
		}
	}
	return n
}

// wholeCall computes the product as one sgemm of l's parallel instance
// if every helper of the process is free, holding them meanwhile, and
// reports whether it did.
func wholeCall(l *lib, transA, transB, accumulate bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) bool {
	jobs := l.parallel()
	h := borrow(jobs - 1)
	defer helpers.Add(-int64(h))
	if h < jobs-1 {
		return false
	}
	l.gemmParallel(transA, transB, accumulate, m, n, k, a, lda, b, ldb, c, ldc)
	return true
}

// Plan is the way one product shape was planned.
type Plan struct {
	Op         string // "a·bᵀ", "a·b" or "aᵀ·b"
	Accumulate bool
	M, N, K    int  // as the product's function takes them
	Whole      bool // one sgemm of the parallel instance; else split in Go
	Decided    bool // false while its trials run
	BitsDiffer bool // decided split because a whole call's bits differed from a split one's
	Pairs      int  // timed pairs so far
	WholeWins  int  // pairs in which the whole call was the faster
}

// Plans returns the shapes planned so far in this process, sorted.
func Plans() []Plan {
	var out []Plan
	plans.Range(func(k, v any) bool {
		key, p := k.(planKey), v.(*plan)
		p.mu.Lock()
		defer p.mu.Unlock()
		pl := Plan{Accumulate: key.ac, Whole: p.choice.Load() == planWhole, Decided: p.choice.Load() != 0, BitsDiffer: p.differs,
			Pairs: min(len(p.timed[0]), len(p.timed[1])), WholeWins: wholeWins(p.timed)}
		switch key.op {
		case 'T':
			pl.Op, pl.M, pl.N, pl.K = "a·bᵀ", key.m, key.n, key.k
		case 'N':
			pl.Op, pl.M, pl.N, pl.K = "a·b", key.m, key.n, key.k
		default: // the product's function takes c[n,k] = a[m,n]ᵀ·b[m,k]
			pl.Op, pl.M, pl.N, pl.K = "aᵀ·b", key.k, key.m, key.n
		}
		out = append(out, pl)
		return true
	})
	slices.SortFunc(out, func(a, b Plan) int {
		if a.Op != b.Op {
			if a.Op < b.Op {
				return -1
			}
			return 1
		}
		if d := a.M - b.M; d != 0 {
			return d
		}
		if d := a.N - b.N; d != 0 {
			return d
		}
		return a.K - b.K
	})
	return out
}
