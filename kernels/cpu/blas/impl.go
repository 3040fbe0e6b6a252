package blas

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
)

// LibDir is where scripts/setup.sh puts the current OpenBLAS
// (libscipy_openblas.so, from the scipy-openblas32 wheel).
const LibDir = "/usr/local/lib/frognano"

// Implementation is one way of computing the products: an OpenBLAS loaded
// at run time, or frognano's Go loops.
type Implementation struct {
	Name    string // "openblas 0.3.34 SkylakeX", or "go"
	Path    string // the library loaded, "" for the Go loops
	Version string // OpenBLAS's version, "" for the Go loops
	Kernels string // OpenBLAS's kernel set in use (its corename)
	// Whole says how large products use the cores: "tuned" when each
	// shape takes whichever of the two ways below ran it faster in its
	// first calls (see plan.go), "openblas" when one sgemm of the parallel
	// instance computes each, its jobs on frognano's goroutines, "" when
	// they are split in Go into one single-threaded call per core (the Go
	// loops; a library without the threads callback; the benchmarks'
	// "split in Go" variant).
	Whole string
	// NoWhole says why Whole is "" for a library.
	NoWhole string
	lib     *lib // nil for the Go loops
}

var goImpl = &Implementation{Name: "go"}

// candidates are the libraries tried, best first: the one FROGNANO_BLAS
// names (a path, or "go" for the Go loops only), else the current OpenBLAS
// that setup.sh installs, then Debian's (libopenblas0, 0.3.21 on bookworm).
// Side by side on AVX-512 (Zen 5) the two run sgemm at the same speed when
// both use the SkylakeX kernels; the current one comes first because it
// carries three years of fixes, including CPU detection for newer chips.
func candidates() []string {
	if v := os.Getenv("FROGNANO_BLAS"); v != "" {
		if v == "go" {
			return nil
		}
		return []string{v}
	}
	return []string{LibDir + "/libscipy_openblas.so", "libopenblas.so.0"}
}

var (
	active atomic.Pointer[Implementation]
	// skipped says why candidates were not used.
	skipped []string
)

func init() {
	active.Store(goImpl)
	if !cgoEnabled {
		return
	}
	for _, path := range candidates() {
		impl, err := load(path)
		if err != nil {
			skipped = append(skipped, err.Error())
			continue
		}
		active.Store(impl)
		return
	}
}

func load(path string) (*Implementation, error) {
	core := os.Getenv("FROGNANO_BLAS_CORETYPE")
	if core == "" {
		core = cpuCore()
	}
	l, version, kernels, err := openLib(path, core)
	if err != nil {
		return nil, err
	}
	impl := &Implementation{Name: fmt.Sprintf("openblas %s %s", version, kernels), Path: path, Version: version, Kernels: kernels, lib: l}
	if l.parallel() > 0 {
		impl.Whole = "tuned"
	} else {
		impl.NoWhole = l.parErr
	}
	return impl, nil
}

// splitInGo is impl with every product split in Go, one single-threaded
// call per core, as before the parallel instance: for the benchmarks.
func splitInGo(impl *Implementation) *Implementation {
	s := *impl
	s.Name += ", split in Go"
	s.Whole, s.NoWhole = "", "split in Go"
	return &s
}

// wholeInOpenBLAS is impl with every large product computed by the
// parallel instance whenever the cores are free: for the benchmarks.
func wholeInOpenBLAS(impl *Implementation) *Implementation {
	s := *impl
	s.Name += ", whole in OpenBLAS"
	s.Whole = "openblas"
	return &s
}

// Impl names the implementation in use, e.g. "openblas 0.3.34 SkylakeX".
func Impl() string { return active.Load().Name }

// Active returns the implementation in use.
func Active() Implementation { return *active.Load() }

// Skipped says why the libraries tried before the one in use were not used.
func Skipped() []string { return append([]string(nil), skipped...) }

var allOnce = sync.OnceValue(func() []*Implementation {
	all := []*Implementation{}
	if cgoEnabled {
		for _, path := range candidates() {
			if impl, err := load(path); err == nil {
				all = append(all, impl)
				if impl.Whole != "" {
					all = append(all, wholeInOpenBLAS(impl), splitInGo(impl))
				}
			}
		}
	}
	return append(all, goImpl)
})

// Implementations loads every candidate that loads here and returns them,
// best first, each library that can compute whole products in parallel
// followed by its "whole in OpenBLAS" and "split in Go" variants (the two
// ways its tuned plans choose between), with the Go loops last: for
// benchmarks and tests that compare them side by side.
func Implementations() []Implementation {
	var out []Implementation
	for _, impl := range allOnce() {
		out = append(out, *impl)
	}
	return out
}

// Use makes impl (one of Implementations) the one in use until the returned
// function puts the previous one back. It is for benchmarks and tests:
// products running meanwhile on other goroutines may use either.
func Use(impl Implementation) (restore func()) {
	prev := active.Swap(&impl)
	return func() { active.Store(prev) }
}

// gemm is Gemm after validation, with m, n, k > 0, on the implementation in
// use.
func gemm(transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if l := active.Load().lib; l != nil {
		l.gemm(transB, m, n, k, a, lda, b, ldb, c, ldc)
		return
	}
	gemmGo(transB, m, n, k, a, lda, b, ldb, c, ldc)
}

// gemmFull is GemmFull after validation, with m, n, k > 0.
func gemmFull(transA, transB, accumulate bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if l := active.Load().lib; l != nil {
		l.gemmFull(transA, transB, accumulate, m, n, k, a, lda, b, ldb, c, ldc)
		return
	}
	gemmFullGo(transA, transB, accumulate, m, n, k, a, lda, b, ldb, c, ldc)
}
