package cpu

import (
	"github.com/frognano/frognano/kernels"
	"github.com/frognano/frognano/kernels/cpu/simd"
)

// Add sets dst = a + b.
func (Backend) Add(dst, a, b kernels.Tensor) {
	d, x, y := host(dst), host(a), host(b)
	mustSameLen("Add", d, x, y)
	dd, xd, yd := d.Data(), x.Data(), y.Data()
	forRows(len(dd), 1, func(lo, hi int) {
		dd, xd, yd := dd[lo:hi], xd[lo:hi], yd[lo:hi]
		for i := range dd {
			dd[i] = xd[i] + yd[i]
		}
	})
}

// Copy sets dst = src.
func (Backend) Copy(dst, src kernels.Tensor) {
	d, x := host(dst), host(src)
	mustSameLen("Copy", d, x)
	copy(d.Data(), x.Data())
}

// SwiGLU sets dst = silu(gate)·up: package simd's vector kernel when a
// vector level is on, else the Go loop.
func (Backend) SwiGLU(dst, gate, up kernels.Tensor) {
	d, g, u := host(dst), host(gate), host(up)
	mustSameLen("SwiGLU", d, g, u)
	dd, gd, ud := d.Data(), g.Data(), u.Data()
	forRows(len(dd), costExp, func(lo, hi int) {
		dd, gd, ud := dd[lo:hi], gd[lo:hi], ud[lo:hi]
		if simd.On() {
			simd.SwiGLU(dd, gd, ud)
			return
		}
		for i := range dd {
			x := gd[i]
			dd[i] = x / (1 + exp32(-x)) * ud[i]
		}
	})
}

// costExp is the cost of an exponential in the units of minParallelWork.
const costExp = 16
