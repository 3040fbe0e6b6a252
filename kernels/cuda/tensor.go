//go:build cuda

package cuda

/*
#include "frognano_cuda.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/frognano/frognano/kernels"
	"github.com/frognano/frognano/kernels/tensor"
)

// Tensor is a dense row-major float32 array in device memory: a window of
// off..off+n elements of a buffer, so that Slice and Reshape are views that
// share the buffer, as the CPU backend's are.
type Tensor struct {
	dev   *device
	buf   *buffer
	off   int // elements
	n     int
	shape []int
}

// buffer owns one device allocation; a cleanup frees it when no Tensor
// refers to it any more.
type buffer struct {
	ptr uint64 // 0 for an empty allocation
}

// Shape returns the dimensions; the slice belongs to the tensor.
func (t *Tensor) Shape() []int { return t.shape }

// Len is the number of elements.
func (t *Tensor) Len() int { return t.n }

// Cols is the length of a row, the last dimension (1 for a scalar).
func (t *Tensor) Cols() int {
	if len(t.shape) == 0 {
		return 1
	}
	return t.shape[len(t.shape)-1]
}

// Rows is the product of the other dimensions.
func (t *Tensor) Rows() int {
	r := 1
	for _, d := range t.shape[:max(len(t.shape)-1, 0)] {
		r *= d
	}
	return r
}

func (t *Tensor) String() string { return fmt.Sprintf("cuda.Tensor%v", t.shape) }

// addr is the device address of the first element.
func (t *Tensor) addr() C.uint64_t {
	if t.buf.ptr == 0 {
		return 0
	}
	return C.uint64_t(t.buf.ptr + 4*uint64(t.off))
}

// overlaps reports whether t and u share device memory.
func (t *Tensor) overlaps(u *Tensor) bool {
	if t.n == 0 || u.n == 0 || t.buf != u.buf {
		return false
	}
	return t.off < u.off+u.n && u.off < t.off+t.n
}

// tensor unwraps a backend tensor, panicking on one from another backend or
// another device.
func (b *Backend) tensor(t kernels.Tensor) *Tensor {
	x, ok := t.(*Tensor)
	if !ok || x == nil {
		panic(fmt.Sprintf("cuda: %T is not a CUDA tensor", t))
	}
	if x.dev != b.dev {
		panic(fmt.Sprintf("cuda: tensor of %s used on %s", x.dev.info.Name, b.dev.info.Name))
	}
	return x
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		if d < 0 {
			panic(fmt.Sprintf("cuda: negative dimension in shape %v", shape))
		}
		n *= d
	}
	return n
}

// New allocates a zero-filled tensor.
func (b *Backend) New(shape ...int) kernels.Tensor {
	n := numel(shape)
	return &Tensor{dev: b.dev, buf: b.dev.alloc(n, true), n: n, shape: append([]int(nil), shape...)}
}

// FromHost copies h into a new device tensor. Unlike the CPU backend it
// does not keep h, which the caller may reuse at once.
func (b *Backend) FromHost(h *tensor.Tensor) kernels.Tensor {
	n := h.Len()
	t := &Tensor{dev: b.dev, buf: b.dev.alloc(n, false), n: n, shape: append([]int(nil), h.Shape()...)}
	if n > 0 {
		check("FromHost", C.fn_upload(b.dev.ctx, t.addr(), (*C.float)(unsafe.Pointer(&h.Data()[0])), C.size_t(n)))
	}
	runtime.KeepAlive(t)
	return t
}

// ToHost copies t into dst, waiting for every operation queued before it.
func (b *Backend) ToHost(dst []float32, t kernels.Tensor) {
	x := b.tensor(t)
	if len(dst) != x.n {
		panic(fmt.Sprintf("cuda: ToHost into %d floats from %v", len(dst), x.shape))
	}
	if x.n > 0 {
		check("ToHost", C.fn_download(b.dev.ctx, (*C.float)(unsafe.Pointer(&dst[0])), x.addr(), C.size_t(x.n)))
	}
	runtime.KeepAlive(x)
}

// Slice is the view of [lo, hi) along t's first dimension.
func (b *Backend) Slice(t kernels.Tensor, lo, hi int) kernels.Tensor {
	x := b.tensor(t)
	if len(x.shape) == 0 {
		panic("cuda: Slice of a scalar")
	}
	if lo < 0 || hi < lo || hi > x.shape[0] {
		panic(fmt.Sprintf("cuda: Slice [%d, %d) of dimension %d", lo, hi, x.shape[0]))
	}
	inner := numel(x.shape[1:])
	shape := append([]int(nil), x.shape...)
	shape[0] = hi - lo
	return &Tensor{dev: x.dev, buf: x.buf, off: x.off + lo*inner, n: (hi - lo) * inner, shape: shape}
}

// Reshape is a view of t with a new shape and the same elements.
func (b *Backend) Reshape(t kernels.Tensor, shape ...int) kernels.Tensor {
	x := b.tensor(t)
	if n := numel(shape); n != x.n {
		panic(fmt.Sprintf("cuda: Reshape of %v (%d elements) to %v (%d elements)", x.shape, x.n, shape, n))
	}
	return &Tensor{dev: x.dev, buf: x.buf, off: x.off, n: x.n, shape: append([]int(nil), shape...)}
}

// Copy sets dst = src (same element count and row length); overlapping
// ranges are copied as memmove would.
func (b *Backend) Copy(dst, src kernels.Tensor) {
	d, s := b.tensor(dst), b.tensor(src)
	mustSameLen("Copy", d, s)
	if d.n > 0 {
		check("Copy", C.fn_copy(b.dev.ctx, d.addr(), s.addr(), C.size_t(d.n)))
	}
	runtime.KeepAlive(d)
	runtime.KeepAlive(s)
}

// mustMatrix checks that x reads as a rows×cols matrix.
func mustMatrix(op, name string, x *Tensor, rows, cols int) {
	if x.Rows() != rows || x.Cols() != cols {
		panic(fmt.Sprintf("cuda: %s: %s has shape %v, want [%d, %d] (as rows × last dimension)", op, name, x.shape, rows, cols))
	}
}

// mustSameLen checks element-wise operands.
func mustSameLen(op string, xs ...*Tensor) {
	for _, x := range xs[1:] {
		if x.n != xs[0].n || x.Cols() != xs[0].Cols() {
			panic(fmt.Sprintf("cuda: %s: shapes %v and %v differ", op, xs[0].shape, x.shape))
		}
	}
}

// mustNotOverlap rejects a destination sharing memory with an input, for
// the operations whose kernels read inputs after writing the output.
func mustNotOverlap(op string, dst *Tensor, srcs ...*Tensor) {
	for _, s := range srcs {
		if dst.overlaps(s) {
			panic(fmt.Sprintf("cuda: %s: destination overlaps an input", op))
		}
	}
}
