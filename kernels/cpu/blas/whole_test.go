//go:build cgo && !purego

package blas

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
)

// wholeLibs are the libraries here that compute whole products with their
// parallel instance, in the given way ("openblas": whenever the cores are
// free; "tuned": as each shape's plan says).
func wholeLibs(t *testing.T, way string) []Implementation {
	t.Helper()
	if Threads() < 2 {
		t.Skip("one thread: no parallel instance")
	}
	var out []Implementation
	for _, impl := range libs() {
		if impl.Whole == way {
			out = append(out, impl)
		} else if impl.Path == LibDir+"/libscipy_openblas.so" && impl.Whole == "" && impl.NoWhole != "split in Go" {
			t.Errorf("%s: no parallel instance: %s", impl.Name, impl.NoWhole)
		}
	}
	if len(out) == 0 {
		t.Skip("no library here has OpenBLAS's threads callback")
	}
	return out
}

// checkNT holds c = a·bᵀ to the float64 reference's rounding bound.
func checkNT(t *testing.T, c, a, b []float32, m, n, k int) {
	t.Helper()
	want, bound := refMatMulT(a, b, m, n, k)
	for i := range want {
		if d := math.Abs(float64(c[i]) - want[i]); !(d <= bound[i]) {
			t.Fatalf("c[%d] = %v, want %v (bound %g)", i, c[i], want[i], bound[i])
		}
	}
}

// TestWholeProducts: with every core free, a large product is one sgemm of
// the parallel instance whose jobs run through frognano's callback, every
// job at once, and gives the reference's result for all three forms; with
// a helper held elsewhere it is split in Go instead, and the callback does
// not run.
func TestWholeProducts(t *testing.T) {
	for _, impl := range wholeLibs(t, "openblas") {
		t.Run(impl.Name, func(t *testing.T) {
			defer Use(impl)()
			r := rand.New(rand.NewPCG(4, 4))
			const m, n, k = 96, 700, 160
			a, b := randSlice(r, m*k), randSlice(r, n*k)
			c := make([]float32, m*n)
			before := jobsRun.Load()
			MatMulT(c, a, b, m, n, k)
			if got := jobsRun.Load() - before; got < 2 {
				t.Fatalf("MatMulT %dx%dx%d ran %d jobs through the callback, want ≥ 2", m, n, k, got)
			}
			checkNT(t, c, a, b, m, n, k)

			// MatMulNN: c = a·b with b = the transpose of b above.
			bt := make([]float32, k*n)
			for j := range n {
				for p := range k {
					bt[p*n+j] = b[j*k+p]
				}
			}
			clear(c)
			before = jobsRun.Load()
			MatMulNN(c, a, bt, m, n, k)
			if jobsRun.Load() == before {
				t.Fatal("MatMulNN did not use the parallel instance")
			}
			checkNT(t, c, a, b, m, n, k)

			// MatMulTN: c[n,k] = xᵀ·y (+ c) with x m×n, y m×k; its
			// reference is c[j,p] = Σ_i x[i,j]·y[i,p] = (xᵀ)·(yᵀ)ᵀ.
			x, y := randSlice(r, m*n), randSlice(r, m*k)
			xt, yt := make([]float32, n*m), make([]float32, k*m)
			for i := range m {
				for j := range n {
					xt[j*m+i] = x[i*n+j]
				}
				for p := range k {
					yt[p*m+i] = y[i*k+p]
				}
			}
			tn := make([]float32, n*k)
			before = jobsRun.Load()
			MatMulTN(tn, x, y, m, n, k, false)
			MatMulTN(tn, x, y, m, n, k, true) // twice the product
			if jobsRun.Load() == before {
				t.Fatal("MatMulTN did not use the parallel instance")
			}
			for i := range tn {
				tn[i] /= 2
			}
			checkNT(t, tn, xt, yt, n, k, m)

			// A helper held elsewhere: split in Go, same result.
			if got := borrow(Threads() - 1); got != Threads()-1 {
				helpers.Add(-int64(got))
				t.Fatalf("borrowed %d helpers of %d", got, Threads()-1)
			}
			clear(c)
			before = jobsRun.Load()
			MatMulT(c, a, b, m, n, k)
			helpers.Add(-int64(Threads() - 1))
			if jobsRun.Load() != before {
				t.Fatal("the parallel instance ran while helpers were held elsewhere")
			}
			checkNT(t, c, a, b, m, n, k)
			if h := helpers.Load(); h != 0 {
				t.Fatalf("%d helpers not given back", h)
			}
		})
	}
}

// TestWholeProductsBounded runs many large products at once from several
// goroutines: results stay right, at most one whole product's jobs run at
// a time (no more than Threads() of them), and every helper is given back.
func TestWholeProductsBounded(t *testing.T) {
	for _, impl := range wholeLibs(t, "openblas") {
		t.Run(impl.Name, func(t *testing.T) {
			defer Use(impl)()
			jobsPeak.Store(0)
			const callers = 6
			var wg sync.WaitGroup
			errs := make(chan error, callers)
			for g := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(uint64(g), 7))
					m, n, k := 32+16*g, 300+50*g, 96
					a, b := randSlice(r, m*k), randSlice(r, n*k)
					c := make([]float32, m*n)
					for range 5 {
						MatMulT(c, a, b, m, n, k)
						want, bound := refMatMulT(a, b, m, n, k)
						for i := range want {
							if d := math.Abs(float64(c[i]) - want[i]); !(d <= bound[i]) {
								errs <- fmt.Errorf("caller %d: c[%d] = %v, want %v", g, i, c[i], want[i])
								return
							}
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if p := jobsPeak.Load(); p > int64(Threads()) {
				t.Fatalf("%d jobs ran at once, Threads() is %d", p, Threads())
			}
			if h := helpers.Load(); h != 0 {
				t.Fatalf("%d helpers not given back", h)
			}
		})
	}
}

// TestWholeFollowsThreads: with GOMAXPROCS below the parallel instance's
// threads, products are split in Go (its jobs would outnumber the cores).
func TestWholeFollowsThreads(t *testing.T) {
	for _, impl := range wholeLibs(t, "openblas") {
		t.Run(impl.Name, func(t *testing.T) {
			defer Use(impl)()
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			r := rand.New(rand.NewPCG(5, 5))
			const m, n, k = 64, 500, 128
			a, b := randSlice(r, m*k), randSlice(r, n*k)
			c := make([]float32, m*n)
			before := jobsRun.Load()
			MatMulT(c, a, b, m, n, k)
			if jobsRun.Load() != before {
				t.Fatal("the parallel instance ran with GOMAXPROCS 1")
			}
			checkNT(t, c, a, b, m, n, k)
		})
	}
}

// TestPlans: under the tuned implementation a shape's first calls try both
// ways while the cores are free, untimed once each and then planTrials
// times each, every call giving the reference's result; then the plan is
// made, for the way faster in most pairs of neighbouring calls, and every
// later call takes that way only. Calls made while a helper is held elsewhere are split and
// do not count as trials.
func TestPlans(t *testing.T) {
	for _, impl := range wholeLibs(t, "tuned") {
		t.Run(impl.Name, func(t *testing.T) {
			defer Use(impl)()
			r := rand.New(rand.NewPCG(6, 6))
			const m, n, k = 48, 611, 144 // a shape no other test plans
			a, b := randSlice(r, m*k), randSlice(r, n*k)
			c := make([]float32, m*n)
			find := func() (Plan, bool) {
				for _, p := range Plans() {
					if p.Op == "a·bᵀ" && p.M == m && p.N == n && p.K == k {
						return p, true
					}
				}
				return Plan{}, false
			}
			// Busy helpers: split, not a trial.
			if got := borrow(Threads() - 1); got != Threads()-1 {
				helpers.Add(-int64(got))
				t.Fatalf("borrowed %d helpers of %d", got, Threads()-1)
			}
			before := jobsRun.Load()
			for range 3 {
				MatMulT(c, a, b, m, n, k)
			}
			helpers.Add(-int64(Threads() - 1))
			if jobsRun.Load() != before {
				t.Fatal("the parallel instance ran while helpers were held elsewhere")
			}
			if p, ok := find(); ok && p.Pairs != 0 {
				t.Fatalf("calls with busy helpers were timed: %+v", p)
			}
			wholeCalls := 0
			for i := range 2 * (planTrials + 1) {
				clear(c)
				before := jobsRun.Load()
				MatMulT(c, a, b, m, n, k)
				if jobsRun.Load() != before {
					wholeCalls++
				}
				checkNT(t, c, a, b, m, n, k)
				p, _ := find()
				if p.BitsDiffer {
					// The first whole call gave other bits than a split
					// one: split for good, and the rest of this test is
					// about timing trials this library cannot have.
					if i != 1 || !p.Decided || p.Whole {
						t.Fatalf("after %d calls: %+v", i+1, p)
					}
					want := append([]float32(nil), c...)
					for range 3 {
						clear(c)
						MatMulT(c, a, b, m, n, k)
						if !slices.Equal(c, want) {
							t.Fatal("a shape split for its bits gives other bits on a later call")
						}
					}
					t.Skipf("%s: a whole call's bits differ from a split call's: split for good", impl.Name)
				}
				if p.Decided != (i == 2*(planTrials+1)-1) {
					t.Fatalf("after %d calls: decided %v", i+1, p.Decided)
				}
			}
			if wholeCalls != planTrials+1 {
				t.Fatalf("%d of the %d trials were whole, want half", wholeCalls, 2*(planTrials+1))
			}
			p, _ := find()
			if p.Pairs != planTrials || p.Whole != (2*p.WholeWins > planTrials) {
				t.Fatalf("plan %+v: not the way faster in most pairs", p)
			}
			for range 4 {
				clear(c)
				before := jobsRun.Load()
				MatMulT(c, a, b, m, n, k)
				if ran := jobsRun.Load() != before; ran != p.Whole {
					t.Fatalf("plan whole=%v, but the parallel instance ran: %v", p.Whole, ran)
				}
				checkNT(t, c, a, b, m, n, k)
			}
			if h := helpers.Load(); h != 0 {
				t.Fatalf("%d helpers not given back", h)
			}
		})
	}
}
