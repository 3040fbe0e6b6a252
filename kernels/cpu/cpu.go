// Package cpu is the CPU backend: kernels.Backend over host tensors
// (*tensor.Tensor). Matrix products go to kernels/cpu/blas (OpenBLAS loaded at
// run time, or Go loops); the softmaxes, the log-prob head, SwiGLU and
// RMSNorm to kernels/cpu/simd (AVX2 or AVX-512, chosen at run time) where
// the CPU has them, else to their Go loops, the reference; the rest is Go.
// Work is split by rows across the cores (blas.Run) when a call has
// enough of it to pay for the goroutines.
package cpu

import (
	"fmt"
	"unsafe"

	"github.com/frognano/frognano/kernels"
	"github.com/frognano/frognano/kernels/cpu/blas"
	"github.com/frognano/frognano/kernels/cpu/simd"
	"github.com/frognano/frognano/kernels/tensor"
)

// Backend computes on host memory. The zero value is ready to use and holds
// no state, so one Backend may serve any number of goroutines.
type Backend struct{}

var _ kernels.Backend = Backend{}
var _ kernels.PrefixAttention = Backend{}

// New returns the CPU backend.
func New() Backend { return Backend{} }

// Name reports the backend, its matrix-product implementation and the
// instruction set of its other kernels (package simd), e.g.
// "cpu/openblas 0.3.34.481.3 SkylakeX, avx512".
func (Backend) Name() string { return "cpu/" + blas.Impl() + ", " + simd.Current().String() }

// New allocates a zero-filled host tensor.
func (Backend) New(shape ...int) kernels.Tensor { return tensor.New(shape...) }

// FromHost returns h itself: CPU tensors are host tensors.
func (Backend) FromHost(h *tensor.Tensor) kernels.Tensor { return h }

// ToHost copies t into dst.
func (Backend) ToHost(dst []float32, t kernels.Tensor) {
	x := host(t)
	if len(dst) != x.Len() {
		panic(fmt.Sprintf("cpu: ToHost into %d floats from %v", len(dst), x.Shape()))
	}
	copy(dst, x.Data())
}

// Slice is the view of [lo, hi) along t's first dimension (rows of a
// QuantTensor).
func (Backend) Slice(t kernels.Tensor, lo, hi int) kernels.Tensor {
	if q, ok := t.(*QuantTensor); ok {
		return q.slice(lo, hi)
	}
	return host(t).Slice(lo, hi)
}

// Reshape is a view of t with a new shape.
func (Backend) Reshape(t kernels.Tensor, shape ...int) kernels.Tensor {
	return host(t).Reshape(shape...)
}

// host unwraps a backend tensor, panicking on one from another backend.
func host(t kernels.Tensor) *tensor.Tensor {
	h, ok := t.(*tensor.Tensor)
	if !ok || h == nil {
		panic(fmt.Sprintf("cpu: %T is not a CPU tensor", t))
	}
	return h
}

// mustMatrix checks that x reads as a rows×cols matrix.
func mustMatrix(op, name string, x *tensor.Tensor, rows, cols int) {
	if x.Rows() != rows || x.Cols() != cols {
		panic(fmt.Sprintf("cpu: %s: %s has shape %v, want [%d, %d] (as rows × last dimension)", op, name, x.Shape(), rows, cols))
	}
}

// mustSameLen checks element-wise operands.
func mustSameLen(op string, xs ...*tensor.Tensor) {
	for _, x := range xs[1:] {
		if x.Len() != xs[0].Len() || x.Cols() != xs[0].Cols() {
			panic(fmt.Sprintf("cpu: %s: shapes %v and %v differ", op, xs[0].Shape(), x.Shape()))
		}
	}
}

// mustNotOverlap rejects a destination that shares memory with an input, for
// the operations that read inputs after writing the output.
func mustNotOverlap(op string, dst *tensor.Tensor, srcs ...*tensor.Tensor) {
	d := dst.Data()
	if len(d) == 0 {
		return
	}
	d0 := uintptr(unsafe.Pointer(unsafe.SliceData(d)))
	d1 := d0 + uintptr(len(d))*4
	for _, s := range srcs {
		x := s.Data()
		if len(x) == 0 {
			continue
		}
		s0 := uintptr(unsafe.Pointer(unsafe.SliceData(x)))
		s1 := s0 + uintptr(len(x))*4
		if s0 < d1 && d0 < s1 {
			panic(fmt.Sprintf("cpu: %s: destination overlaps an input", op))
		}
	}
}
