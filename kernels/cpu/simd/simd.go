// Package simd holds the CPU backend's vector kernels other than the
// matrix products: the softmax of attention and its backward, the log-prob
// head's log-sum-exp and gradient, SwiGLU and its backward, RMSNorm. Each
// is C with intrinsics, written twice, for AVX2 with FMA and for AVX-512 F,
// in one file compiled with per-function target attributes; the CPU's
// features (and the OS's, through XCR0) choose one at run time. The CPU
// backend keeps its Go loops as the fallback (builds with the purego tag or
// without cgo, other CPUs, FROGNANO_SIMD=go) and as the reference the tests
// hold these kernels to.
//
// Like kernels/cpu/blas, it is behind the cgo wall: no C type leaves the
// package, and every function takes and returns Go slices and numbers.
// Callers check On first: with no vector level in use, every kernel panics.
package simd

import (
	"fmt"
	"os"
	"sync/atomic"
)

// Level is an instruction set the kernels are written for.
type Level int32

const (
	Go     Level = iota // none: the callers' Go loops
	AVX2                // AVX2 with FMA, 8 float32 lanes
	AVX512              // AVX-512 F, 16 float32 lanes
)

func (l Level) String() string {
	switch l {
	case Go:
		return "go"
	case AVX2:
		return "avx2"
	case AVX512:
		return "avx512"
	}
	return fmt.Sprintf("Level(%d)", int32(l))
}

// Best is the widest level this CPU, OS and build run.
var Best = cpuLevel()

var level atomic.Int32

func init() { level.Store(int32(initialLevel(os.Getenv("FROGNANO_SIMD")))) }

// initialLevel is Best, or the level FROGNANO_SIMD names ("go", "avx2",
// "avx512") when this machine runs it.
func initialLevel(env string) Level {
	for l := Go; l <= Best; l++ {
		if env == l.String() {
			return l
		}
	}
	return Best
}

// Current is the level the kernels run.
func Current() Level { return Level(level.Load()) }

// On reports whether a vector level is in use.
func On() bool { return Current() != Go }

// Levels lists Go and every vector level this machine runs, narrowest
// first: what the tests and benchmarks compare.
func Levels() []Level {
	var ls []Level
	for l := Go; l <= Best; l++ {
		ls = append(ls, l)
	}
	return ls
}

// SetLevel makes l current, no wider than Best, and returns the level
// before; for tests and benchmarks, which compare the levels in one
// process. It is not meant to change while kernels run.
func SetLevel(l Level) Level {
	l = max(Go, min(l, Best))
	return Level(level.Swap(int32(l)))
}

func lvl() int32 {
	l := level.Load()
	if l == int32(Go) {
		panic("simd: no vector level in use (check On)")
	}
	return l
}

func checkLen(op string, n int, xs ...int) {
	for _, x := range xs {
		if x < n {
			panic(fmt.Sprintf("simd: %s: a slice of %d for %d elements", op, x, n))
		}
	}
}
