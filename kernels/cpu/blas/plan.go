package blas

import (
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
// OpenBLAS's own split ran up to 1.3× faster, on an Intel Xeon (Sapphire
// Rapids) the split in Go did, on most shapes (docs/kernels.md). So each
// shape is planned like FFTW's plans: its first calls try both ways in
// turn, while the cores are free, and the faster one, by its best time,
// serves every call after.

// planTrials is how many timed calls each way gets before a shape's plan
// is made, after one untimed call each to warm the caches and buffers.
const planTrials = 5

// planKey is one product's form and shape.
type planKey struct {
	op                 byte // 'T' (a·bᵀ), 'N' (a·b), 'A' (aᵀ·b)
	transA, transB, ac bool
	m, n, k            int
}

// plan is one shape's trials and, once made, its choice.
type plan struct {
	choice atomic.Int32 // 0 while trying, planSplit or planWhole after
	mu     sync.Mutex
	calls  [2]int           // calls each way so far, the untimed first included
	best   [2]time.Duration // fastest timed call each way
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
	if p.calls[way] > 1 && (p.best[way] == 0 || d < p.best[way]) {
		p.best[way] = d
	}
	if p.calls[0] > planTrials && p.calls[1] > planTrials && p.choice.Load() == 0 {
		if p.best[1] < p.best[0] {
			p.choice.Store(planWhole)
		} else {
			p.choice.Store(planSplit)
		}
	}
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
	Op            string // "a·bᵀ", "a·b" or "aᵀ·b"
	Accumulate    bool
	M, N, K       int           // as the product's function takes them
	Whole         bool          // one sgemm of the parallel instance; else split in Go
	Decided       bool          // false while its trials run
	Split, Joined time.Duration // the best timed call each way (0: none yet)
}

// Plans returns the shapes planned so far in this process, sorted.
func Plans() []Plan {
	var out []Plan
	plans.Range(func(k, v any) bool {
		key, p := k.(planKey), v.(*plan)
		p.mu.Lock()
		defer p.mu.Unlock()
		pl := Plan{Accumulate: key.ac, Whole: p.choice.Load() == planWhole, Decided: p.choice.Load() != 0,
			Split: p.best[0], Joined: p.best[1]}
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
