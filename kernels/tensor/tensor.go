// Package tensor holds the host tensor: a dense, row-major float32 array and
// its shape. It is what model files are decoded into, what golden files hold,
// and the storage the CPU backend computes on directly. Device backends copy
// to and from it.
//
// There are no strides: every tensor is contiguous, and a view (Reshape,
// Slice) shares storage only where that stays true. Kernels read a tensor of
// any rank as a matrix of Rows() × Cols(), Cols being the last dimension.
package tensor

import (
	"fmt"
	"strings"
)

// Tensor is a dense row-major float32 array.
type Tensor struct {
	shape []int
	data  []float32
	dims  [4]int // holds shape up to rank 4, so that a view is one allocation
}

// with returns a tensor of data with a copy of shape.
func with(data []float32, shape []int) *Tensor {
	t := &Tensor{data: data}
	if len(shape) <= len(t.dims) {
		t.shape = t.dims[:len(shape):len(shape)]
		copy(t.shape, shape)
	} else {
		t.shape = cloneShape(shape)
	}
	return t
}

// New returns a zero-filled tensor of the given shape. It panics on a
// negative dimension.
func New(shape ...int) *Tensor {
	return with(make([]float32, numel(shape)), shape)
}

// From wraps data, without copying, as a tensor of the given shape. It panics
// when len(data) does not equal the product of shape.
func From(data []float32, shape ...int) *Tensor {
	if n := numel(shape); n != len(data) {
		panic(fmt.Sprintf("tensor: %d values for shape %v (%d elements)", len(data), shape, n))
	}
	return with(data, shape)
}

// Shape returns the dimensions, outermost first. The slice belongs to the
// tensor; do not modify it.
func (t *Tensor) Shape() []int { return t.shape }

// Data returns the elements in row-major order; writes go to the tensor.
func (t *Tensor) Data() []float32 { return t.data }

// Len is the number of elements.
func (t *Tensor) Len() int { return len(t.data) }

// Cols is the size of the last dimension, the length of one row (1 for a
// scalar).
func (t *Tensor) Cols() int {
	if len(t.shape) == 0 {
		return 1
	}
	return t.shape[len(t.shape)-1]
}

// Rows is the number of rows when the tensor is read as a matrix whose rows
// are its last dimension: the product of the other dimensions.
func (t *Tensor) Rows() int {
	r := 1
	for _, d := range t.shape[:max(len(t.shape)-1, 0)] {
		r *= d
	}
	return r
}

// Row returns row i of the matrix view, sharing storage.
func (t *Tensor) Row(i int) []float32 {
	c := t.Cols()
	return t.data[i*c : (i+1)*c : (i+1)*c]
}

// Reshape returns a view with a new shape and the same elements. It panics
// when the element counts differ.
func (t *Tensor) Reshape(shape ...int) *Tensor {
	return From(t.data, shape...)
}

// Slice returns the view of indices [lo, hi) along the first dimension,
// sharing storage: a KV cache is written and read through such views.
func (t *Tensor) Slice(lo, hi int) *Tensor {
	if len(t.shape) == 0 {
		panic("tensor: Slice of a scalar")
	}
	if lo < 0 || hi < lo || hi > t.shape[0] {
		panic(fmt.Sprintf("tensor: Slice [%d, %d) of dimension %d", lo, hi, t.shape[0]))
	}
	inner := 1
	for _, d := range t.shape[1:] {
		inner *= d
	}
	v := with(t.data[lo*inner:hi*inner:hi*inner], t.shape)
	v.shape[0] = hi - lo
	return v
}

// String gives the shape and, for small tensors, the values; for test
// failure messages.
func (t *Tensor) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "tensor%v", t.shape)
	if len(t.data) <= 16 {
		fmt.Fprintf(&b, "%v", t.data)
	}
	return b.String()
}

// SameShape reports whether a and b have identical dimensions.
func SameShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		if d < 0 {
			panic(fmt.Sprintf("tensor: negative dimension in shape %v", shape))
		}
		n *= d
	}
	return n
}

func cloneShape(shape []int) []int {
	return append(make([]int, 0, len(shape)), shape...)
}
